-- Workloads (DESIGN.md "Workload"): versioned load descriptions beside eval sets, imported from
-- a team's traffic log or generated. A version is identified by the SHA-256 of its normalised
-- file, like an eval set's, and never changes.
CREATE TABLE workloads (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL UNIQUE,
    -- description follows the newest version.
    description TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE workload_versions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    workload_id   INTEGER NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
    content_hash  TEXT    NOT NULL,
    -- WorkloadFile::normalised(): re-parsed with WorkloadFile::parse to rebuild the version.
    content       TEXT    NOT NULL,
    request_count INTEGER NOT NULL,
    duration_ms   REAL    NOT NULL,
    source        TEXT    NOT NULL,
    -- The real prompts are kept: an explicit choice at import, shown on the workload's page.
    keeps_text    INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    UNIQUE (workload_id, content_hash)
) STRICT;

CREATE TRIGGER workload_versions_immutable BEFORE UPDATE ON workload_versions
BEGIN
    SELECT RAISE(ABORT, 'workload_versions is immutable: save a new version instead');
END;
