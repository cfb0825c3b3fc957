import { chmodSync, lstatSync, readdirSync } from 'node:fs'
import { join } from 'node:path'

/**
 * Takes every group and other permission bit off `path` and, with `recursive`, off everything
 * under it, so a 0755 directory becomes 0700 and a 0666 file 0600. The owner's bits are kept.
 * Only what is wider is changed; symbolic links are neither changed nor followed.
 *
 * DATA_DIR needs this although the process runs with umask 077: PGlite sets the modes of the
 * files it writes itself (its initial database is written 0666), so the umask does not reach them.
 */
export function closeToOthers(path: string, options: { recursive?: boolean } = {}): void {
  let stat
  try {
    stat = lstatSync(path)
  } catch (error) {
    // Removed since its directory was read: nothing left to close.
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return
    throw error
  }
  if (stat.isSymbolicLink()) return
  if (stat.mode & 0o077) chmodSync(path, stat.mode & 0o700)
  if (options.recursive && stat.isDirectory()) {
    for (const name of readdirSync(path)) closeToOthers(join(path, name), options)
  }
}
