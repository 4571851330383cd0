-- bakeoff schema, SQLite flavour. Mirrors migrations/postgres/0001_initial.sql table for table.
-- Migrations are append-only: never edit this file once released; add a new one.
--
-- Conventions
--   * Timestamps are INTEGER unix milliseconds (UTC); request timings are INTEGER microseconds.
--   * JSON values are stored as TEXT and parsed by the application (serde).
--   * Tables are STRICT so a wrong type is an error, not a silent conversion; booleans are
--     INTEGER 0/1 with a CHECK.
--   * AUTOINCREMENT so a deleted row's id is never handed out again (ids appear in URLs and
--     exports).

CREATE TABLE candidates (
    id                        INTEGER PRIMARY KEY AUTOINCREMENT,
    name                      TEXT    NOT NULL UNIQUE,
    provider                  TEXT    NOT NULL,
    base_url                  TEXT    NOT NULL,
    model                     TEXT    NOT NULL,
    -- Stored key (write-only from the UI); prefer api_key_env, which names an environment variable.
    api_key                   TEXT,
    api_key_env               TEXT,
    max_tokens                INTEGER,
    temperature               REAL,
    -- JSON object merged into every request body.
    extra_body                TEXT    NOT NULL DEFAULT '{}',
    -- Declared serving conditions.
    hardware                  TEXT,
    framework                 TEXT,
    quantization              TEXT,
    context_length            INTEGER,
    -- Price per million tokens.
    price_input_per_mtok      REAL,
    price_output_per_mtok     REAL,
    -- A vendor's headline figure, always with its caliber.
    claimed_tokens_per_second REAL,
    claimed_caliber           TEXT,
    claimed_conditions        TEXT,
    notes                     TEXT,
    created_at                INTEGER NOT NULL,
    updated_at                INTEGER NOT NULL,
    CHECK (claimed_tokens_per_second IS NULL OR claimed_caliber IS NOT NULL)
) STRICT;

CREATE TABLE evalsets (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL UNIQUE,
    -- task and description follow the newest version.
    task        TEXT    NOT NULL,
    description TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

-- Immutable versions, identified by the SHA-256 of the normalised file.
CREATE TABLE evalset_versions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    evalset_id   INTEGER NOT NULL REFERENCES evalsets (id) ON DELETE CASCADE,
    content_hash TEXT    NOT NULL,
    -- EvalSetFile::normalised(): re-parsed with EvalSetFile::parse to rebuild the version.
    content      TEXT    NOT NULL,
    case_count   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (evalset_id, content_hash)
) STRICT;

-- One row per case of a version, so cases can be queried without parsing the file.
CREATE TABLE eval_cases (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    version_id INTEGER NOT NULL REFERENCES evalset_versions (id) ON DELETE CASCADE,
    case_id    TEXT    NOT NULL,
    position   INTEGER NOT NULL,
    -- JSON object: {"vars": {...}} and/or {"messages": [...]}.
    input      TEXT    NOT NULL,
    -- JSON value or NULL.
    expected   TEXT,
    -- JSON array: the graders that apply (the case's own, else the header's defaults).
    graders    TEXT    NOT NULL,
    -- JSON array of strings.
    tags       TEXT    NOT NULL,
    weight     REAL    NOT NULL,
    UNIQUE (version_id, case_id),
    UNIQUE (version_id, position)
) STRICT;

CREATE TABLE threshold_profiles (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT    NOT NULL UNIQUE,
    description     TEXT    NOT NULL DEFAULT '',
    current_version INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

-- The change history: one row per save, never changed.
CREATE TABLE threshold_profile_versions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    profile_id  INTEGER NOT NULL REFERENCES threshold_profiles (id) ON DELETE CASCADE,
    version     INTEGER NOT NULL,
    description TEXT    NOT NULL,
    -- JSON array of ThresholdRule.
    rules       TEXT    NOT NULL,
    changed_by  TEXT    NOT NULL,
    rationale   TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    UNIQUE (profile_id, version)
) STRICT;

CREATE TABLE runs (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    name               TEXT    NOT NULL,
    evalset_version_id INTEGER NOT NULL REFERENCES evalset_versions (id),
    -- JSON RunConfig: part of every figure's identity.
    config             TEXT    NOT NULL,
    status             TEXT    NOT NULL
        CHECK (status IN ('queued', 'running', 'finished', 'failed', 'cancelled')),
    error              TEXT,
    created_at         INTEGER NOT NULL,
    started_at         INTEGER,
    finished_at        INTEGER
) STRICT;

CREATE INDEX runs_by_created_at ON runs (created_at DESC, id DESC);
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('queued', 'running');
CREATE INDEX runs_by_evalset_version ON runs (evalset_version_id);

CREATE TABLE run_candidates (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id INTEGER NOT NULL REFERENCES candidates (id),
    position     INTEGER NOT NULL,
    PRIMARY KEY (run_id, candidate_id),
    UNIQUE (run_id, position)
) STRICT;

CREATE INDEX run_candidates_by_candidate ON run_candidates (candidate_id);

-- One row per request attempt, exactly as measured. Append-only (see the trigger below).
-- Offsets (*_us) are microseconds after sent_at_us; NULL means the event never happened.
CREATE TABLE request_records (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id               INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id         INTEGER NOT NULL,
    case_id              TEXT    NOT NULL,
    phase                TEXT    NOT NULL,
    repetition           INTEGER NOT NULL,
    attempt              INTEGER NOT NULL,
    concurrency          INTEGER NOT NULL,
    is_warmup            INTEGER NOT NULL CHECK (is_warmup IN (0, 1)),
    sent_at_us           INTEGER NOT NULL,
    client_queue_us      INTEGER NOT NULL,
    connect_us           INTEGER,
    connection_reused    INTEGER CHECK (connection_reused IN (0, 1)),
    headers_us           INTEGER,
    first_chunk_us       INTEGER,
    first_reasoning_us   INTEGER,
    first_content_us     INTEGER,
    last_token_us        INTEGER,
    end_us               INTEGER,
    -- JSON array of [offset_us, tokens] for every token-bearing chunk.
    chunks               TEXT    NOT NULL,
    http_status          INTEGER,
    finish_reason        TEXT,
    input_tokens         INTEGER,
    output_tokens        INTEGER,
    output_tokens_source TEXT,
    reasoning_tokens     INTEGER,
    canonical_tokens     INTEGER,
    output_chars         INTEGER NOT NULL,
    output               TEXT    NOT NULL,
    reasoning            TEXT,
    error_class          TEXT,
    error_detail         TEXT,
    -- A retried batch never duplicates a record.
    UNIQUE (run_id, candidate_id, case_id, phase, repetition, attempt),
    -- Records belong to a candidate of their run.
    FOREIGN KEY (run_id, candidate_id) REFERENCES run_candidates (run_id, candidate_id) ON DELETE CASCADE
) STRICT;

CREATE INDEX request_records_by_send ON request_records (run_id, sent_at_us, id);

CREATE TABLE grades (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    request_record_id INTEGER NOT NULL REFERENCES request_records (id) ON DELETE CASCADE,
    position          INTEGER NOT NULL,
    grader            TEXT    NOT NULL,
    score             REAL    NOT NULL,
    passed            INTEGER NOT NULL CHECK (passed IN (0, 1)),
    reason            TEXT    NOT NULL,
    UNIQUE (request_record_id, position)
) STRICT;

CREATE TABLE run_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at      INTEGER NOT NULL,
    level   TEXT    NOT NULL,
    message TEXT    NOT NULL
) STRICT;

CREATE INDEX run_events_by_run ON run_events (run_id, id);

-- Raw measurements and versions are never rewritten: aggregates must always be recomputable
-- from exactly what was measured. DELETE stays possible (deleting a run cascades).
CREATE TRIGGER request_records_append_only BEFORE UPDATE ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;

CREATE TRIGGER grades_append_only BEFORE UPDATE ON grades
BEGIN
    SELECT RAISE(ABORT, 'grades is append-only: a stored grade is never updated');
END;

CREATE TRIGGER evalset_versions_immutable BEFORE UPDATE ON evalset_versions
BEGIN
    SELECT RAISE(ABORT, 'evalset_versions is immutable: save a new version instead');
END;

CREATE TRIGGER eval_cases_immutable BEFORE UPDATE ON eval_cases
BEGIN
    SELECT RAISE(ABORT, 'eval_cases is immutable: save a new eval set version instead');
END;

CREATE TRIGGER threshold_profile_versions_immutable BEFORE UPDATE ON threshold_profile_versions
BEGIN
    SELECT RAISE(ABORT, 'threshold_profile_versions is the change history and is never updated');
END;
