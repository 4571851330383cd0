-- Issue 49. Series a candidate keeps from its telemetry scrapes beyond the catalogue's: metric
-- family names or prefixes ending in `*`, one a line (NULL: none).
ALTER TABLE candidates ADD COLUMN metrics_keep TEXT;
