#!/usr/bin/env bun
/**
 * `GET /v0/account` on our real server (`bun src/main.ts`), with an API key (`?key=`) and with a
 * bearer token (from the real OAuth flow over HTTP), against a bare `Bun.serve` hello-world
 * (bench/bare-server.ts), with wrk on loopback. Target (issue 25): at LOG_LEVEL=info (the default)
 * ≥ 0.6 of bare's requests/s, with an API key and with a bearer token. Also with a DPoP-bound token
 * (issue 35: what a proof costs per request, a signature check and a replay-cache insert): each
 * request carries a fresh proof, signed before the phase (as many as the bearer phase's
 * requests/s, at most 20,000/s, allow for, and a third again) and read by wrk from a file
 * (bench/dpop-proofs.lua).
 *
 *   bun bench/account.ts                 # or bun run bench:account; PostgreSQL on 127.0.0.1:5432 (a fresh database)
 *   bun bench/account.ts --db pglite     # PGlite in a fresh temporary DATA_DIR
 *
 * Each round: bare, then our server at LOG_LEVEL=info, then at warn (request logging off), each
 * alone in its own process; medians over the rounds. Next to req/s: the server's CPU per request
 * (from /proc), which moves much less than req/s, and the cores other processes used meanwhile.
 * API_RATE_LIMIT=100000: every request goes through the limiter, none is refused.
 *
 * Options: --rounds 3, --duration 10 (s measured per phase), --warmup 3, --connections 64,
 * --threads 2, --skip-healthz, --skip-bearer (and DPoP), --skip-dpop, --otlp (traces on, 100 % sampled, to a sink in this
 * process: what tracing costs), --pg-url <admin URL> (default
 * postgres://postgres@127.0.0.1:5432/postgres or $BENCH_PG_URL; loopback only).
 * Everything is stopped and removed on the way out; exit code 1 on any error (a non-2xx under load).
 */
import { createHash, randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose'
import {
  BUN, DEFAULT_PG_URL, childEnv, commandLine, expectStatus, fail, fmtFixed, fmtInt, fmtMs, freePort, median, printMachine, printProblems,
  printTable, redact, runCommand, runMain, serverProblems, startOtlpSink, startServer, startService, stopChild, storage, tempDir, verdict, wrk, wrkVersion,
  type Server,
} from './harness.ts'

const cli = commandLine(import.meta.url, {
  db: { type: 'string', default: 'postgres' },
  rounds: { type: 'string', default: '3' },
  duration: { type: 'string', default: '10' },
  warmup: { type: 'string', default: '3' },
  connections: { type: 'string', default: '64' },
  threads: { type: 'string', default: '2' },
  'skip-healthz': { type: 'boolean', default: false },
  'skip-bearer': { type: 'boolean', default: false },
  'skip-dpop': { type: 'boolean', default: false },
  'pg-url': { type: 'string', default: process.env.BENCH_PG_URL ?? DEFAULT_PG_URL },
  otlp: { type: 'boolean', default: false },
})
const OTLP = cli.flag('otlp') ? startOtlpSink() : undefined
const DB = cli.choice('db', ['postgres', 'pglite'])
const ROUNDS = cli.integer('rounds', 1, 10)
const LOAD = { seconds: cli.integer('duration', 1, 120), threads: cli.integer('threads', 1, 64), connections: cli.integer('connections', 1, 1024) }
const WARMUP = cli.integer('warmup', 0, 60)
const PG_URL = cli.loopbackUrl(cli.string('pg-url'), '--pg-url')
const TARGET = 0.6
// A proof is accepted within 60 s of its iat, and signing one here takes about 100 µs: the proofs of
// a run are signed for at most this many requests a second (a DPoP request costs the server a
// signature check, so it cannot go faster), else the first would be stale before wrk reached them.
const DPOP_MAX_RPS = 20_000
const REDIRECT_URI = 'http://127.0.0.1:8765/callback'

interface Demo {
  accountId: string
  secret: string
  user: { email: string; password: string }
  clientId: string | null
}

/** Sign in and a PKCE authorization code: the token request's body (README, "OAuth in five steps"). */
async function codeExchange(origin: string, demo: Demo): Promise<Record<string, string>> {
  const base = `${origin}/v0`
  const login = await expectStatus(200, 'POST', `${base}/auth/login`, { body: demo.user })
  const verifier = randomBytes(48).toString('base64url')
  const challenge = createHash('sha256').update(verifier).digest('base64url')
  const authorize = { client_id: demo.clientId, redirect_uri: REDIRECT_URI, id_token: login.id_token, code_challenge: challenge, code_challenge_method: 'S256', state: 'bench' }
  const { code } = await expectStatus(200, 'POST', `${base}/auth/authorize`, { body: authorize })
  return { grant_type: 'authorization_code', code, client_id: demo.clientId!, redirect_uri: REDIRECT_URI, code_verifier: verifier }
}

/** A bearer token from the OAuth flow. */
async function accessToken(origin: string, demo: Demo): Promise<string> {
  const tokens = await expectStatus(200, 'POST', `${origin}/v0/auth/token`, { body: await codeExchange(origin, demo) })
  if (typeof tokens.access_token !== 'string') fail('POST /v0/auth/token answered no access_token')
  return tokens.access_token
}

/** The server's PUBLIC_URL (its default: the bench sets none), against which a proof's htu is checked. */
const publicOrigin = (server: Server) => `http://localhost:${new URL(server.origin).port}`

/** The bench's DPoP key (docs/oauth.md#dpop), as a client holds one. */
interface DpopKey {
  privateKey: CryptoKey
  jwk: JWK
}

async function dpopKey(): Promise<DpopKey> {
  const { privateKey, publicKey } = await generateKeyPair('ES256')
  return { privateKey, jwk: await exportJWK(publicKey) }
}

function dpopProof(key: DpopKey, claims: { htm: string; htu: string; nonce?: string; ath?: string }): Promise<string> {
  return new SignJWT({ ...claims, jti: randomBytes(12).toString('base64url'), iat: Math.floor(Date.now() / 1000) })
    .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: key.jwk })
    .sign(key.privateKey)
}

/** The server's current DPoP nonce, from the use_dpop_nonce answer to a proof without one. */
async function dpopNonce(url: string, method: string, key: DpopKey, publicUrl: string, init: RequestInit = {}): Promise<string> {
  const proof = await dpopProof(key, { htm: method, htu: publicUrl })
  const response = await fetch(url, { ...init, method, headers: { ...(init.headers as Record<string, string>), dpop: proof } })
  const nonce = response.headers.get('dpop-nonce')
  if (!nonce) fail(`${method} ${url} with a proof without a nonce answered ${response.status} and no DPoP-Nonce`)
  return nonce
}

/** A DPoP-bound token from the same flow, the token request carrying a proof (with the server's nonce). */
async function dpopAccessToken(server: Server, demo: Demo, key: DpopKey): Promise<string> {
  const publicUrl = `${publicOrigin(server)}/v0/auth/token`
  const url = `${server.origin}/v0/auth/token`
  const form = { headers: { 'content-type': 'application/x-www-form-urlencoded' } }
  const nonce = await dpopNonce(url, 'POST', key, publicUrl, { ...form, body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'none', client_id: demo.clientId! }) })
  const response = await fetch(url, {
    method: 'POST',
    headers: { ...form.headers, dpop: await dpopProof(key, { htm: 'POST', htu: publicUrl, nonce }) },
    body: new URLSearchParams(await codeExchange(server.origin, demo)),
  })
  const tokens = (await response.json()) as { access_token?: string; token_type?: string }
  if (response.status !== 200 || tokens.token_type !== 'DPoP' || !tokens.access_token) fail(`the DPoP token request answered ${response.status} ${JSON.stringify(tokens).slice(0, 200)}`)
  return tokens.access_token
}

/**
 * `count` proofs for GET `path` with `token`, each used once, written one per line for
 * bench/dpop-proofs.lua; signed now with the server's current nonce (valid 5 to 10 minutes).
 */
async function proofsFile(server: Server, path: string, token: string, key: DpopKey, count: number, file: string): Promise<void> {
  const htu = `${publicOrigin(server)}${path}`
  const nonce = await dpopNonce(`${server.origin}${path}`, 'GET', key, htu, { headers: { authorization: `DPoP ${token}` } })
  const ath = createHash('sha256').update(token).digest('base64url')
  const proofs: string[] = []
  for (let i = 0; i < count; i++) proofs.push(await dpopProof(key, { htm: 'GET', htu, nonce, ath }))
  writeFileSync(file, `${proofs.join('\n')}\n`)
}

type Row = { label: string; result: Awaited<ReturnType<typeof wrk>> }

/** `path` under wrk: a warm-up, then the measured run; prints its line. */
async function load(label: string, server: Server, path: string, rows: Row[], problems: string[], headers?: string[], dpop?: { token: string; key: DpopKey; rps: number; dir: string }) {
  process.stdout.write(`  ${label.padEnd(34)} `)
  const options = { ...LOAD, headers, serverPid: server.proc.pid }
  // DPoP: fresh proofs for each run, signed before it (the signing is not in the server's figures).
  const proofs = async (seconds: number, name: string) => {
    if (!dpop) return undefined
    const file = join(dpop.dir, name)
    await proofsFile(server, path, dpop.token, dpop.key, Math.ceil(Math.min(dpop.rps, DPOP_MAX_RPS) * seconds * 1.3) + 1000, file)
    return { path: join(import.meta.dir, 'dpop-proofs.lua'), args: [String(LOAD.threads), file] }
  }
  if (WARMUP > 0) await wrk(`${server.origin}${path}`, { ...options, seconds: WARMUP, script: await proofs(WARMUP, 'warmup-proofs') })
  const r = await wrk(`${server.origin}${path}`, { ...options, script: await proofs(LOAD.seconds, 'proofs') })
  const us = (r.cpu.seconds.server! / r.requests) * 1e6
  console.log(`${fmtInt(r.rps).padStart(8)} req/s  p50 ${fmtMs(r.p50).padStart(8)}  p99 ${fmtMs(r.p99).padStart(8)}  server ${fmtFixed(us, 1)} µs CPU/req  other ${fmtFixed(r.cpu.seconds.other! / r.cpu.wall, 2)} cores`)
  if (r.errors) problems.push(`${label}: ${r.errors} errors under load:\n${redact(r.raw)}`)
  rows.push({ label, result: r })
}

async function main(): Promise<number> {
  const workDir = tempDir('bench-account-')
  const wrkName = await wrkVersion()
  const store = await storage(DB, PG_URL, 'account')
  printMachine([['load', `${wrkName}: -t${LOAD.threads} -c${LOAD.connections} -d${LOAD.seconds}s after ${WARMUP}s warm-up; ${ROUNDS} rounds, medians`], ['database', store.describe]])
  const env = { ...store.env, ...OTLP?.env, API_RATE_LIMIT: '100000' }
  const problems: string[] = []

  // The demo account, user and API key (CLI), an OAuth client: once, on a server at warn.
  const setup = await startService('setup', { ...env, LOG_LEVEL: 'warn' }, workDir)
  const run = await runCommand([BUN, 'src/cli.ts', 'demo', '--json'], setup.env, 60_000)
  if (run.code !== 0) fail(`bun src/cli.ts demo --json exited with ${run.code}:\n${redact(run.stderr + run.stdout)}`)
  const out = JSON.parse(run.stdout)
  const clientId = cli.flag('skip-bearer') ? null : (await expectStatus(201, 'POST', `${setup.origin}/v0/auth/register`, { body: { client_name: 'bench/account.ts', redirect_uris: [REDIRECT_URI] } })).client_id
  const demo: Demo = { accountId: out.account.id, secret: out.api_key.secret, user: { email: out.user.email, password: out.user.password }, clientId }
  await stopChild(setup.proc)

  const rows: Row[] = []
  for (let round = 1; round <= ROUNDS; round++) {
    console.log(`round ${round}/${ROUNDS}`)
    const port = freePort()
    const bare = await startServer(`bare-${round}`, [BUN, 'bench/bare-server.ts'], childEnv({ PORT: String(port) }), port, '/', workDir)
    await load('bare Bun.serve', bare, '/', rows, problems)
    await stopChild(bare.proc)
    for (const level of ['info', 'warn'] as const) {
      const server = await startService(`server-${level}-${round}`, { ...env, LOG_LEVEL: level }, workDir)
      const path = `/v0/account?key=${encodeURIComponent(demo.secret)}`
      if ((await expectStatus(200, 'GET', `${server.origin}${path}`)).id !== demo.accountId) fail('GET /v0/account answered another account')
      await load(`account, LOG_LEVEL=${level}`, server, path, rows, problems)
      if (demo.clientId) {
        const token = await accessToken(server.origin, demo)
        await load(`bearer account, LOG_LEVEL=${level}`, server, '/v0/account', rows, problems, [`Authorization: Bearer ${token}`])
        if (!cli.flag('skip-dpop')) {
          const key = await dpopKey()
          const bound = await dpopAccessToken(server, demo, key)
          const rps = rows[rows.length - 1]!.result.rps
          await load(`DPoP account, LOG_LEVEL=${level}`, server, '/v0/account', rows, problems, [`Authorization: DPoP ${bound}`], { token: bound, key, rps, dir: workDir })
        }
      }
      if (!cli.flag('skip-healthz')) await load(`/healthz, LOG_LEVEL=${level}`, server, '/healthz', rows, problems)
      await stopChild(server.proc)
      // Each nonce the bench asks for is a use_dpop_nonce answer: one for the token, one per wrk run.
      problems.push(...(await serverProblems(server, demo.clientId && !cli.flag('skip-dpop') ? (WARMUP > 0 ? 3 : 2) : 0)))
    }
  }

  // Medians per configuration.
  const labels = [...new Set(rows.map((r) => r.label))]
  const med = labels.map((label) => {
    const mine = rows.filter((r) => r.label === label).map((r) => r.result)
    return {
      label,
      rps: median(mine.map((r) => r.rps)),
      p50: median(mine.map((r) => r.p50)),
      p99: median(mine.map((r) => r.p99)),
      us: median(mine.map((r) => (r.cpu.seconds.server! / r.requests) * 1e6)),
      other: Math.max(...mine.map((r) => r.cpu.seconds.other! / r.cpu.wall)),
    }
  })
  const bare = med[0]!
  console.log(`\nResults (${DB}): ${ROUNDS > 1 ? `medians of ${ROUNDS} rounds` : 'one round'}; "other" = the most cores other processes used in a phase (above ~0.2 the figures are noisy)`)
  printTable([
    ['configuration', 'req/s', 'vs bare', 'p50', 'p99', 'server µs CPU/req', 'vs bare (CPU)', 'other'],
    ...med.map((m) => [m.label, fmtInt(m.rps), fmtFixed(m.rps / bare.rps, 2), fmtMs(m.p50), fmtMs(m.p99), fmtFixed(m.us, 1), fmtFixed(bare.us / m.us, 2), fmtFixed(m.other, 2)]),
  ])
  console.log()
  if (demo.clientId && !cli.flag('skip-dpop')) {
    const [bearerInfo, dpopInfo] = ['bearer', 'DPoP'].map((name) => med.find((m) => m.label === `${name} account, LOG_LEVEL=info`)!)
    console.log(`DPoP against bearer, LOG_LEVEL=info: ${fmtFixed(dpopInfo!.rps / bearerInfo!.rps, 2)} of its requests/s; +${fmtFixed(dpopInfo!.us - bearerInfo!.us, 1)} µs server CPU per request`)
  }
  for (const name of ['account', ...(demo.clientId ? ['bearer account'] : [])]) {
    const ratio = med.find((m) => m.label === `${name}, LOG_LEVEL=info`)!.rps / bare.rps
    console.log(`${name}/bare, LOG_LEVEL=info: ${fmtFixed(ratio, 2)} (target ≥ ${TARGET.toFixed(2)}${DB === 'pglite' ? ', for PostgreSQL' : ''}): ${verdict(ratio >= TARGET)}`)
  }
  if (OTLP) console.log(`\ntraces: ${OTLP.describe()}`)
  printProblems(problems)
  return problems.length ? 1 : 0
}

await runMain('bench/account.ts', main, (ROUNDS * 3 * 4 * (LOAD.seconds + WARMUP + 45) + 120) * 1000)
