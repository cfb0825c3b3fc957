import { exitWith, loadConfigOrExit, openConfiguredDatabase } from './instance.ts'
import { lockOwner } from './lib/db/data-dir-lock.ts'
import { runCommand, type CommandResult } from './cli/commands.ts'
import { cliSocketPath, type ForwardedCommand } from './cli/socket.ts'
import { listen } from './cli/listen.ts'
import { createLogger } from './lib/runtime/logger.ts'
import { createSecretBox, resolveEncryptionKey } from './lib/security/secret-box.ts'

// Run on PGlite, the CLI opens DATA_DIR itself: it creates nothing open to other users either.
process.umask(0o077)
const argv = process.argv.slice(2)
const config = loadConfigOrExit(process.env)

// `listen` is a client of a running service, through its HTTP API with an API key: it opens no
// database and never goes through the server's CLI socket.
if (argv[0] === 'listen') {
  const stop = new AbortController()
  process.on('SIGINT', () => stop.abort())
  process.on('SIGTERM', () => stop.abort())
  const io = { out: (line: string) => console.log(line), err: (line: string) => console.error(line) }
  process.exit(await listen(argv.slice(1), { ...io, fetch, signal: stop.signal, env: process.env, baseUrl: config.baseUrl }))
}

async function forwardToServer(): Promise<CommandResult> {
  const body: ForwardedCommand = { argv }
  try {
    const response = await fetch('http://localhost/run', {
      method: 'POST',
      body: JSON.stringify(body),
      headers: { 'content-type': 'application/json' },
      unix: cliSocketPath(config.dataDir),
    })
    return (await response.json()) as CommandResult
  } catch {
    exitWith(
      `DATA_DIR ${config.dataDir} is held by process ${lockOwner(config.dataDir)}, which does not accept CLI commands. Stop it and run the command again.`,
    )
  }
}

async function runLocally(): Promise<CommandResult> {
  const database = await openConfiguredDatabase(config)
  try {
    // Warnings go to stderr: stdout carries the command's output (JSON with --json).
    const logger = createLogger(config.logLevel, (line) => console.error(line))
    const multiInstance = database.handle.kind === 'postgres'
    const openSecretBox = () => createSecretBox(resolveEncryptionKey({ configured: config.encryptionKey, dataDir: config.dataDir, logger, multiInstance }))
    return await runCommand(argv, { db: database.handle.db, baseUrl: config.baseUrl, openSecretBox })
  } finally {
    await database.close()
  }
}

const serverHoldsData = !config.databaseUrl && lockOwner(config.dataDir) !== null
const result = serverHoldsData ? await forwardToServer() : await runLocally()
;(result.exitCode === 0 ? console.log : console.error)(result.output)
process.exit(result.exitCode)
