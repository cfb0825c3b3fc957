import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

/** The dashboard's script and stylesheet, with the version the page names them by (a hash of both). */
export interface DashboardAssets {
  script: string
  stylesheet: string
  version: string
}

/** Thrown where the page cannot be built (the Deno entry has no bundler): the routes answer 503 with it. */
export class DashboardUnavailable extends Error {}

const ENTRY = fileURLToPath(new URL('./app/main.tsx', import.meta.url))
const STYLESHEET = fileURLToPath(new URL('./app/dashboard.css', import.meta.url))

async function bundle(): Promise<DashboardAssets> {
  // Bun's bundler makes the browser script from src/dashboard/app (Preact, our modules) when the
  // page is first asked for, so there is no build step to forget and nothing generated in git.
  const bun = (globalThis as { Bun?: typeof Bun }).Bun
  if (!bun) throw new DashboardUnavailable('The dashboard is bundled by Bun: serve it with the Bun entry (bun run start).')
  const result = await bun.build({ entrypoints: [ENTRY], target: 'browser', format: 'esm', minify: true, sourcemap: 'none' })
  if (!result.success) throw new Error(`bundling the dashboard failed: ${result.logs.map(String).join('; ')}`)
  const script = await result.outputs[0]!.text()
  const stylesheet = await readFile(STYLESHEET, 'utf8')
  const version = createHash('sha256').update(script).update(stylesheet).digest('hex').slice(0, 16)
  return { script, stylesheet, version }
}

let built: Promise<DashboardAssets> | undefined

/** Built once per process, on first use; a failed build is tried again on the next request. */
export function dashboardAssets(): Promise<DashboardAssets> {
  built ??= bundle().catch((error) => {
    built = undefined
    throw error
  })
  return built
}
