ALTER TABLE "hooks" ADD COLUMN "signature_scheme" text DEFAULT 'hmac' NOT NULL;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "public_key" text;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "previous_public_key" text;