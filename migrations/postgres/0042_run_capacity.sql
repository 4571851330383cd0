-- Issue 47: find capacity @ SLO from the app. Mirrors migrations/sqlite/0042_run_capacity.sql.
-- Append-only: never edit once released.
--
-- Each candidate's capacity search within a find-capacity run (`domain::capacity::
-- CandidateCapacity` as JSON: the search's settings and target, every probe level with its
-- attainment, saturation signs and figures, and the outcome once it ended). Written after each
-- probe, so a restarted run resumes its search and its page shows the result whole. The probe
-- levels' records are the run's own (`request_records`, keyed by level as any level).
CREATE TABLE run_capacity (
    run_id       BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id BIGINT NOT NULL,
    search       TEXT   NOT NULL,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (run_id, candidate_id)
);
