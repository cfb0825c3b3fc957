-- Per-subscription flow control (src/delivery/flow-control.ts, src/delivery/store.ts): an optional
-- rate limit counted per clock second across every process, and the pause a receiver asks for
-- with Retry-After on a 429 or 503.
ALTER TABLE "hooks" ADD COLUMN "rate_limit_per_s" integer;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "rate_window_started_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "rate_window_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "hooks" ADD COLUMN "throttled_until" timestamp with time zone;