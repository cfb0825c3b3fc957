CREATE TABLE "account_stats" (
	"account_id" text collate "C" NOT NULL,
	"unit" text NOT NULL,
	"bucket" timestamp with time zone NOT NULL,
	"kind" text NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"succeeded" integer DEFAULT 0 NOT NULL,
	"failures" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"latency" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"messages_sent" integer DEFAULT 0 NOT NULL,
	"events" jsonb DEFAULT '{}'::jsonb NOT NULL,
	CONSTRAINT "account_stats_account_id_unit_bucket_kind_pk" PRIMARY KEY("account_id","unit","bucket","kind")
);
--> statement-breakpoint
CREATE TABLE "hook_stats" (
	"hook_id" text collate "C" NOT NULL,
	"unit" text NOT NULL,
	"bucket" timestamp with time zone NOT NULL,
	"attempts" integer NOT NULL,
	"succeeded" integer NOT NULL,
	"failures" jsonb NOT NULL,
	"latency" jsonb NOT NULL,
	CONSTRAINT "hook_stats_hook_id_unit_bucket_pk" PRIMARY KEY("hook_id","unit","bucket")
);
--> statement-breakpoint
ALTER TABLE "account_stats" ADD CONSTRAINT "account_stats_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "hook_stats" ADD CONSTRAINT "hook_stats_hook_id_hooks_id_fk" FOREIGN KEY ("hook_id") REFERENCES "public"."hooks"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "account_stats_bucket_idx" ON "account_stats" USING btree ("bucket");--> statement-breakpoint
CREATE INDEX "hook_stats_bucket_idx" ON "hook_stats" USING btree ("bucket");--> statement-breakpoint
-- Each bucket's row is rewritten by every batch of attempts in it: room on its page keeps those updates HOT (no index writes).
ALTER TABLE "hook_stats" SET (fillfactor = 70);--> statement-breakpoint
ALTER TABLE "account_stats" SET (fillfactor = 70);
