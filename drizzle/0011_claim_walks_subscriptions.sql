-- The claim walks the subscriptions that have pending deliveries (a loose index scan on hook_id) and
-- reads the head of each one's queue (src/delivery/store.ts), instead of scanning every due row
-- in time order, which walked through the whole backlog of a subscription that had no room.
DROP INDEX "deliveries_due_idx";--> statement-breakpoint
CREATE INDEX "deliveries_pending_idx" ON "deliveries" USING btree ("hook_id","next_attempt_at") WHERE "deliveries"."status" = 'pending';