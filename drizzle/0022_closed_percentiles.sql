ALTER TABLE "account_stats" ADD COLUMN "p50_ms" integer;--> statement-breakpoint
ALTER TABLE "account_stats" ADD COLUMN "p95_ms" integer;--> statement-breakpoint
ALTER TABLE "account_stats" ADD COLUMN "p99_ms" integer;--> statement-breakpoint
ALTER TABLE "hook_stats" ADD COLUMN "p50_ms" integer;--> statement-breakpoint
ALTER TABLE "hook_stats" ADD COLUMN "p95_ms" integer;--> statement-breakpoint
ALTER TABLE "hook_stats" ADD COLUMN "p99_ms" integer;