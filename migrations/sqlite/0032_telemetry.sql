-- Issue 49. A candidate's telemetry source: the server's Prometheus endpoint and a GPU
-- exporter's (NULL: none declared, not scraped).
ALTER TABLE candidates ADD COLUMN metrics_url TEXT;
ALTER TABLE candidates ADD COLUMN gpu_metrics_url TEXT;

-- One scrape of one source during a run, on the client's wall clock (at_us: the scrape's
-- midpoint, µs since the Unix epoch, the clock of request_records.sent_at_us). level/boundary:
-- the scrape the executor took at a level's start or end. samples: the kept series as
-- exposition lines ("name{labels} value"); empty with error set when the scrape failed.
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

CREATE INDEX telemetry_scrapes_by_run ON telemetry_scrapes (run_id, candidate_id, at_us);
