import { expect, test } from 'bun:test'
import { mkdtempSync, statSync, writeFileSync } from 'node:fs'
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
