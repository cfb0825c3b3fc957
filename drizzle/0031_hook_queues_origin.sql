-- Issue 37. hook_queues.origin: the target's scheme, host and port, kept by every writer that marks
-- the subscription due, so that a claim bounds the attempts in flight to an origin that has not
-- answered lately without reading the subscription (src/delivery/queue.ts, targetOrigin;
-- docs/webhooks.md#when-an-endpoint-keeps-failing; docs/performance.md, issue 37, twenty-second pass).
ALTER TABLE "hook_queues" ADD COLUMN "origin" text;--> statement-breakpoint
UPDATE "hook_queues" q SET "origin" = regexp_replace(h."target_url", '^([a-z][a-z0-9+.-]*://)([^@/?#]*@)?([^/?#]*).*$', '\1\3') FROM "hooks" h WHERE h."id" = q."hook_id";--> statement-breakpoint
ALTER TABLE "hook_queues" ALTER COLUMN "origin" SET NOT NULL;
