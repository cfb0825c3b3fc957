-- Events expire after EVENT_RETENTION_DAYS (src/delivery/retention.ts); deleting one cascades to its
-- deliveries and their attempts, which PostgreSQL finds through these indexes (without them, a
-- sequential scan of each table per deleted row).
CREATE INDEX "deliveries_event_id_idx" ON "deliveries" USING btree ("event_id");--> statement-breakpoint
CREATE INDEX "delivery_attempts_delivery_id_idx" ON "delivery_attempts" USING btree ("delivery_id");