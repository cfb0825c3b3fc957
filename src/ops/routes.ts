import { Elysia, t } from 'elysia'
import { ApiError, ProblemSchema } from '../lib/http/errors.ts'

export function opsRoutes(deps: { isDatabaseReachable(): Promise<boolean> }) {
  return new Elysia({ tags: ['Operations'] })
    .get('/healthz', () => ({ status: 'ok' as const }), {
      response: { 200: t.Object({ status: t.Literal('ok') }, { title: 'Health' }) },
      detail: { operationId: 'getHealth', summary: 'The process is up' },
    })
    .get(
      '/readyz',
      async () => {
        if (!(await deps.isDatabaseReachable())) throw new ApiError(503, 'not_ready', 'The database is not reachable.')
        return { status: 'ready' as const }
      },
      {
        response: { 200: t.Object({ status: t.Literal('ready') }, { title: 'Readiness' }), 503: ProblemSchema },
        detail: { operationId: 'getReadiness', summary: 'The database is reachable' },
      },
    )
}
