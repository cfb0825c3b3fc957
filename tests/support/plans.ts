import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import { queryRows, type Database } from '../../src/lib/db/client.ts'

export type PlanNode = { 'Node Type': string; 'CTE Name'?: string; 'Relation Name'?: string; 'Index Name'?: string; 'Actual Loops': number; 'Actual Rows': number; 'Rows Removed by Filter'?: number; Plans?: PlanNode[] }

/** Every node of a plan, its subplans' included. */
export const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)]

/**
 * A connection (with `settings`) whose statements' executed plans are collected: auto_explain
 * sends each one to this session as a notice, with the actual loops of every node.
 */
export function explainedConnection(url: string, settings: Record<string, string> = {}) {
  const plans: { query: string; plan: PlanNode }[] = []
  const connection = postgres(url, {
    max: 1,
    connection: {
      ...settings,
      session_preload_libraries: 'auto_explain',
      'auto_explain.log_min_duration': '0',
      'auto_explain.log_analyze': 'on',
      'auto_explain.log_timing': 'off',
      'auto_explain.log_format': 'json',
      'auto_explain.log_level': 'notice',
      client_min_messages: 'notice',
    },
    onnotice: (notice) => {
      const text = String(notice.message)
      if (!text.includes('{')) return
      const explained = JSON.parse(text.slice(text.indexOf('{'))) as { 'Query Text': string; Plan: PlanNode }
      plans.push({ query: explained['Query Text'], plan: explained.Plan })
    },
  })
  return { connection, plans }
}

/** Loading auto_explain into a session takes a superuser (CI's PostgreSQL users are). */
export async function isSuperuser(db: Database): Promise<boolean> {
  return (await queryRows<{ rolsuper: boolean }>(db, sql`select rolsuper from pg_roles where rolname = current_user`))[0]?.rolsuper === true
}
