-- no-transaction
-- A run whose database stayed away past the writer's limit is `paused` (resumable, like an
-- interrupted run) instead of failed with loss. SQLite cannot change a CHECK constraint in place,
-- so `runs` is rebuilt the documented way (sqlite.org/lang_altertable.html, "other changes"):
-- foreign keys off (only possible outside a transaction, hence `no-transaction`), copy, drop,
-- rename, indexes again, check, all in one transaction.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE runs_with_paused (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    name               TEXT    NOT NULL,
    evalset_version_id INTEGER NOT NULL REFERENCES evalset_versions (id),
    -- JSON RunConfig: part of every figure's identity.
    config             TEXT    NOT NULL,
    status             TEXT    NOT NULL
        CHECK (status IN ('queued', 'running', 'paused', 'finished', 'failed', 'cancelled')),
    error              TEXT,
    created_at         INTEGER NOT NULL,
    started_at         INTEGER,
    finished_at        INTEGER,
    harness            TEXT,
    import_hash        TEXT
) STRICT;
INSERT INTO runs_with_paused
    (id, name, evalset_version_id, config, status, error, created_at, started_at, finished_at, harness, import_hash)
    SELECT id, name, evalset_version_id, config, status, error, created_at, started_at, finished_at, harness, import_hash
    FROM runs;
DROP TABLE runs;
ALTER TABLE runs_with_paused RENAME TO runs;
CREATE INDEX runs_by_created_at ON runs (created_at DESC, id DESC);
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('queued', 'running', 'paused');
CREATE INDEX runs_by_evalset_version ON runs (evalset_version_id);
CREATE UNIQUE INDEX runs_by_import_hash ON runs (import_hash) WHERE import_hash IS NOT NULL;
COMMIT;
PRAGMA foreign_keys = ON;
