-- 1. Lossless text (store/text.rs). PostgreSQL `text` cannot hold NUL, so the columns that hold
-- what a server, a model or a person sent are written with NUL as U+E000 '0' and U+E000 itself
-- as U+E000 U+E000. Rows stored before this migration hold no NUL (PostgreSQL refused them) but
-- may hold U+E000: it is doubled here so every old row decodes to exactly what it was.
-- The append-only triggers are lifted for this one rewrite only.
ALTER TABLE request_records DISABLE TRIGGER request_records_append_only;
UPDATE request_records SET output = replace(output, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(output, chr(57344)) > 0;
UPDATE request_records SET reasoning = replace(reasoning, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(reasoning, chr(57344)) > 0;
UPDATE request_records SET error_detail = replace(error_detail, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(error_detail, chr(57344)) > 0;
UPDATE request_records SET finish_reason = replace(finish_reason, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(finish_reason, chr(57344)) > 0;
ALTER TABLE request_records ENABLE TRIGGER request_records_append_only;

ALTER TABLE grades DISABLE TRIGGER grades_append_only;
UPDATE grades SET reason = replace(reason, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(reason, chr(57344)) > 0;
ALTER TABLE grades ENABLE TRIGGER grades_append_only;

ALTER TABLE scorecards DISABLE TRIGGER scorecards_immutable;
UPDATE scorecards SET note = replace(note, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(note, chr(57344)) > 0;
ALTER TABLE scorecards ENABLE TRIGGER scorecards_immutable;

UPDATE run_events SET message = replace(message, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(message, chr(57344)) > 0;
UPDATE runs SET error = replace(error, chr(57344), chr(57344) || chr(57344))
    WHERE strpos(error, chr(57344)) > 0;

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
