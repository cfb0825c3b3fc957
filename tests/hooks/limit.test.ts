import { describe, expect, test } from 'bun:test'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { count, eq } from 'drizzle-orm'
import { startTestServer } from '../support/server.ts'
import { authorizeAndRedeem, flowFixture } from '../oauth/support.ts'
import { hooks } from '../../src/lib/db/schema.ts'

// HOOKS_PER_ACCOUNT: one account cannot fan an event out to an unbounded number of subscriptions.
const LIMIT = 3
const server = await startTestServer({ env: { HOOKS_PER_ACCOUNT: String(LIMIT) } })
type Owner = { accountId: string; secret: string }
const hooksPath = (owner: Owner, suffix = '') => `/v0/account/${owner.accountId}/hooks${suffix}?key=${owner.secret}`
let nth = 0
const create = (owner: Owner, headers: Record<string, string> = {}) =>
  server.fetch(hooksPath(owner), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ event: 'message.inbound', target_url: `https://hooks.example.com/${++nth}` }),
  })
const held = async (owner: Owner) => (await server.database.handle.db.select({ n: count() }).from(hooks).where(eq(hooks.accountId, owner.accountId)))[0]!.n

async function expectLimitProblem(response: Response) {
  expect(response.status).toBe(409)
  expect(response.headers.get('content-type')).toStartWith('application/problem+json')
  const problem = await response.json()
  expect(problem).toMatchObject({ status: 409, code: 'hooks_limit_reached', title: 'Conflict' })
  expect(problem.detail).toContain(`${LIMIT} subscriptions`)
  expect(problem.detail).toContain('HOOKS_PER_ACCOUNT')
  expect(problem.request_id).toMatch(/^req_/)
}

describe('HOOKS_PER_ACCOUNT', () => {
  test('at the limit the next create is refused with a problem body saying the limit and how to free a slot; deleting one frees it', async () => {
    const owner = await server.createAccountWithKey('At the limit')
    const created: string[] = []
    for (let i = 0; i < LIMIT; i++) {
      const response = await create(owner)
      expect(response.status).toBe(201)
      created.push((await response.json()).id)
    }
    await expectLimitProblem(await create(owner))
    expect(await held(owner)).toBe(LIMIT)

    expect((await server.fetch(hooksPath(owner, `/${created[0]}`), { method: 'DELETE' })).status).toBe(204)
    expect((await create(owner)).status).toBe(201)
    await expectLimitProblem(await create(owner))
    expect(await held(owner)).toBe(LIMIT)
  })

  test('concurrent creates at the edge never exceed the limit', async () => {
    for (let round = 0; round < 3; round++) {
      const owner = await server.createAccountWithKey(`Race ${round}`)
      expect((await create(owner)).status).toBe(201)
      const responses = await Promise.all(Array.from({ length: 12 }, () => create(owner)))
      const statuses = responses.map((response) => response.status).sort()
      expect(statuses).toEqual([...Array(LIMIT - 1).fill(201), ...Array(12 - (LIMIT - 1)).fill(409)])
      for (const response of responses.filter((r) => r.status === 409)) await expectLimitProblem(response)
      expect(await held(owner)).toBe(LIMIT)
    }
  })

  test('another account is unaffected', async () => {
    const full = await server.createAccountWithKey('Full')
    for (let i = 0; i < LIMIT; i++) expect((await create(full)).status).toBe(201)
    await expectLimitProblem(await create(full))
    const other = await server.createAccountWithKey('Other')
    for (let i = 0; i < LIMIT; i++) expect((await create(other)).status).toBe(201)
    expect(await held(other)).toBe(LIMIT)
  })

  test('a refused create with an Idempotency-Key leaves no record: the same key succeeds once a slot is free', async () => {
    const owner = await server.createAccountWithKey('Idempotent')
    const ids: string[] = []
    for (let i = 0; i < LIMIT; i++) ids.push((await (await create(owner)).json()).id)
    const body = JSON.stringify({ event: 'message.failed', target_url: 'https://hooks.example.com/retry-me' })
    const post = () =>
      server.fetch(hooksPath(owner), { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'limit-1' }, body })
    await expectLimitProblem(await post())
    expect((await server.fetch(hooksPath(owner, `/${ids[0]}`), { method: 'DELETE' })).status).toBe(204)
    expect((await post()).status).toBe(201)
  })

  test('the MCP tool create_webhook answers the same problem', async () => {
    const fixture = await flowFixture(server)
    const owner = { accountId: fixture.accountId, secret: fixture.apiKey }
    for (let i = 0; i < LIMIT; i++) expect((await create(owner)).status).toBe(201)
    const { tokens } = await authorizeAndRedeem(server, fixture)
    const client = new Client({ name: 'test', version: '1.0.0' })
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${server.config.baseUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${tokens.access_token}` } } }),
    )
    try {
      const result = (await client.callTool({ name: 'create_webhook', arguments: { event: 'message.inbound', target_url: 'https://hooks.example.com/mcp' } })) as {
        isError?: boolean
        content: { text: string }[]
      }
      expect(result.isError).toBe(true)
      const problem = JSON.parse(result.content[0]!.text)
      expect(problem).toMatchObject({ status: 409, code: 'hooks_limit_reached' })
      expect(problem.detail).toContain('HOOKS_PER_ACCOUNT')
      expect(await held(owner)).toBe(LIMIT)
    } finally {
      await client.close()
    }
  })
})
