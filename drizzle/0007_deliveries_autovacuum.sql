-- deliveries churns (every delivery is inserted, leased and updated); the default thresholds
-- (20 % of the table) leave its statistics stale long enough for the claim to pick a plan that
-- reads every dead index entry (docs/performance.md). Vacuum and analyze after a fixed number
-- of rows instead. PGlite accepts and ignores these (it runs no autovacuum).
ALTER TABLE "deliveries" SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 2000);
