import { expect, setDefaultTimeout, test } from 'bun:test'
import { startTestServer } from '../support/server.ts'
import { flowFixture } from '../oauth/support.ts'
import { freePort, ROOT } from '../support/process.ts'

// docs/mcp.md's walkthrough, as written: examples/agent-events.ts against a real server, a contact's reply, Ctrl-C.
setDefaultTimeout(60_000)

const server = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' } })

test('the example agent signs in, subscribes, prints a contact’s reply, and unsubscribes on Ctrl-C', async () => {
  const fixture = await flowFixture(server)
  const agent = Bun.spawn(['bun', 'examples/agent-events.ts', '--server', server.origin, '--email', fixture.email, '--password', fixture.password, '--port', String(freePort())], {
    cwd: ROOT,
    stdout: 'pipe',
    stderr: 'pipe',
  })
  let output = ''
  const reading = (async () => {
    for await (const chunk of agent.stdout) output += new TextDecoder().decode(chunk)
  })()
  const errors = new Response(agent.stderr).text()
  const waitFor = async (text: string) => {
    const until = Date.now() + 20_000
    while (!output.includes(text)) {
      if (Date.now() > until || agent.exitCode !== null) throw new Error(`no "${text}" from the example:\n${output}\n${await errors}`)
      await Bun.sleep(20)
    }
  }
  try {
    await waitFor('subscribed: evs_')
    expect(output).toContain('events: message.delivered, message.failed, message.inbound')
    const reply = await server.fetch(`/v0/account/${fixture.accountId}/sandbox/inbound?key=${fixture.apiKey}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: '+14155550123', body: 'Yes, Tuesday works' }),
    })
    expect(reply.status).toBe(201)
    await waitFor('message.inbound +14155550123: "Yes, Tuesday works"')
    agent.kill('SIGINT')
    await waitFor('unsubscribed')
    expect(await agent.exited).toBe(0)
    await reading
    const grants = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants?key=${fixture.apiKey}`)).json()) as { data: { id: string; client_name: string }[] }
    const example = grants.data.find((grant) => grant.client_name === 'Example agent')!
    const left = (await (await server.fetch(`/v0/account/${fixture.accountId}/grants/${example.id}/event-subscriptions?key=${fixture.apiKey}`)).json()) as { data: unknown[] }
    expect(left.data).toEqual([])
  } finally {
    agent.kill('SIGKILL')
  }
})
