-- Operability: probe runs against a candidate's endpoint, and the team's operations checklist
-- answers, versioned (who, when, why). Both are append-only: rows are never updated.
CREATE TABLE operability_probe_runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate_id INTEGER NOT NULL REFERENCES candidates (id) ON DELETE CASCADE,
    -- JSON ProbeReport: results with evidence (never a credential), provenance headers.
    report       TEXT    NOT NULL,
    passed       INTEGER NOT NULL,
    failed       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
) STRICT;

CREATE INDEX operability_probe_runs_by_candidate ON operability_probe_runs (candidate_id, id DESC);

CREATE TABLE operability_checklists (
    candidate_id INTEGER NOT NULL REFERENCES candidates (id) ON DELETE CASCADE,
    version      INTEGER NOT NULL,
    -- JSON object: item key -> {"answer": "yes" | "no" | "not_applicable" | "unanswered", "notes"}.
    answers      TEXT    NOT NULL,
    changed_by   TEXT    NOT NULL,
    rationale    TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (candidate_id, version)
) STRICT;

CREATE TRIGGER operability_probe_runs_immutable BEFORE UPDATE ON operability_probe_runs
BEGIN
    SELECT RAISE(ABORT, 'operability_probe_runs is append-only');
END;

CREATE TRIGGER operability_checklists_immutable BEFORE UPDATE ON operability_checklists
BEGIN
    SELECT RAISE(ABORT, 'operability_checklists is the answers history and is never updated');
END;
