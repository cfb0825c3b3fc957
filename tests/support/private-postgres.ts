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
  /** Stops the server (fast shutdown: connections are terminated, like a restart does). */
  stop(): void
  start(): void
  /** Stops the server and removes the cluster. */
  remove(): void
}

const BIN_DIRS = ['/usr/lib/postgresql/17/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/15/bin']

/** Why a private cluster cannot be made here, or null when it can. */
export function privatePostgresUnavailable(): string | null {
  if (!BIN_DIRS.some((dir) => existsSync(join(dir, 'initdb')))) return 'no PostgreSQL server binaries (initdb)'
  if (userInfo().uid === 0 && Bun.spawnSync(['id', '-u', 'postgres']).exitCode !== 0) return 'running as root without a postgres user'
  return null
}

export function startPrivatePostgres(): PrivatePostgres {
  const bin = BIN_DIRS.find((dir) => existsSync(join(dir, 'initdb')))!
  const asRoot = userInfo().uid === 0
  const dir = mkdtempSync(join(tmpdir(), 'private-pg-'))
  if (asRoot) {
    const uid = Number(Bun.spawnSync(['id', '-u', 'postgres']).stdout.toString())
    const gid = Number(Bun.spawnSync(['id', '-g', 'postgres']).stdout.toString())
    chownSync(dir, uid, gid)
  }
  const run = (args: string[]) => {
    const command = asRoot ? ['runuser', '-u', 'postgres', '--', ...args] : args
    const result = Bun.spawnSync(command, { stdout: 'pipe', stderr: 'pipe' })
    if (result.exitCode !== 0) throw new Error(`${args.join(' ')} failed: ${result.stderr.toString()}${result.stdout.toString()}`)
  }
  const data = join(dir, 'data')
  const port = freePort()
  run([join(bin, 'initdb'), '-D', data, '-U', 'postgres', '--auth=trust', '--no-sync'])
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`
  const start = () => run([join(bin, 'pg_ctl'), '-D', data, '-o', options, '-l', join(dir, 'log'), '-w', 'start'])
  const stop = () => run([join(bin, 'pg_ctl'), '-D', data, '-m', 'fast', '-w', 'stop'])
  start()
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop,
    start,
    remove() {
      try {
        stop()
      } catch {
        // Already stopped.
      }
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
