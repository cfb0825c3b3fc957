ALTER TABLE "events" ADD COLUMN "trace_context" text;--> statement-breakpoint
ALTER TABLE "messages" ADD COLUMN "trace_context" text;