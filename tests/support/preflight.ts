/**
 * `bun test` preload (bunfig.toml): resolves TEST_DATABASE and checks that the chosen database
 * answers (starting the container, for `container`) before any test file loads. A run says on
 * stderr which database it uses; when that database cannot be used the run stops at once with
 * one line and exit code 1, instead of every test file failing on its own.
 */
import { afterAll } from 'bun:test'
import { describeTestDatabaseMode, stopTestDatabaseContainer, TestDatabaseUnavailable, testDatabaseMode } from './database.ts'

// Once, after every file of the run: the container is not left behind (testcontainers' reaper,
// Ryuk, is an image of its own, which machines without a registry cannot pull).
afterAll(stopTestDatabaseContainer)

try {
  const mode = await testDatabaseMode()
  process.stderr.write(`test database: ${describeTestDatabaseMode(mode)}\n`)
} catch (error) {
  if (!(error instanceof TestDatabaseUnavailable)) throw error
  process.stderr.write(`${error.message}\n`)
  process.exit(1)
}
