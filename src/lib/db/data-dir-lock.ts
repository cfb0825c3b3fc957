import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'

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

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

export function lockOwner(dataDir: string): number | null {
  try {
    const pid = Number(readFileSync(join(dataDir, 'service.lock'), 'utf8').trim())
    return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : null
  } catch {
    return null
  }
}

/**
 * PGlite has no lock of its own and two processes opening one data directory lose writes
 * silently, so the process that opens it holds `service.lock` (its pid). A lock left by a
 * dead process is taken over.
 */
export function acquireDataDirLock(dataDir: string): DataDirLock {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  const path = join(dataDir, 'service.lock')
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600)
      writeSync(fd, String(process.pid))
      closeSync(fd)
      return {
        release() {
          if (lockOwner(dataDir) === process.pid) rmSync(path, { force: true })
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
