ALTER TABLE "oauth_clients" ADD COLUMN "client_secret_hash" text;--> statement-breakpoint
ALTER TABLE "oauth_clients" ADD COLUMN "jwks" jsonb;--> statement-breakpoint
ALTER TABLE "oauth_clients" ADD COLUMN "jwks_uri" text;