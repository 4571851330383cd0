-- GENERATED: the schema and rows every migration in migrations/sqlite/ leads to, for a new
-- in-memory database (crates/store/src/sqlite.rs, `migrate_fresh_in_memory`). Do not edit:
-- `BAKEOFF_WRITE_SCHEMAS=1 cargo test -p bakeoff-store in_memory` writes it again.
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
    updated_at                INTEGER NOT NULL, tokenize_kind TEXT, tokenize_path TEXT, reasoning_in_content TEXT NOT NULL DEFAULT 'auto'
    CHECK (reasoning_in_content IN ('auto', 'always', 'never')), headers TEXT, tls_ca_file TEXT, gpu_count INTEGER, gpu_kind TEXT, gpu_hour_price REAL, metrics_url TEXT, gpu_metrics_url TEXT, metrics_keep TEXT, prompt_mode_of INTEGER REFERENCES candidates (id) ON DELETE CASCADE, price_cached_input_per_mtok REAL CHECK (price_cached_input_per_mtok >= 0), price_cache_write_per_mtok REAL CHECK (price_cache_write_per_mtok >= 0),
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
CREATE TABLE evalset_versions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    evalset_id   INTEGER NOT NULL REFERENCES evalsets (id) ON DELETE CASCADE,
    content_hash TEXT    NOT NULL,
    -- EvalSetFile::normalised(): re-parsed with EvalSetFile::parse to rebuild the version.
    content      TEXT    NOT NULL,
    case_count   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL, header TEXT,
    UNIQUE (evalset_id, content_hash)
) STRICT;
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
CREATE TABLE threshold_profile_versions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    profile_id  INTEGER NOT NULL REFERENCES threshold_profiles (id) ON DELETE CASCADE,
    version     INTEGER NOT NULL,
    description TEXT    NOT NULL,
    -- JSON array of ThresholdRule.
    rules       TEXT    NOT NULL,
    changed_by  TEXT    NOT NULL,
    rationale   TEXT    NOT NULL,
    at          INTEGER NOT NULL, slo TEXT,
    UNIQUE (profile_id, version)
) STRICT;
CREATE TABLE run_candidates (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id INTEGER NOT NULL REFERENCES candidates (id),
    position     INTEGER NOT NULL, snapshot TEXT,
    PRIMARY KEY (run_id, candidate_id),
    UNIQUE (run_id, position)
) STRICT;
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
    error_detail         TEXT, chunk_attribution TEXT, chunk_text TEXT, case_passed INTEGER CHECK (case_passed IN (0, 1)), case_score REAL, content_reasoning TEXT, rate_limit TEXT, clock TEXT, tool_turn TEXT, turn TEXT, cached_prompt_tokens INTEGER CHECK (cached_prompt_tokens >= 0), cache_creation_tokens INTEGER CHECK (cache_creation_tokens >= 0),
    -- A retried batch never duplicates a record.
    UNIQUE (run_id, candidate_id, case_id, phase, repetition, attempt),
    -- Records belong to a candidate of their run.
    FOREIGN KEY (run_id, candidate_id) REFERENCES run_candidates (run_id, candidate_id) ON DELETE CASCADE
) STRICT;
CREATE TABLE grades (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    request_record_id INTEGER NOT NULL REFERENCES request_records (id) ON DELETE CASCADE,
    position          INTEGER NOT NULL,
    grader            TEXT    NOT NULL,
    score             REAL    NOT NULL,
    passed            INTEGER NOT NULL CHECK (passed IN (0, 1)),
    reason            TEXT    NOT NULL, detail TEXT, weight REAL NOT NULL DEFAULT 1, required INTEGER NOT NULL DEFAULT 1 CHECK (required IN (0, 1)),
    UNIQUE (request_record_id, position)
) STRICT;
CREATE TABLE run_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at      INTEGER NOT NULL,
    level   TEXT    NOT NULL,
    message TEXT    NOT NULL
) STRICT;
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
CREATE TABLE run_summaries (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL,
    -- JSON, written and read by the web layer.
    body       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind)
) STRICT;
CREATE TABLE operability_probe_runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate_id INTEGER NOT NULL REFERENCES candidates (id) ON DELETE CASCADE,
    -- JSON ProbeReport: results with evidence (never a credential), provenance headers.
    report       TEXT    NOT NULL,
    passed       INTEGER NOT NULL,
    failed       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
) STRICT;
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
CREATE TABLE record_token_counts (
    request_record_id INTEGER PRIMARY KEY REFERENCES request_records (id) ON DELETE CASCADE,
    run_id            INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- All generated text (reasoning + answer), like request_records.output_tokens.
    output_tokens     INTEGER NOT NULL CHECK (output_tokens >= 0),
    reasoning_tokens  INTEGER CHECK (reasoning_tokens >= 0),
    -- What counted: the endpoint's kind and URL.
    tokenizer         TEXT    NOT NULL,
    counted_at        INTEGER NOT NULL
, chunk_tokens TEXT, chunk_attribution TEXT) STRICT;
CREATE TABLE run_verdicts (
    run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    profile_id      INTEGER NOT NULL REFERENCES threshold_profiles (id) ON DELETE CASCADE,
    candidate_id    INTEGER NOT NULL,
    profile_version INTEGER NOT NULL,
    verdict         TEXT    NOT NULL CHECK (verdict IN ('GO', 'NO-GO', 'INCONCLUSIVE')),
    scorecard_id    INTEGER REFERENCES scorecards (id) ON DELETE SET NULL,
    judged_at       INTEGER NOT NULL,
    PRIMARY KEY (run_id, profile_id, candidate_id)
) STRICT;
CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    username TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
    password_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    disabled_at INTEGER
, oidc_subject TEXT);
CREATE TABLE sessions (
    id_hash TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE TABLE api_tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
    token_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at INTEGER
);
CREATE TABLE login_failures (
    username TEXT NOT NULL,
    address TEXT NOT NULL,
    failures INTEGER NOT NULL,
    last_failure_at INTEGER NOT NULL, prev_failure_at INTEGER, throttled INTEGER NOT NULL DEFAULT 0, throttle_audited_at INTEGER,
    PRIMARY KEY (username, address)
);
CREATE TABLE run_candidate_stops (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id INTEGER NOT NULL,
    stage        TEXT    NOT NULL CHECK (stage IN ('setup', 'staged_start', 'error_budget')),
    reason       TEXT    NOT NULL,
    stopped_at   INTEGER NOT NULL,
    PRIMARY KEY (run_id, candidate_id)
) STRICT;
CREATE TABLE "runs" (
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
, requested_at INTEGER) STRICT;
CREATE TABLE team_settings (
    name       TEXT    PRIMARY KEY,
    value      TEXT    NOT NULL,
    changed_by TEXT    NOT NULL,
    changed_at INTEGER NOT NULL
) STRICT;
CREATE TABLE retired_items (
    kind       TEXT    NOT NULL CHECK (kind IN ('candidate', 'evalset', 'threshold_profile')),
    item_id    INTEGER NOT NULL,
    retired_by TEXT    NOT NULL,
    retired_at INTEGER NOT NULL,
    PRIMARY KEY (kind, item_id)
) STRICT;
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
CREATE TABLE candidate_worker_labels (
    candidate_id INTEGER PRIMARY KEY REFERENCES candidates(id) ON DELETE CASCADE,
    labels       TEXT    NOT NULL
) STRICT;
CREATE TABLE run_cases (
    run_id   INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- 0..n-1: eval-set order (the run's case limit applied), then recorded cases the version
    -- does not list, by id.
    position INTEGER NOT NULL,
    case_id  TEXT    NOT NULL,
    PRIMARY KEY (run_id, position)
) STRICT, WITHOUT ROWID;
CREATE TABLE run_case_marks (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind         TEXT    NOT NULL CHECK (kind IN ('failure', 'outcome', 'tag', 'differs')),
    -- '=' and the failure class, outcome or tag ('=' for differing outputs), or '*': any.
    value        TEXT    NOT NULL,
    -- 0 for the case's own marks (tags, differing outputs), -1: any candidate.
    candidate_id INTEGER NOT NULL,
    position     INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind, value, candidate_id, position)
) STRICT, WITHOUT ROWID;
CREATE TABLE telemetry_scrapes (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       INTEGER NOT NULL,
    candidate_id INTEGER NOT NULL,
    source       TEXT    NOT NULL CHECK (source IN ('server', 'gpu')),
    at_us        INTEGER NOT NULL,
    took_us      INTEGER NOT NULL,
    level        INTEGER,
    boundary     TEXT    CHECK (boundary IN ('start', 'end')),
    error        TEXT,
    samples      TEXT    NOT NULL,
    FOREIGN KEY (run_id, candidate_id) REFERENCES run_candidates (run_id, candidate_id) ON DELETE CASCADE
) STRICT;
CREATE TABLE review_items (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id INTEGER NOT NULL,
    case_id      TEXT    NOT NULL,
    repetition   INTEGER NOT NULL,
    -- Comma-separated `review::Reason`s.
    reasons      TEXT    NOT NULL,
    detail       TEXT    NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'claimed', 'skipped', 'labelled')),
    assignee     TEXT,
    claimed_by   TEXT,
    added_by     TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (run_id, candidate_id, case_id, repetition)
) STRICT;
CREATE TABLE review_labels (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id            INTEGER NOT NULL REFERENCES review_items (id) ON DELETE CASCADE,
    labeller           TEXT    NOT NULL,
    verdict            TEXT    NOT NULL CHECK (verdict IN ('pass', 'fail')),
    score              REAL,
    corrected_expected TEXT,
    note               TEXT    NOT NULL,
    labelled_at        INTEGER NOT NULL,
    UNIQUE (item_id, labeller)
) STRICT;
CREATE TABLE review_preferences (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id            INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    case_id           TEXT    NOT NULL,
    left_candidate    INTEGER NOT NULL,
    right_candidate   INTEGER NOT NULL,
    choice            TEXT    NOT NULL CHECK (choice IN ('left', 'right', 'tie')),
    -- A user's name, or 'judge:<name>' for the LLM judge.
    picker            TEXT    NOT NULL,
    left_chars        INTEGER NOT NULL,
    right_chars       INTEGER NOT NULL,
    created_at        INTEGER NOT NULL
) STRICT;
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
CREATE TABLE schedule_firings (
    schedule_id INTEGER NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    due_at      INTEGER NOT NULL,
    fired_at    INTEGER NOT NULL,
    run_id      INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    missed      INTEGER NOT NULL CHECK (missed IN (0, 1)),
    note        TEXT    NOT NULL,
    PRIMARY KEY (schedule_id, due_at)
) STRICT;
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
CREATE TABLE "notification_targets" (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL UNIQUE,
    kind         TEXT    NOT NULL CHECK (kind IN ('webhook', 'slack', 'email')),
    -- A webhook's URL; for Slack only its host (the URL itself is in url_sealed); an email
    -- target's smtp:// URL.
    url_shown    TEXT    NOT NULL,
    url_sealed   TEXT,
    secret       TEXT,
    schedule_id  INTEGER REFERENCES schedules (id) ON DELETE CASCADE,
    profile_id   INTEGER REFERENCES threshold_profiles (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL
) STRICT;
CREATE TABLE oidc_provider (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    issuer        TEXT    NOT NULL,
    client_id     TEXT    NOT NULL,
    -- Sealed with the server key, bound to "oidc provider".
    client_secret TEXT,
    -- The ID token claim roles are read from (e.g. groups); '' reads none.
    role_claim    TEXT    NOT NULL,
    -- JSON object: a claim value -> viewer / editor / admin.
    role_map      TEXT    NOT NULL,
    -- The role of a new user no mapping names; 'none': disabled until an admin assigns one.
    default_role  TEXT    NOT NULL CHECK (default_role IN ('none', 'viewer', 'editor', 'admin')),
    changed_by    TEXT    NOT NULL,
    changed_at    INTEGER NOT NULL
) STRICT;
CREATE TABLE oidc_logins (
    state_hash    TEXT    PRIMARY KEY,
    nonce         TEXT    NOT NULL,
    pkce_verifier TEXT    NOT NULL,
    return_to     TEXT    NOT NULL,
    created_at    INTEGER NOT NULL
) STRICT;
CREATE TABLE run_capacity (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    candidate_id INTEGER NOT NULL,
    search       TEXT    NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (run_id, candidate_id)
) STRICT;
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
CREATE INDEX run_candidates_by_candidate ON run_candidates (candidate_id);
CREATE INDEX request_records_by_send ON request_records (run_id, sent_at_us, id);
CREATE INDEX run_events_by_run ON run_events (run_id, id);
CREATE INDEX scorecards_by_created_at ON scorecards (created_at DESC, id DESC);
CREATE INDEX scorecards_by_run ON scorecards (run_id, id);
CREATE INDEX operability_probe_runs_by_candidate ON operability_probe_runs (candidate_id, id DESC);
CREATE INDEX record_token_counts_by_run ON record_token_counts (run_id);
CREATE INDEX run_verdicts_by_profile ON run_verdicts (profile_id, verdict, run_id);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE INDEX api_tokens_user ON api_tokens (user_id);
CREATE INDEX runs_by_created_at ON runs (created_at DESC, id DESC);
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('queued', 'running', 'paused');
CREATE INDEX runs_by_evalset_version ON runs (evalset_version_id);
CREATE UNIQUE INDEX runs_by_import_hash ON runs (import_hash) WHERE import_hash IS NOT NULL;
CREATE INDEX request_records_outline_by_case ON request_records
    (run_id, case_id, candidate_id, phase, repetition, attempt, is_warmup, error_class, sent_at_us, case_passed, case_score);
CREATE INDEX login_failures_last_failure ON login_failures (last_failure_at);
CREATE INDEX telemetry_scrapes_by_run ON telemetry_scrapes (run_id, candidate_id, at_us);
CREATE INDEX review_items_by_status ON review_items (status, id);
CREATE INDEX review_preferences_by_run ON review_preferences (run_id, id);
CREATE INDEX schedule_firings_run ON schedule_firings (run_id);
CREATE INDEX notification_deliveries_due ON notification_deliveries (status, next_attempt_at);
CREATE UNIQUE INDEX users_by_oidc_subject ON users (oidc_subject) WHERE oidc_subject IS NOT NULL;
CREATE UNIQUE INDEX candidates_prompt_mode_of ON candidates (prompt_mode_of) WHERE prompt_mode_of IS NOT NULL;
CREATE TRIGGER grades_append_only BEFORE UPDATE ON grades
BEGIN
    SELECT RAISE(ABORT, 'grades is append-only: a stored grade is never updated');
END;
CREATE TRIGGER eval_cases_immutable BEFORE UPDATE ON eval_cases
BEGIN
    SELECT RAISE(ABORT, 'eval_cases is immutable: save a new eval set version instead');
END;
CREATE TRIGGER threshold_profile_versions_immutable BEFORE UPDATE ON threshold_profile_versions
BEGIN
    SELECT RAISE(ABORT, 'threshold_profile_versions is the change history and is never updated');
END;
CREATE TRIGGER scorecards_immutable BEFORE UPDATE ON scorecards
BEGIN
    SELECT RAISE(ABORT, 'scorecards is an archive: a saved scorecard is never updated');
END;
CREATE TRIGGER operability_probe_runs_immutable BEFORE UPDATE ON operability_probe_runs
BEGIN
    SELECT RAISE(ABORT, 'operability_probe_runs is append-only');
END;
CREATE TRIGGER operability_checklists_immutable BEFORE UPDATE ON operability_checklists
BEGIN
    SELECT RAISE(ABORT, 'operability_checklists is the answers history and is never updated');
END;
CREATE TRIGGER record_token_counts_append_only BEFORE UPDATE ON record_token_counts
BEGIN
    SELECT RAISE(ABORT, 'record_token_counts is append-only: a stored count is never updated');
END;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER evalset_versions_immutable BEFORE UPDATE ON evalset_versions
BEGIN
    SELECT RAISE(ABORT, 'evalset_versions is immutable: save a new version instead');
END;
CREATE TRIGGER request_records_append_only BEFORE UPDATE OF
    id, run_id, candidate_id, case_id, phase, repetition, attempt, concurrency, is_warmup,
    sent_at_us, client_queue_us, connect_us, connection_reused, headers_us, first_chunk_us,
    first_reasoning_us, first_content_us, last_token_us, end_us, chunks, http_status,
    finish_reason, input_tokens, output_tokens, output_tokens_source, reasoning_tokens,
    canonical_tokens, output_chars, output, reasoning, error_class, error_detail,
    chunk_attribution, chunk_text
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;
CREATE TRIGGER audit_log_no_replace BEFORE INSERT ON audit_log
WHEN NEW.id IS NOT NULL AND EXISTS (SELECT 1 FROM audit_log WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER request_records_append_only_0028 BEFORE UPDATE OF content_reasoning, rate_limit
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;
CREATE TRIGGER request_records_append_only_0029 BEFORE UPDATE OF clock
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;
CREATE TRIGGER request_records_append_only_0030 BEFORE UPDATE OF tool_turn
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;
CREATE TRIGGER request_records_append_only_0040 BEFORE UPDATE OF turn, cached_prompt_tokens, cache_creation_tokens
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;
CREATE TRIGGER workload_versions_immutable BEFORE UPDATE ON workload_versions
BEGIN
    SELECT RAISE(ABORT, 'workload_versions is immutable: save a new version instead');
END;
