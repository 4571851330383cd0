-- Candidates stopped within a run while the others went on (a failed staged start, a passed
-- error budget, a client that could not be built), with the reason pages, scorecards and
-- exports state as that candidate's outcome. Append-only file: never edit once released.
--
-- One row per (run, candidate): a candidate stops once; a resumed run skips it.
CREATE TABLE run_candidate_stops (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id INTEGER NOT NULL,
    stage        TEXT    NOT NULL CHECK (stage IN ('setup', 'staged_start', 'error_budget')),
    reason       TEXT    NOT NULL,
    stopped_at   INTEGER NOT NULL,
    PRIMARY KEY (run_id, candidate_id)
) STRICT;
