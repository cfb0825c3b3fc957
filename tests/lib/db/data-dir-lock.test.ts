import { expect, test } from 'bun:test'
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DataDirLockedError, acquireDataDirLock, lockOwner } from '../../../src/lib/db/data-dir-lock.ts'

const freshDir = () => join(mkdtempSync(join(tmpdir(), 'lock-test-')), 'data')

test('one holder at a time; released locks can be taken again', () => {
  const dir = freshDir()
  const lock = acquireDataDirLock(dir)
  expect(lockOwner(dir)).toBe(process.pid)
  expect(statSync(dir).mode & 0o777).toBe(0o700)
  expect(() => acquireDataDirLock(dir)).toThrow(DataDirLockedError)
  lock.release()
  expect(lockOwner(dir)).toBeNull()
  acquireDataDirLock(dir).release()
})

test('a lock left by a dead process is taken over', () => {
  const dir = freshDir()
  acquireDataDirLock(dir).release()
  const dead = Bun.spawnSync(['true']).pid
  writeFileSync(join(dir, 'service.lock'), String(dead))
  expect(lockOwner(dir)).toBeNull()
  const lock = acquireDataDirLock(dir)
  expect(lockOwner(dir)).toBe(process.pid)
  lock.release()
})

test('a garbage lock file does not block', () => {
  const dir = freshDir()
  acquireDataDirLock(dir).release()
  writeFileSync(join(dir, 'service.lock'), 'not a pid')
  acquireDataDirLock(dir).release()
})

/**
 * A zombie: a process that was killed but not yet reaped by its parent. `kill(pid, 0)` still
 * succeeds for it, yet it will never release the lock. The parent here is a shell that stops
 * itself (SIGSTOP) after starting the child, so it cannot reap it until we let it go on. The
 * child runs through a symlink whose name holds `) R (`, so its `comm` in /proc/<pid>/stat does
 * too: only a parser that reads the state after the last `)` sees the Z.
 */
async function withZombie(use: (pid: number) => void | Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), 'zombie-'))
  const sleeper = join(dir, 'x) R (y')
  symlinkSync(Bun.which('sleep')!, sleeper)
  const parent = Bun.spawn(['sh', '-c', '"$0" 60 & echo $!; kill -STOP $$; wait', sleeper], { stdout: 'pipe' })
  try {
    const { value } = await parent.stdout.getReader().read()
    const child = Number(new TextDecoder().decode(value).trim())
    const state = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ').at(-1)![0]
    while (state(parent.pid) !== 'T') await Bun.sleep(10)
    // The forked shell becomes the renamed program only once it has exec'd it: wait for that.
    while (!readFileSync(`/proc/${child}/stat`, 'utf8').includes('(x) R (y)')) await Bun.sleep(5)
    process.kill(child, 'SIGKILL')
    while (state(child) !== 'Z') await Bun.sleep(10)
    expect(readFileSync(`/proc/${child}/stat`, 'utf8')).toContain('(x) R (y)')
    expect(() => process.kill(child, 0)).not.toThrow()
    await use(child)
  } finally {
    // Let the shell go on: its `wait` reaps the zombie, then it exits.
    process.kill(parent.pid, 'SIGCONT')
    await parent.exited
    rmSync(dir, { recursive: true, force: true })
  }
}

test.if(process.platform === 'linux')('a lock whose owner is a zombie (killed, not yet reaped) is taken over', async () => {
  await withZombie((zombie) => {
    const dir = freshDir()
    acquireDataDirLock(dir).release()
    writeFileSync(join(dir, 'service.lock'), String(zombie))
    expect(lockOwner(dir)).toBeNull()
    const lock = acquireDataDirLock(dir)
    expect(lockOwner(dir)).toBe(process.pid)
    lock.release()
  })
})

test('a lock naming this process, left by an earlier process with the same pid (a restarted container), is taken over', () => {
  const dir = freshDir()
  acquireDataDirLock(dir).release()
  writeFileSync(join(dir, 'service.lock'), String(process.pid))
  const lock = acquireDataDirLock(dir)
  expect(lockOwner(dir)).toBe(process.pid)
  // Held by this process now: a second acquisition is still refused.
  expect(() => acquireDataDirLock(dir)).toThrow(DataDirLockedError)
  lock.release()
  expect(lockOwner(dir)).toBeNull()
})

test('an existing DATA_DIR is set to 0700', () => {
  const dir = freshDir()
  mkdirSync(dir, { mode: 0o755 })
  chmodSync(dir, 0o755)
  acquireDataDirLock(dir).release()
  expect(statSync(dir).mode & 0o777).toBe(0o700)
})
