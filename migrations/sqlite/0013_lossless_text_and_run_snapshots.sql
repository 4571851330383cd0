-- 1. Lossless text (store/text.rs): SQLite's TEXT holds NUL and every other character, so text
-- is stored as it is here and nothing is rewritten (PostgreSQL's migration escapes).

-- 2. The archive never changes. Each candidate of a run keeps a snapshot of what was measured
-- (JSON `CandidateSnapshot`: name, provider, redacted base URL, model, request parameters,
-- declared conditions, prices, claimed figure), written when the run is created. Runs created
-- before this migration get one from the candidate as it is now, filled in by the application
-- right after migrating (`backfill_run_snapshots`: the base URL is redacted in Rust).
ALTER TABLE run_candidates ADD COLUMN snapshot TEXT;

-- An imported run is identified by the content hash of its export: importing the same export
-- twice finds the first import instead of creating a second run. NULL for runs measured here.
ALTER TABLE runs ADD COLUMN import_hash TEXT;
CREATE UNIQUE INDEX runs_by_import_hash ON runs (import_hash) WHERE import_hash IS NOT NULL;
