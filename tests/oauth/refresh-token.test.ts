import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { PGlite } from '@electric-sql/pglite'
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator'
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator'
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js'
import type { PgliteDatabase } from 'drizzle-orm/pglite'
import { eq, sql } from 'drizzle-orm'
import postgres from 'postgres'
import { decodeJwt } from 'jose'
import { startTestServer } from '../support/server.ts'
import { testDatabaseMode } from '../support/database.ts'
import { accounts, grants, refreshTokens, users } from '../../src/lib/db/schema.ts'
import { pgliteDatabase, postgresDatabase, queryRows, type DatabaseHandle } from '../../src/lib/db/client.ts'
import { MIGRATIONS_FOLDER, migratePgliteDatabase, migratePostgresDatabase } from '../../src/lib/db/migrate.ts'
import { sha256Hex } from '../../src/lib/security/crypto.ts'
import { authorizeAndRedeem, flowFixture, postJson } from './support.ts'

// The refresh grant's successor pair, sealed for the grace window, must not outlive it: with a
// copy of the data (and of the key, which sits beside it on PGlite) it would yield a live token.
const GRACE_S = 1
setDefaultTimeout(20_000)
const server = await startTestServer({ env: { OAUTH_REFRESH_GRACE_S: String(GRACE_S) } })
const fixture = await flowFixture(server)
const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } })
const refresh = (refreshToken: string) => postJson(server, '/v0/auth/token/refresh', { refresh_token: refreshToken, client_id: fixture.clientId })

/** Rows still holding a sealed successor although their window ended (by the database's clock). */
const sealedPastTheWindow = (db = server.database.handle.db, graceSeconds = GRACE_S) =>
  queryRows<{ token_hash: string }>(
    db,
    sql`select token_hash from ${refreshTokens}
        where successor_ciphertext is not null and rotated_at <= now() - make_interval(secs => ${graceSeconds})`,
  )

const rowOf = async (token: string) => (await server.database.handle.db.select().from(refreshTokens).where(eq(refreshTokens.tokenHash, sha256Hex(token))))[0]!

describe('the successor kept for the grace window', () => {
  test('is returned again within the window, erased when it ends; a replay after it is still refused and revokes the grant', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const first = await (await refresh(tokens.refresh_token)).json()
    const again = await (await refresh(tokens.refresh_token)).json()
    expect(again.refresh_token).toBe(first.refresh_token)
    expect(again.access_token).toBe(first.access_token)
    expect((await rowOf(tokens.refresh_token)).successorCiphertext).toStartWith('v1.')

    // Nothing reads the row after the window: the erasure cannot wait for a replay.
    const deadline = Date.now() + GRACE_S * 1000 + 4_000
    await Bun.sleep(GRACE_S * 1000)
    while ((await sealedPastTheWindow()).length > 0 && Date.now() < deadline) await Bun.sleep(100)
    expect(await sealedPastTheWindow()).toEqual([])
    expect((await rowOf(tokens.refresh_token)).successorCiphertext).toBeNull()
    expect((await rowOf(tokens.refresh_token)).rotatedAt).not.toBeNull()

    const replay = await refresh(tokens.refresh_token)
    expect(replay.status).toBe(400)
    expect((await replay.json()).error).toBe('invalid_grant')
    const [grant] = await server.database.handle.db.select().from(grants).where(eq(grants.id, decodeJwt(first.access_token).grant_id as string))
    expect(grant!.revokedAt).not.toBeNull()
    await server.instance.syncCaches()
    expect((await server.fetch('/v0/account', bearer(first.access_token))).status).toBe(401)
    expect((await (await refresh(first.refresh_token)).json()).error).toBe('invalid_grant')
  })

  test('a token rotated again keeps answering concurrent refreshes within its own window', async () => {
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const first = await (await refresh(tokens.refresh_token)).json()
    await Bun.sleep(GRACE_S * 1000 + 1_500)
    const second = await (await refresh(first.refresh_token)).json()
    const [a, b] = await Promise.all([refresh(first.refresh_token).then((r) => r.json()), refresh(first.refresh_token).then((r) => r.json())])
    expect([a.refresh_token, b.refresh_token]).toEqual([second.refresh_token, second.refresh_token])
    expect((await server.fetch('/v0/account', bearer(second.access_token))).status).toBe(200)
  })

  test('with a zero window nothing is sealed at all, and a replay revokes the grant', async () => {
    const instant = await startTestServer({ env: { OAUTH_REFRESH_GRACE_S: '0' } })
    const them = await flowFixture(instant)
    const { tokens } = await authorizeAndRedeem(instant, them)
    const rotate = (token: string) => postJson(instant, '/v0/auth/token/refresh', { refresh_token: token, client_id: them.clientId })
    const first = await (await rotate(tokens.refresh_token)).json()
    const [row] = await instant.database.handle.db.select().from(refreshTokens).where(eq(refreshTokens.tokenHash, sha256Hex(tokens.refresh_token)))
    expect(row!.rotatedAt).not.toBeNull()
    expect(row!.successorCiphertext).toBeNull()
    expect((await (await rotate(tokens.refresh_token)).json()).error).toBe('invalid_grant')
    expect((await (await rotate(first.refresh_token)).json()).error).toBe('invalid_grant')
    await instant.stop()
  })
})

/**
 * A database as the release before this migration left it: migrated up to `lastTag` only, from a
 * copy of drizzle/ whose journal ends there. `finish()` applies the rest, as a start would.
 */
async function databaseMigratedTo(lastTag: string): Promise<{ handle: DatabaseHandle; finish(): Promise<void>; drop(): Promise<void> }> {
  const folder = mkdtempSync(join(tmpdir(), 'migrations-'))
  const journal = JSON.parse(readFileSync(join(MIGRATIONS_FOLDER, 'meta/_journal.json'), 'utf8')) as { entries: { tag: string }[] }
  const last = journal.entries.findIndex((entry) => entry.tag === lastTag)
  expect(last).toBeGreaterThanOrEqual(0)
  journal.entries = journal.entries.slice(0, last + 1)
  mkdirSync(join(folder, 'meta'))
  writeFileSync(join(folder, 'meta/_journal.json'), JSON.stringify(journal))
  for (const entry of journal.entries) copyFileSync(join(MIGRATIONS_FOLDER, `${entry.tag}.sql`), join(folder, `${entry.tag}.sql`))

  const mode = await testDatabaseMode()
  try {
    if (mode.kind === 'pglite') {
      const handle = pgliteDatabase(await PGlite.create())
      await migratePglite(handle.db as unknown as PgliteDatabase, { migrationsFolder: folder })
      return { handle, finish: () => migratePgliteDatabase(handle), drop: () => handle.close() }
    }
    const name = `msgsvc_test_${randomBytes(6).toString('hex')}`
    const admin = postgres(mode.serverUrl, { max: 1, onnotice: () => {} })
    await admin.unsafe(`create database "${name}"`)
    await admin.end({ timeout: 5 })
    const url = new URL(mode.serverUrl)
    url.pathname = `/${name}`
    const migrator = postgres(url.toString(), { max: 1, onnotice: () => {} })
    await migratePostgres(drizzlePostgres(migrator), { migrationsFolder: folder })
    await migrator.end({ timeout: 5 })
    const handle = postgresDatabase(url.toString(), { max: 2 })
    return {
      handle,
      finish: () => migratePostgresDatabase(url.toString()),
      async drop() {
        await handle.close()
        const dropper = postgres(mode.serverUrl, { max: 1, onnotice: () => {} })
        await dropper.unsafe(`drop database if exists "${name}" with (force)`)
        await dropper.end({ timeout: 5 })
      },
    }
  } finally {
    rmSync(folder, { recursive: true, force: true })
  }
}

describe('the migration that erases successors kept by earlier releases', () => {
  test('erases every successor older than the longest window allowed (300 s); younger ones are left to the running sweep', async () => {
    const previous = await databaseMigratedTo('0007_deliveries_autovacuum')
    try {
      const { db } = previous.handle
      await db.insert(accounts).values({ id: 'acc_m', name: 'Migrated' })
      await db.insert(users).values({ id: 'usr_m', accountId: 'acc_m', email: 'm@example.com', passwordHash: 'x' })
      // In SQL: the schema of today has columns (oauth_clients.jwks, grants.last_used_at, refresh_tokens.dpop_jkt, …) this older database lacks.
      await db.execute(
        sql`insert into oauth_clients (id, redirect_uris, grant_types, response_types, token_endpoint_auth_method, application_type)
            values ('cli_m', array['http://127.0.0.1/cb'], array['authorization_code', 'refresh_token'], array['code'], 'none', 'native')`,
      )
      await db.execute(sql`insert into grants (id, client_id, user_id, account_id, scope, audience) values ('grt_m', 'cli_m', 'usr_m', 'acc_m', 'account:read', array['x'])`)
      const expiresAt = new Date(Date.now() + 86_400_000).toISOString()
      await db.execute(sql`insert into refresh_tokens (token_hash, grant_id, expires_at, rotated_at, successor_ciphertext) values
        ('rotated-last-month', 'grt_m', ${expiresAt}::timestamptz, now() - interval '30 days', 'v1.old'),
        ('rotated-an-hour-ago', 'grt_m', ${expiresAt}::timestamptz, now() - interval '1 hour', 'v1.hour'),
        ('rotated-just-now', 'grt_m', ${expiresAt}::timestamptz, now() - interval '5 seconds', 'v1.now'),
        ('live', 'grt_m', ${expiresAt}::timestamptz, null, null)`)
      await previous.finish()
      const rows = await db.select({ tokenHash: refreshTokens.tokenHash, sealed: refreshTokens.successorCiphertext }).from(refreshTokens).orderBy(refreshTokens.tokenHash)
      expect(rows).toEqual([
        { tokenHash: 'live', sealed: null },
        { tokenHash: 'rotated-an-hour-ago', sealed: null },
        { tokenHash: 'rotated-just-now', sealed: 'v1.now' },
        { tokenHash: 'rotated-last-month', sealed: null },
      ])
      expect(await sealedPastTheWindow(db, 300)).toEqual([])
    } finally {
      await previous.drop()
    }
  })
})
