-- The cases page reads the shown cases' attempts as outlines (key, outcome, case score, send
-- time): at 500 repetitions a case, a page of ten cases reads 10,000 of them. Each attempt's
-- outcome and case score are kept on its record (written with it by the store from its grades,
-- by the domain's rules, and again when grades are appended), so the outlines are one range of
-- one index: no record row (its output and chunks, a page of the table each, scattered over the
-- run) and no grade is visited.
-- Mirrors migrations/postgres/0025_outline_indexes.sql. Append-only: never edit once released.

-- Whether every required grade passed (NULL: no required grade); the weighted mean of every
-- grade's score (NULL: no grades). As `grading::case_passed` and `grading::case_score`.
ALTER TABLE request_records ADD COLUMN case_passed INTEGER CHECK (case_passed IN (0, 1));
ALTER TABLE request_records ADD COLUMN case_score REAL;

-- A record's measurements stay append-only; only these two, computed from its grades (which
-- are append-only too), are written again, when a grade is appended. The guard names every
-- other column (a store test checks that none is left out).
DROP TRIGGER request_records_append_only;
CREATE TRIGGER request_records_append_only BEFORE UPDATE OF
    id, run_id, candidate_id, case_id, phase, repetition, attempt, concurrency, is_warmup,
    sent_at_us, client_queue_us, connect_us, connection_reused, headers_us, first_chunk_us,
    first_reasoning_us, first_content_us, last_token_us, end_us, chunks, http_status,
    finish_reason, input_tokens, output_tokens, output_tokens_source, reasoning_tokens,
    canonical_tokens, output_chars, output, reasoning, error_class, error_detail,
    chunk_attribution, chunk_text
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;

-- Records stored before: the same rules in SQL (the score summed in the database's order).
UPDATE request_records SET
    case_passed = (SELECT MIN(g.passed) FROM grades g WHERE g.request_record_id = request_records.id AND g.required = 1),
    case_score = (SELECT CASE WHEN SUM(g.weight) > 0 THEN SUM(g.weight * g.score) / SUM(g.weight) END
                  FROM grades g WHERE g.request_record_id = request_records.id);

-- Replaces request_records_by_case (run_id, case_id): its prefix, so it serves the same reads.
DROP INDEX request_records_by_case;
CREATE INDEX request_records_outline_by_case ON request_records
    (run_id, case_id, candidate_id, phase, repetition, attempt, is_warmup, error_class, sent_at_us, case_passed, case_score);
