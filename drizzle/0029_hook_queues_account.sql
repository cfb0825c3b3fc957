-- Issue 37. hook_queues.account_id: the subscription's account, copied (a subscription never
-- changes account), so that a claim passes over a due row whose account has no room without
-- reading its subscription (src/delivery/store.ts; docs/performance.md, issue 37, eighth pass).
ALTER TABLE "hook_queues" ADD COLUMN "account_id" text collate "C";--> statement-breakpoint
UPDATE "hook_queues" q SET "account_id" = h."account_id" FROM "hooks" h WHERE h."id" = q."hook_id";--> statement-breakpoint
ALTER TABLE "hook_queues" ALTER COLUMN "account_id" SET NOT NULL;
