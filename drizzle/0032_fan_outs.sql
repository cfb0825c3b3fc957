-- Issue 37. fan_outs: an event whose deliveries are written in chunks after its first statement, and
-- where the next chunk begins (src/messages/fan-out.ts; docs/webhooks.md#wide-fan-outs). The row commits
-- with its event and goes with its last chunk; moved_at lets any process resume one left behind.
CREATE TABLE "fan_outs" (
	"event_id" text collate "C" PRIMARY KEY NOT NULL,
	"account_id" text collate "C" NOT NULL,
	"after_hook_id" text collate "C" NOT NULL,
	"moved_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "fan_outs" ADD CONSTRAINT "fan_outs_event_id_events_id_fk" FOREIGN KEY ("event_id") REFERENCES "public"."events"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "fan_outs_moved_at_idx" ON "fan_outs" USING btree ("moved_at");