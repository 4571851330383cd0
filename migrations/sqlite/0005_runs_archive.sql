-- Runs archive: cached summaries of terminal runs, and an index for per-case drill-down.
-- Append-only: never edit once released.

-- A terminal run's records never change, so what is computed from them once (the results
-- table, per-candidate figures for history charts) is kept here. `kind` names the summary and
-- its format version; a reader that finds an unknown or stale kind recomputes from records.
CREATE TABLE run_summaries (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL,
    -- JSON, written and read by the web layer.
    body       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind)
) STRICT;

-- The drill-down loads the records of a page of cases.
CREATE INDEX request_records_by_case ON request_records (run_id, case_id);
