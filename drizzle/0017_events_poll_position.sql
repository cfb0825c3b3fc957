ALTER TABLE "events" ADD COLUMN "xact" "xid8" DEFAULT pg_current_xact_id() NOT NULL;--> statement-breakpoint
CREATE INDEX "events_poll_idx" ON "events" USING btree ("account_id","type","xact","id");