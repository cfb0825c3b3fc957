import { Elysia, t } from 'elysia'
import { ApiError } from '../lib/errors.ts'

export function opsRoutes(deps: { isDatabaseReachable(): Promise<boolean> }) {
  return new Elysia({ tags: ['Operations'] })
    .get('/healthz', () => ({ status: 'ok' as const }), {
      response: { 200: t.Object({ status: t.Literal('ok') }) },
      detail: { summary: 'The process is up' },
    })
    .get(
      '/readyz',
      async () => {
        if (!(await deps.isDatabaseReachable())) throw new ApiError(503, 'not_ready', 'The database is not reachable.')
        return { status: 'ready' as const }
      },
      {
        response: { 200: t.Object({ status: t.Literal('ready') }) },
        detail: { summary: 'The database is reachable' },
      },
    )
}
