-- A terminal run's cases as the cases page's filters see them (`domain::case_index`), so a page
-- of a 100,000-case run reads its ten cases, not an index of all of them: each case's place in
-- the page order, and its marks (a candidate's failure class, how a candidate's final attempts
-- ended, a tag, outputs that differ between candidates), each under every key it answers
-- (`case_index::Mark::keys`: its value and/or any value, its candidate and/or any candidate,
-- as far as a filter asks them of its kind), so each test of a filter is one key, and the
-- cases it matches one range of this table's primary key in page order. Written once, with
-- the run's other summaries, when it ends (with the summary `case-index/3`, in one
-- transaction).
-- Mirrors migrations/sqlite/0026_run_case_marks.sql. Append-only: never edit once released.

CREATE TABLE run_cases (
    run_id   BIGINT  NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- 0..n-1: eval-set order (the run's case limit applied), then recorded cases the version
    -- does not list, by id.
    position BIGINT  NOT NULL,
    case_id  TEXT    NOT NULL,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE run_case_marks (
    run_id       BIGINT  NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind         TEXT    NOT NULL CHECK (kind IN ('failure', 'outcome', 'tag', 'differs')),
    -- '=' and the failure class, outcome or tag ('=' for differing outputs), or '*': any.
    value        TEXT    NOT NULL,
    -- 0 for the case's own marks (tags, differing outputs), -1: any candidate.
    candidate_id BIGINT  NOT NULL,
    position     BIGINT  NOT NULL,
    PRIMARY KEY (run_id, kind, value, candidate_id, position)
);
