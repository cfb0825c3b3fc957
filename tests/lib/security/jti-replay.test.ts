import { afterAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../../src/lib/db/client.ts'
import { deleteExpiredJtis, firstUseOfJti, MAX_JTI_LENGTH } from '../../../src/lib/security/jti-replay.ts'
import { createTestDatabase } from '../../support/database.ts'

const database = await createTestDatabase()
const db = database.handle.db
afterAll(() => database.drop())
const inAMinute = () => new Date(Date.now() + 60_000)

describe('firstUseOfJti', () => {
  test('the first use is accepted, the second refused; another namespace is another identifier', async () => {
    expect(await firstUseOfJti(db, { namespace: 'client:a', jti: 'j1', expiresAt: inAMinute() })).toBe(true)
    expect(await firstUseOfJti(db, { namespace: 'client:a', jti: 'j1', expiresAt: inAMinute() })).toBe(false)
    expect(await firstUseOfJti(db, { namespace: 'client:b', jti: 'j1', expiresAt: inAMinute() })).toBe(true)
  })

  test('of twenty simultaneous uses of one identifier, exactly one is accepted', async () => {
    const answers = await Promise.all(Array.from({ length: 20 }, () => firstUseOfJti(db, { namespace: 'dpop:k', jti: 'race', expiresAt: inAMinute() })))
    expect(answers.filter(Boolean)).toHaveLength(1)
  })

  test('an empty or overlong identifier is refused and not stored', async () => {
    expect(await firstUseOfJti(db, { namespace: 'client:a', jti: '', expiresAt: inAMinute() })).toBe(false)
    expect(await firstUseOfJti(db, { namespace: 'client:a', jti: 'x'.repeat(MAX_JTI_LENGTH + 1), expiresAt: inAMinute() })).toBe(false)
    const [row] = await queryRows<{ n: number }>(db, sql`select count(*)::int as n from used_jtis where namespace = 'client:a' and jti <> 'j1'`)
    expect(Number(row!.n)).toBe(0)
  })

  test('expired identifiers are forgotten by the sweep, live ones kept', async () => {
    expect(await firstUseOfJti(db, { namespace: 'idp:x', jti: 'old', expiresAt: new Date(Date.now() - 1000) })).toBe(true)
    expect(await deleteExpiredJtis(db)).toBe(1)
    expect(await firstUseOfJti(db, { namespace: 'client:a', jti: 'j1', expiresAt: inAMinute() })).toBe(false)
  })
})
