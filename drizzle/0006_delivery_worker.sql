ALTER TABLE "hooks" ADD COLUMN "previous_secret_ciphertext" text;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "previous_secret_expires_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "failing_since" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "deliveries_leased_idx" ON "deliveries" USING btree ("hook_id") WHERE "deliveries"."leased_until" is not null;