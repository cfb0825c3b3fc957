import { describe, expect, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { createTestDatabase } from '../support/database.ts'

const server = await startTestServer()

describe('operations', () => {
  test('GET /healthz and /readyz', async () => {
    const health = await server.fetch('/healthz')
    expect(health.status).toBe(200)
    expect(await health.json()).toEqual({ status: 'ok' })
    expect(health.headers.get('x-request-id')).toMatch(/^req_/)
    expect(await (await server.fetch('/readyz')).json()).toEqual({ status: 'ready' })
  })

  test('/readyz answers 503 when the database is gone', async () => {
    const database = await createTestDatabase()
    const doomed = await startTestServer({ database })
    await database.drop()
    const response = await doomed.fetch('/readyz')
    expect(response.status).toBe(503)
    expect(await response.json()).toMatchObject({ code: 'not_ready' })
    expect((await doomed.fetch('/healthz')).status).toBe(200)
    await doomed.stop()
  })

  test('/v0/openapi.json is an OpenAPI 3.1 document built from the route schemas', async () => {
    const response = await server.fetch('/v0/openapi.json')
    expect(response.status).toBe(200)
    const document = await response.json()
    expect(document.openapi).toStartWith('3.1')
    expect(document.servers).toEqual([{ url: server.origin }])
    expect(document.components.securitySchemes.apiKey).toEqual(expect.objectContaining({ type: 'apiKey', in: 'query', name: 'key' }))
    const account = document.paths['/v0/account']
    expect(account.get.responses['200'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/Account' })
    expect(document.components.schemas.Account.required).toEqual(['id', 'name', 'created_at'])
    expect(account.patch.requestBody.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/UpdateAccountRequest' })
    expect(document.components.schemas.UpdateAccountRequest.properties.name.maxLength).toBe(200)
    expect(Object.keys(document.paths).some((path) => path.includes('docs'))).toBe(false)
  })

  test('/v0/docs renders the reference from local assets only', async () => {
    const page = await (await server.fetch('/v0/docs')).text()
    expect(page).toContain('/v0/openapi.json')
    const assets = [...page.matchAll(/(?:src|href)="([^"]+)"/g)].map((match) => match[1]!)
    expect(assets.length).toBeGreaterThan(0)
    for (const asset of assets) {
      expect(asset.startsWith('/v0/docs/assets/')).toBe(true)
      const response = await server.fetch(asset)
      expect(response.status).toBe(200)
      expect((await response.arrayBuffer()).byteLength).toBeGreaterThan(10_000)
    }
    expect((await server.fetch('/v0/docs/assets/..%2Fpackage.json')).status).toBe(404)
    expect((await server.fetch('/v0/docs/assets/index.js')).status).toBe(404)
  })
})
