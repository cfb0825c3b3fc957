CREATE TABLE "hooks" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"event" text NOT NULL,
	"target_url" text NOT NULL,
	"status" text DEFAULT 'active' NOT NULL,
	"disabled_reason" text,
	"secret_ciphertext" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "hooks" ADD CONSTRAINT "hooks_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "hooks_account_event_target_key" ON "hooks" USING btree ("account_id","event","target_url");--> statement-breakpoint
CREATE INDEX "hooks_account_id_idx" ON "hooks" USING btree ("account_id","id");