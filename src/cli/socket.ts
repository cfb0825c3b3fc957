import { join } from 'node:path'

/**
 * PGlite is one process's database, so while the server holds DATA_DIR the CLI hands its
 * command to the server over this socket. It lives inside DATA_DIR (mode 0700) and is itself
 * 0600: only the user who owns the data can use it.
 */
export const cliSocketPath = (dataDir: string) => join(dataDir, 'cli.sock')

export interface ForwardedCommand {
  argv: string[]
}

/** The argv of a forwarded command, or null when the body is not `{ argv: string[] }`. */
export function parseForwardedCommand(body: unknown): string[] | null {
  const argv = (body as Partial<ForwardedCommand> | null)?.argv
  return Array.isArray(argv) && argv.every((arg) => typeof arg === 'string') ? argv : null
}
