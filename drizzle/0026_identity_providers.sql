CREATE TABLE "identity_provider_subjects" (
	"id" text collate "C" PRIMARY KEY NOT NULL,
	"identity_provider_id" text collate "C" NOT NULL,
	"subject" text NOT NULL,
	"user_id" text collate "C" NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "identity_providers" (
	"id" text collate "C" PRIMARY KEY NOT NULL,
	"account_id" text collate "C" NOT NULL,
	"issuer" text NOT NULL,
	"jwks_uri" text NOT NULL,
	"allowed_client_ids" text[] NOT NULL,
	"subject_mapping" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "grants" ADD COLUMN "identity_provider_id" text collate "C";--> statement-breakpoint
ALTER TABLE "identity_provider_subjects" ADD CONSTRAINT "identity_provider_subjects_identity_provider_id_identity_providers_id_fk" FOREIGN KEY ("identity_provider_id") REFERENCES "public"."identity_providers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "identity_provider_subjects" ADD CONSTRAINT "identity_provider_subjects_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "identity_providers" ADD CONSTRAINT "identity_providers_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "identity_provider_subjects_subject_key" ON "identity_provider_subjects" USING btree ("identity_provider_id","subject");--> statement-breakpoint
CREATE UNIQUE INDEX "identity_providers_account_issuer_key" ON "identity_providers" USING btree ("account_id","issuer");--> statement-breakpoint
CREATE INDEX "identity_providers_issuer_idx" ON "identity_providers" USING btree ("issuer");--> statement-breakpoint
ALTER TABLE "grants" ADD CONSTRAINT "grants_identity_provider_id_identity_providers_id_fk" FOREIGN KEY ("identity_provider_id") REFERENCES "public"."identity_providers"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "grants_identity_provider_user_client_key" ON "grants" USING btree ("identity_provider_id","user_id","client_id") WHERE "grants"."identity_provider_id" is not null and "grants"."revoked_at" is null;