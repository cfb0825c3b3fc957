-- Test events (POST …/hooks/{hook_id}/test) are stored like others, for their delivery's log, but
-- kept out of GET /events. A delivery's attempts are read in order (GET …/deliveries/{id}).
DROP INDEX "delivery_attempts_delivery_id_idx";--> statement-breakpoint
ALTER TABLE "events" ADD COLUMN "test" boolean DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX "delivery_attempts_delivery_id_idx" ON "delivery_attempts" USING btree ("delivery_id","id");