-- Issue 23. hook_queues: one row per subscription that may have work, with the time its next
-- delivery may be claimed; the claim reads due subscriptions from it instead of walking the
-- pending index of deliveries, whose cost grew with the number of subscriptions and with dead
-- entries as the table aged (docs/performance.md). The circuit breaker's state lives on hooks
-- (src/delivery/circuit.ts), and so does a subscription's filter (docs/api.md#filters).
CREATE TABLE "hook_queues" (
	"hook_id" text PRIMARY KEY NOT NULL,
	"due_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "filter_contacts" text[];--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "consecutive_failures" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "circuit_opened_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "circuit_probe_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "hook_queues" ADD CONSTRAINT "hook_queues_hook_id_hooks_id_fk" FOREIGN KEY ("hook_id") REFERENCES "public"."hooks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "hook_queues_due_idx" ON "hook_queues" USING btree ("due_at") WHERE "hook_queues"."due_at" is not null;--> statement-breakpoint
-- Work queued before this migration: every subscription with pending deliveries is due now.
INSERT INTO "hook_queues" ("hook_id", "due_at") SELECT DISTINCT "hook_id", now() FROM "deliveries" WHERE "status" = 'pending';--> statement-breakpoint
-- hook_queues is small and rewritten by every claim: vacuum it after a fixed number of changes,
-- as deliveries is (migration 0007). PGlite accepts and ignores this.
ALTER TABLE "hook_queues" SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
