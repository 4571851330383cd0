-- Measurement workers coordinated through the database: every process that measures (serve's
-- embedded worker, `bakeoff worker`) keeps a row here by heartbeat, and takes the units of
-- admitted runs (one candidate's measured phase, then the run's closing step) under leases
-- that expire when it stops renewing them. Append-only file: never edit once released.
CREATE TABLE workers (
    name         TEXT    PRIMARY KEY,
    labels       TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    capacity     INTEGER NOT NULL,
    embedded     INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    lease_ms     INTEGER NOT NULL,
    units_held   INTEGER NOT NULL,
    cpu_share    REAL,
    load_avg     REAL
) STRICT;

-- The units of an admitted run, in order (seq): one per candidate, in the run's candidate
-- order, then the closing step (candidate_id NULL). A run holds its admission slot while it
-- has rows here; they are removed when it pauses, fails or is cancelled (its stored records
-- stay, and resuming admits it again).
CREATE TABLE run_units (
    run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    candidate_id INTEGER,
    shard        INTEGER NOT NULL DEFAULT 0,
    shards       INTEGER NOT NULL DEFAULT 1,
    status       TEXT    NOT NULL CHECK (status IN ('queued', 'leased', 'done')),
    worker       TEXT,
    lease_until  INTEGER,
    claims       INTEGER NOT NULL DEFAULT 0,
    started_at   INTEGER,
    finished_at  INTEGER,
    harness      TEXT,
    clock_offset_ms REAL,
    clock_rtt_ms    REAL,
    PRIMARY KEY (run_id, seq)
) STRICT;

-- Labels a worker must carry to measure a candidate (e.g. its network or host).
CREATE TABLE candidate_worker_labels (
    candidate_id INTEGER PRIMARY KEY REFERENCES candidates(id) ON DELETE CASCADE,
    labels       TEXT    NOT NULL
) STRICT;

-- When a run was handed to the workers (started from a page, the API, the terminal, or resumed
-- on a start): only such runs are in the queue, so a run stored but never started (an import, a
-- seeded fixture) holds up nobody.
ALTER TABLE runs ADD COLUMN requested_at INTEGER;
