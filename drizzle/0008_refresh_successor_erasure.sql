-- A rotated refresh token keeps its successor pair, sealed, only for the grace window
-- (OAUTH_REFRESH_GRACE_S, at most 300 s); earlier releases never erased it, so every rotated
-- grant's live refresh token could be opened by whoever held a copy of the data and the key.
-- Erase what they left. Successors younger than the longest window are left to the sweep every
-- running instance does (src/oauth/grants/refresh-token.ts): an instance still running the
-- earlier release may be answering a concurrent refresh from one of them.
UPDATE "refresh_tokens" SET "successor_ciphertext" = NULL WHERE "successor_ciphertext" IS NOT NULL AND "rotated_at" < now() - interval '300 seconds';--> statement-breakpoint
CREATE INDEX "refresh_tokens_sealed_successor_idx" ON "refresh_tokens" USING btree ("rotated_at") WHERE "refresh_tokens"."successor_ciphertext" is not null;
