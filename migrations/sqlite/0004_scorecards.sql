-- Archived scorecards: a run judged by one threshold-profile version, against an optional
-- incumbent, with the pipeline the team stated. The verdict is always recomputable from the
-- run's records; `verdicts` keeps how it read when saved. Rows are never updated.
CREATE TABLE scorecards (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id                 INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    profile_id             INTEGER NOT NULL,
    profile_version        INTEGER NOT NULL,
    incumbent_candidate_id INTEGER REFERENCES candidates (id),
    -- JSON PipelineSpec: {"stages": [{"name", "seconds_per_item"}], "model_share": null}.
    pipeline               TEXT    NOT NULL,
    created_by             TEXT    NOT NULL,
    note                   TEXT    NOT NULL DEFAULT '',
    -- JSON array of RecordedVerdict, as read when saved.
    verdicts               TEXT    NOT NULL,
    created_at             INTEGER NOT NULL,
    FOREIGN KEY (profile_id, profile_version)
        REFERENCES threshold_profile_versions (profile_id, version) ON DELETE CASCADE
) STRICT;

CREATE INDEX scorecards_by_created_at ON scorecards (created_at DESC, id DESC);
CREATE INDEX scorecards_by_run ON scorecards (run_id, id);

CREATE TRIGGER scorecards_immutable BEFORE UPDATE ON scorecards
BEGIN
    SELECT RAISE(ABORT, 'scorecards is an archive: a saved scorecard is never updated');
END;
