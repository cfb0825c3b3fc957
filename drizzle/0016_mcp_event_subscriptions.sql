DROP INDEX "hooks_account_event_target_key";--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "grant_id" text;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "event_arguments" text;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "expires_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "hooks" ADD CONSTRAINT "hooks_grant_id_grants_id_fk" FOREIGN KEY ("grant_id") REFERENCES "public"."grants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "hooks_grant_id_idx" ON "hooks" USING btree ("grant_id") WHERE "hooks"."grant_id" is not null;--> statement-breakpoint
CREATE UNIQUE INDEX "hooks_account_event_target_key" ON "hooks" USING btree ("account_id","event","target_url") WHERE "hooks"."grant_id" is null;