import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join, resolve } from 'node:path'

export class DataDirLockedError extends Error {
  constructor(
    readonly dataDir: string,
    readonly ownerPid: number,
  ) {
    super(`DATA_DIR ${dataDir} is in use by process ${ownerPid}`)
  }
}

export interface DataDirLock {
  release(): void
}

/** The directories this process holds the lock of (resolved paths). */
const heldByThisProcess = new Set<string>()

/**
 * The state letter of a Linux process (proc(5): `pid (comm) state …`), or null where /proc cannot
 * tell (another system, or /proc mounted with hidepid). `comm` is the executable's name and may
 * hold spaces and parentheses, so the state is the first field after the last `)`.
 */
function linuxProcessState(pid: number): string | null {
  let stat: string
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  } catch {
    return null
  }
  const end = stat.lastIndexOf(')')
  return end === -1 ? null : (stat.slice(end + 1).trim()[0] ?? null)
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (error) {
    // EPERM: it exists but belongs to another user; it may still be a zombie (below).
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false
  }
  // A killed process that its parent has not reaped yet (a zombie: common under container init
  // systems) still answers signal 0, but it will never release anything: it is dead.
  const state = linuxProcessState(pid)
  return state !== 'Z' && state !== 'X' && state !== 'x'
}

export function lockOwner(dataDir: string): number | null {
  try {
    const pid = Number(readFileSync(join(dataDir, 'service.lock'), 'utf8').trim())
    if (!Number.isInteger(pid) || pid <= 0) return null
    // Our own pid, in a lock this process did not take: an earlier process that had the same pid
    // (a restarted container's entry process usually does) and died without releasing it.
    if (pid === process.pid) return heldByThisProcess.has(resolve(dataDir)) ? pid : null
    return isAlive(pid) ? pid : null
  } catch {
    return null
  }
}

/**
 * PGlite has no lock of its own and two processes opening one data directory lose writes
 * silently, so the process that opens it holds `service.lock` (its pid). A lock left by a
 * dead process (a zombie included) is taken over.
 *
 * The directory is made 0700 here, the first time the process touches it, even when it already
 * existed with a wider mode (a volume created by someone else): the database, the encryption key
 * and the CLI socket live in it.
 */
export function acquireDataDirLock(dataDir: string): DataDirLock {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  chmodSync(dataDir, 0o700)
  const path = join(dataDir, 'service.lock')
  const held = resolve(dataDir)
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600)
      writeSync(fd, String(process.pid))
      closeSync(fd)
      heldByThisProcess.add(held)
      return {
        release() {
          if (lockOwner(dataDir) === process.pid) rmSync(path, { force: true })
          heldByThisProcess.delete(held)
        },
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      const owner = lockOwner(dataDir)
      if (owner !== null) throw new DataDirLockedError(dataDir, owner)
      rmSync(path, { force: true })
    }
  }
  throw new Error(`could not lock DATA_DIR ${dataDir}`)
}
