-- Issue 37. hook_queues.suspect: whether the subscription was a suspect (last attempt failed, or
-- circuit open) when its queue row was last written. The due subscriptions are indexed in two
-- parts, so that a claim with no room for suspects reads none of theirs (src/delivery/queue.ts).
DROP INDEX "hook_queues_due_idx";--> statement-breakpoint
ALTER TABLE "hook_queues" ADD COLUMN "suspect" boolean DEFAULT false NOT NULL;--> statement-breakpoint
UPDATE "hook_queues" q SET "suspect" = true FROM "hooks" h WHERE h."id" = q."hook_id" AND (h."consecutive_failures" > 0 OR h."circuit_opened_at" IS NOT NULL);--> statement-breakpoint
CREATE INDEX "hook_queues_suspect_due_idx" ON "hook_queues" USING btree ("due_at") WHERE "hook_queues"."due_at" is not null and "hook_queues"."suspect";--> statement-breakpoint
CREATE INDEX "hook_queues_due_idx" ON "hook_queues" USING btree ("due_at") WHERE "hook_queues"."due_at" is not null and not "hook_queues"."suspect";
