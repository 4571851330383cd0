-- Issue 52. Schedules: a saved run configuration with a cadence (cron, in its time zone), an
-- owner, a budget and a baseline. The candidates are a JSON array of ids in order (a deleted
-- candidate is named when the schedule next fires); the configuration is the run's JSON.
CREATE TABLE schedules (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    name               TEXT    NOT NULL UNIQUE,
    evalset_id         INTEGER NOT NULL REFERENCES evalsets (id) ON DELETE CASCADE,
    -- NULL: the eval set's latest version at each firing.
    evalset_version_id INTEGER REFERENCES evalset_versions (id) ON DELETE SET NULL,
    candidate_ids      TEXT    NOT NULL,
    config             TEXT    NOT NULL,
    profile_id         INTEGER REFERENCES threshold_profiles (id) ON DELETE SET NULL,
    cadence            TEXT    NOT NULL,
    time_zone          TEXT    NOT NULL,
    owner              TEXT    NOT NULL,
    max_requests       INTEGER,
    max_cost_usd       REAL,
    -- 'last-passed' or 'run:ID'.
    baseline           TEXT    NOT NULL,
    paused             INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    -- Due times at or before this are not owed (creation, a timing change, the end of a pause).
    counting_since     INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
) STRICT;

-- One row per due time claimed. The primary key is the claim: of two schedulers (two web
-- nodes, or one restarted) only the one whose insert lands creates the run, in the same
-- transaction, so a due time never makes two runs.
CREATE TABLE schedule_firings (
    schedule_id INTEGER NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    due_at      INTEGER NOT NULL,
    fired_at    INTEGER NOT NULL,
    run_id      INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    missed      INTEGER NOT NULL CHECK (missed IN (0, 1)),
    note        TEXT    NOT NULL,
    PRIMARY KEY (schedule_id, due_at)
) STRICT;
CREATE INDEX schedule_firings_run ON schedule_firings (run_id);

-- Notification targets: a signed webhook or a Slack-compatible incoming webhook, told about one
-- schedule's runs or every scheduled run judged by one profile. A webhook's secret and a Slack
-- target's URL are sealed with the server key (bound to the target's id), as API keys are.
CREATE TABLE notification_targets (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL UNIQUE,
    kind         TEXT    NOT NULL CHECK (kind IN ('webhook', 'slack')),
    -- A webhook's URL; for Slack only its host (the URL itself is in url_sealed).
    url_shown    TEXT    NOT NULL,
    url_sealed   TEXT,
    secret       TEXT,
    schedule_id  INTEGER REFERENCES schedules (id) ON DELETE CASCADE,
    profile_id   INTEGER REFERENCES threshold_profiles (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL
) STRICT;

-- The delivery log. (target, event) is unique: one change is sent once to each target, however
-- many schedulers notice it; a row is retried with backoff until delivered or given up.
CREATE TABLE notification_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id       INTEGER NOT NULL REFERENCES notification_targets (id) ON DELETE CASCADE,
    event_key       TEXT    NOT NULL,
    run_id          INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    message         TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER,
    UNIQUE (target_id, event_key)
) STRICT;
CREATE INDEX notification_deliveries_due ON notification_deliveries (status, next_attempt_at);
