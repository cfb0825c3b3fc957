import { parseArgs } from 'node:util'
import { count } from 'drizzle-orm'
import { Value } from '@sinclair/typebox/value'
import type { TSchema } from '@sinclair/typebox'
import type { Database } from '../lib/db/client.ts'
import { accounts } from '../lib/db/schema.ts'
import { ApiError } from '../lib/http/errors.ts'
import { newSecret } from '../lib/security/crypto.ts'
import { isId } from '../lib/db/ids.ts'
import { createAccount, createUser, findAccount, toAccountResource } from '../accounts/service.ts'
import { AccountNameSchema, EmailSchema, PasswordSchema } from '../accounts/schemas.ts'
import { createApiKey, listApiKeys, revokeApiKey, type ApiKey } from '../auth/api-keys.ts'
import type { SecretBox } from '../lib/security/secret-box.ts'
import { createLogger, type Logger } from '../lib/runtime/logger.ts'
import { RETIRED_KEY_RETENTION_MS, SigningKeyError, rotateSigningKey } from '../oauth/signing-keys.ts'

export interface CommandContext {
  db: Database
  /** `{base_url}`, for the example calls the CLI prints. */
  baseUrl: string
  /**
   * The box that seals signing keys, for `keys rotate`. Opened on demand: without ENCRYPTION_KEY it
   * comes from a key file, which other commands have no reason to create.
   */
  openSecretBox?: () => Promise<SecretBox>
  /**
   * Where audit lines go: the server's logger when the command came through its CLI socket.
   * Unset (the CLI run locally): JSON lines on stderr, stdout being the command's output.
   */
  logger?: Logger
}

/**
 * One administrative action, logged as `{"msg":"audit","audit":true,"action":…}` with the ids it
 * involved. Never a secret, a password or an email: ids only (docs/operations.md#logs).
 */
export interface AuditEntry {
  action: 'account.created' | 'user.created' | 'api_key.created' | 'api_key.revoked' | 'signing_key.rotated'
  [id: string]: string | null
}

export interface CommandResult {
  exitCode: number
  output: string
}

export const USAGE = `Usage: bun run cli <command> [options] [--json]

  demo                                               create a demo account, user and API key
  account create --name <name>
  user create --account <acc_id> --email <email> --password <password>
  apikey create --account <acc_id> [--name <name>]
  apikey list --account <acc_id>
  apikey revoke --id <key_id>
  keys rotate                                        sign new tokens with a new key; the old one verifies for 24 h
  listen --event <type> [--forward-to <url>]         webhooks to this machine, forwarded to your app (listen --help)`

class UsageError extends Error {}

function valid<T>(schema: TSchema, value: unknown, option: string): T {
  const error = Value.Errors(schema, value).First()
  if (error) throw new UsageError(`--${option}: ${error.message}`)
  return value as T
}

function required(values: Record<string, unknown>, option: string): string {
  const value = values[option]
  if (typeof value !== 'string' || value.length === 0) throw new UsageError(`--${option} is required`)
  return value
}

async function existingAccount(db: Database, accountId: string) {
  if (!isId('acc', accountId)) throw new UsageError('--account: not an account id (acc_…)')
  const account = await findAccount(db, accountId)
  if (!account) throw new UsageError(`--account: no account ${accountId}`)
  return account
}

const apiKeyResource = (key: ApiKey) => ({
  id: key.id,
  account_id: key.accountId,
  name: key.name ?? undefined,
  secret_prefix: key.secretPrefix,
  created_at: key.createdAt.toISOString(),
  revoked_at: key.revokedAt?.toISOString(),
})

type Handler = (values: Record<string, unknown>, context: CommandContext) => Promise<{ json: unknown; text: string; audit?: AuditEntry[] }>

const COMMANDS: Record<string, Handler> = {
  async 'account create'(values, { db }) {
    const name = valid<string>(AccountNameSchema, required(values, 'name'), 'name')
    const account = toAccountResource(await createAccount(db, { name }))
    return { json: account, text: `Created account ${account.id} (${account.name})`, audit: [{ action: 'account.created', account_id: account.id }] }
  },

  async 'user create'(values, { db }) {
    const account = await existingAccount(db, required(values, 'account'))
    const email = valid<string>(EmailSchema, required(values, 'email'), 'email')
    const password = valid<string>(PasswordSchema, required(values, 'password'), 'password')
    const user = await createUser(db, { accountId: account.id, email, password })
    const json = { id: user.id, account_id: user.accountId, email: user.email, created_at: user.createdAt.toISOString() }
    return { json, text: `Created user ${user.id} <${user.email}> in ${account.id}`, audit: [{ action: 'user.created', user_id: user.id, account_id: account.id }] }
  },

  async 'apikey create'(values, { db, baseUrl }) {
    const account = await existingAccount(db, required(values, 'account'))
    const name = values.name === undefined ? undefined : valid<string>(AccountNameSchema, values.name, 'name')
    const { key, secret } = await createApiKey(db, { accountId: account.id, name })
    return {
      json: { ...apiKeyResource(key), secret },
      text: [
        `Created API key ${key.id} for ${account.id}. The secret is shown once; store it now:`,
        `  ${secret}`,
        `Try it: curl '${baseUrl}/account?key=${secret}'`,
      ].join('\n'),
      audit: [{ action: 'api_key.created', api_key_id: key.id, account_id: account.id }],
    }
  },

  async 'apikey list'(values, { db }) {
    const account = await existingAccount(db, required(values, 'account'))
    const keys = (await listApiKeys(db, account.id)).map(apiKeyResource)
    const lines = keys.map((key) => `${key.id}  ${key.secret_prefix}…  ${key.revoked_at ? `revoked ${key.revoked_at}` : 'active'}`)
    return { json: { data: keys }, text: lines.length ? lines.join('\n') : 'No API keys.' }
  },

  async 'apikey revoke'(values, { db }) {
    const id = required(values, 'id')
    if (!isId('key', id)) throw new UsageError('--id: not an API key id (key_…)')
    if (!(await revokeApiKey(db, id))) throw new UsageError(`--id: no active API key ${id}`)
    return { json: { id, revoked: true }, text: `Revoked ${id}; every instance refuses it within 5 seconds.`, audit: [{ action: 'api_key.revoked', api_key_id: id }] }
  },

  async 'keys rotate'(_values, { db, openSecretBox }) {
    if (!openSecretBox) throw new Error('keys rotate needs openSecretBox in the command context')
    const { kid, retiredKid } = await rotateSigningKey(db, await openSecretBox())
    const retainedHours = RETIRED_KEY_RETENTION_MS / 3_600_000
    return {
      json: { kid, retired_kid: retiredKid },
      text: retiredKid
        ? `New signing key ${kid}; ${retiredKid} is retired and still verifies tokens for ${retainedHours} h. Running instances switch within seconds.`
        : `New signing key ${kid} (there was no active key).`,
      audit: [{ action: 'signing_key.rotated', kid, retired_kid: retiredKid ?? null }],
    }
  },

  async demo(_values, context) {
    const { db, baseUrl } = context
    const [existing] = await db.select({ n: count() }).from(accounts)
    const suffix = existing && existing.n > 0 ? `+${newSecret('').slice(0, 6).toLowerCase()}` : ''
    const account = await createAccount(db, { name: 'Demo account' })
    const email = `demo${suffix}@example.com`
    const password = newSecret('').slice(0, 20)
    const user = await createUser(db, { accountId: account.id, email, password })
    const { key, secret } = await createApiKey(db, { accountId: account.id, name: 'demo' })
    return {
      json: {
        account: toAccountResource(account),
        user: { id: user.id, email, password },
        api_key: { ...apiKeyResource(key), secret },
      },
      text: [
        `Demo account ${account.id}`,
        `  user      ${email} / ${password}`,
        `  API key   ${secret}   (shown once)`,
        '',
        `Try it: curl '${baseUrl}/account?key=${secret}'`,
        `Dashboard: open ${baseUrl.replace(/\/v0$/, '')}/dashboard and sign in as ${email}`,
      ].join('\n'),
      audit: <AuditEntry[]>[
        { action: 'account.created', account_id: account.id },
        { action: 'user.created', user_id: user.id, account_id: account.id },
        { action: 'api_key.created', api_key_id: key.id, account_id: account.id },
      ],
    }
  },
}

/** Audit lines of a CLI run outside the server: stderr, whatever LOG_LEVEL says (they are the record of what was done). */
const stderrLogger = () => createLogger('info', (line) => console.error(line))

/** Runs one CLI command against a database; the caller decides where output goes. */
export async function runCommand(argv: string[], context: CommandContext): Promise<CommandResult> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        json: { type: 'boolean', default: false },
        name: { type: 'string' },
        account: { type: 'string' },
        email: { type: 'string' },
        password: { type: 'string' },
        id: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    })
  } catch (error) {
    return { exitCode: 2, output: `${(error as Error).message}\n\n${USAGE}` }
  }
  const { values, positionals } = parsed
  if (values.help || positionals.length === 0) return { exitCode: values.help ? 0 : 2, output: USAGE }
  const name = positionals.join(' ')
  const handler = COMMANDS[name]
  if (!handler) return { exitCode: 2, output: `Unknown command: ${name}\n\n${USAGE}` }
  try {
    const { json, text, audit = [] } = await handler(values, context)
    const logger = context.logger ?? stderrLogger()
    for (const entry of audit) logger.info('audit', { audit: true, command: name, ...entry })
    return { exitCode: 0, output: values.json ? JSON.stringify(json, null, 2) : text }
  } catch (error) {
    if (error instanceof UsageError || error instanceof ApiError || error instanceof SigningKeyError) {
      const message = error instanceof ApiError ? error.detail : error.message
      return { exitCode: error instanceof UsageError ? 2 : 1, output: values.json ? JSON.stringify({ error: message }) : `error: ${message}` }
    }
    throw error
  }
}
