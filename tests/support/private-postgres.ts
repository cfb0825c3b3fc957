import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { freePort } from './process.ts'

/**
 * A PostgreSQL cluster of the test's own (initdb into a temporary directory, on a free loopback
 * port), for tests that stop and restart the database: the shared one is never touched. Needs
 * the PostgreSQL server binaries; as root, the cluster runs as the `postgres` user.
 */
export interface PrivatePostgres {
  url: string
  /**
   * Stops the server (fast shutdown: sessions are terminated, as in a restart), starts it, or
   * both (`pg_ctl restart -m fast`). Asynchronous, so that the test's own requests and probes
   * go on while pg_ctl waits.
   */
  stop(): Promise<void>
  start(): Promise<void>
  restart(): Promise<void>
  /** Stops the server and removes the cluster. */
  remove(): Promise<void>
}

const BIN_DIRS = ['/usr/lib/postgresql/17/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/15/bin']

/** Why a private cluster cannot be made here, or null when it can. */
export function privatePostgresUnavailable(): string | null {
  if (!BIN_DIRS.some((dir) => existsSync(join(dir, 'initdb')))) return 'no PostgreSQL server binaries (initdb)'
  if (userInfo().uid === 0 && Bun.spawnSync(['id', '-u', 'postgres']).exitCode !== 0) return 'running as root without a postgres user'
  return null
}

export function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = BIN_DIRS.find((dir) => existsSync(join(dir, 'initdb')))!
  const asRoot = userInfo().uid === 0
  const dir = mkdtempSync(join(tmpdir(), 'private-pg-'))
  if (asRoot) {
    const uid = Number(Bun.spawnSync(['id', '-u', 'postgres']).stdout.toString())
    const gid = Number(Bun.spawnSync(['id', '-g', 'postgres']).stdout.toString())
    chownSync(dir, uid, gid)
  }
  const command = (args: string[]) => (asRoot ? ['runuser', '-u', 'postgres', '--', ...args] : args)
  const run = async (args: string[]) => {
    // The server's output goes to its log file (-l), so pg_ctl's pipes close when pg_ctl exits.
    const child = Bun.spawn(command(args), { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
    const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
    if (exitCode !== 0) throw new Error(`${args.join(' ')} failed: ${stderr}${stdout}`)
  }
  const data = join(dir, 'data')
  const port = freePort()
  const initdb = Bun.spawnSync(command([join(bin, 'initdb'), '-D', data, '-U', 'postgres', '--auth=trust', '--no-sync']), { stdout: 'pipe', stderr: 'pipe' })
  const removeDir = () => rmSync(dir, { recursive: true, force: true })
  if (initdb.exitCode !== 0) {
    removeDir()
    throw new Error(`initdb failed: ${initdb.stderr.toString()}`)
  }
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`
  const pgCtl = (action: string[]) => run([join(bin, 'pg_ctl'), '-D', data, ...action])
  const start = () => pgCtl(['-o', options, '-l', join(dir, 'log'), '-w', 'start'])
  const stop = () => pgCtl(['-m', 'fast', '-w', 'stop'])
  const restart = () => pgCtl(['-o', options, '-l', join(dir, 'log'), '-m', 'fast', '-w', 'restart'])
  return start().then(
    () => ({
      url: `postgres://postgres@127.0.0.1:${port}/postgres`,
      stop,
      start,
      restart,
      async remove() {
        await stop().catch(() => {})
        removeDir()
      },
    }),
    (error) => {
      removeDir()
      throw error
    },
  )
}
