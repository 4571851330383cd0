-- The cases page reads the shown cases' attempts as outlines (key, outcome, send time) with
-- their grades' figures: at 500 repetitions a case, a page of ten cases reads 10,000 of them.
-- Read through these two indexes alone (index-only scans: the end-of-run step vacuums the
-- record tables so their pages are marked all-visible), no record row (its output and chunks,
-- scattered over the run) and no grade row (its reason) is visited.
-- Mirrors migrations/sqlite/0025_outline_indexes.sql. Append-only: never edit once released.

-- Replaces request_records_by_case (run_id, case_id): its key, so it serves the same reads.
DROP INDEX request_records_by_case;
CREATE INDEX request_records_outline_by_case ON request_records (run_id, case_id)
    INCLUDE (candidate_id, phase, repetition, attempt, is_warmup, error_class, sent_at_us, id);

-- Beside the UNIQUE (request_record_id, position) index, which holds no figure.
CREATE INDEX grades_figures ON grades (request_record_id) INCLUDE (position, score, passed, weight, required);
