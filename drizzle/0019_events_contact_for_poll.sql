DROP INDEX "events_poll_idx";--> statement-breakpoint
ALTER TABLE "events" ADD COLUMN "contact" text;--> statement-breakpoint
-- Events written before this column existed: their contact from the payload, as filters read it (FILTER_KEYS, src/messages/event-types.ts).
UPDATE "events" SET "contact" = "payload"::jsonb #>> (CASE WHEN "type" = 'message.inbound' THEN '{data,message,from}' ELSE '{data,message,to}' END)::text[] WHERE NOT "test";--> statement-breakpoint
CREATE INDEX "events_poll_idx" ON "events" USING btree ("account_id","type","xact","id","contact") WHERE not "events"."test";