/**
 * How PostgreSQL plans the statements that start from a batch they hold and reach each row
 * through an index by key: the delivery worker's claim and record, set on each of its
 * connections (src/delivery/worker.ts), and a message settlement, on the API process's pool of
 * such connections (`keyedDb`, src/lib/db/client.ts). They are prepared once per connection, and
 * each keeps one generic plan: planned afresh on every use, the claim took longer to plan than
 * to run (5.6 ms against 2.5) and planning was 40 % of PostgreSQL's CPU per delivery
 * (docs/performance.md, issue 25).
 *
 * A generic plan is made for the tables as they were at its first use, and the delivery tables
 * grow from nothing to hundreds of thousands of rows within a minute (a fan-out to a thousand
 * subscriptions), long before autovacuum analyzes them: a plan made on the empty table scanned
 * all of it for every batch of attempts recorded (30–70 ms instead of 1; the storm, issue 23),
 * and a settlement's made on an empty `messages` read every message for every settlement
 * (issue 37). So the plans are made with sequential scans, hash joins and merge joins off: the
 * nested loops over indexes they get are right for a table of any size, and a plan made while a
 * table was empty is right later. JIT is off: PostgreSQL's default jit_above_cost is far below
 * these statements' estimates, and compiling the claim cost ~100 ms to save microseconds.
 *
 * Bitmap scans are off too. The claim counts each subscription's leases in flight through the
 * partial index of leased deliveries, and every lease a record ended leaves its entry there until
 * a vacuum (setting `leased_until` to null is not a HOT update): thousands of them a second under
 * load. A bitmap scan read all of them, and their heap pages, on every claim (12,000 entries and
 * 940 pages, 40 % of a claim's time in the basic closed loop); a plain index scan that finds an
 * entry's row dead to every transaction marks the entry, and later scans pass over it
 * (docs/performance.md). While a long transaction holds the cleanup horizon back, no entry can be
 * marked, and the plain scan then fetches each one's row where a bitmap scan read each page once.
 */
export const KEYED_PLAN_SETTINGS = {
  plan_cache_mode: 'force_generic_plan',
  enable_seqscan: 'off',
  enable_hashjoin: 'off',
  enable_mergejoin: 'off',
  enable_bitmapscan: 'off',
  jit: 'off',
}
