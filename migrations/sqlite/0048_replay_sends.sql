-- A replay run level's fidelity (docs/workloads.md, "Replay as a run level"): one row per
-- workload request sent to a candidate — when it was due and when it was written, both as
-- offsets from the replay's start, and its recorded vs sent lengths. The request's figures are
-- its ordinary request record (case id `replay-N`); this is what the schedule asked of it.
-- A request sent again after a restart replaces its row (segment > 0: the schedule was
-- re-anchored at the resume).
CREATE TABLE run_replay_sends (
    run_id                 INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id           INTEGER NOT NULL,
    request_index          INTEGER NOT NULL,
    segment                INTEGER NOT NULL,
    due_offset_us          INTEGER NOT NULL,
    sent_offset_us         INTEGER NOT NULL,
    input_tokens_recorded  INTEGER NOT NULL,
    input_tokens_sent      INTEGER NOT NULL,
    output_tokens_recorded INTEGER NOT NULL,
    max_tokens_sent        INTEGER NOT NULL,
    PRIMARY KEY (run_id, candidate_id, request_index)
) STRICT;
