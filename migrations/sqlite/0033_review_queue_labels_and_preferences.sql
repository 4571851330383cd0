-- Humans in the loop (issue 50, docs/review.md): the review queue of answers sent to humans,
-- their labels, and blind pairwise preferences. An item is one answer of a run (candidate ×
-- case × repetition), once: a second fill adds only what is new. Labels keep each labeller's
-- latest word on an item (the audit log keeps who labelled what and when); preferences are
-- append-only and keep the sides the answers were shown on (for the judge's position bias).
-- Mirrors migrations/postgres/0033_review_queue_labels_and_preferences.sql. Append-only: never
-- edit once released.

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

CREATE INDEX review_items_by_status ON review_items (status, id);

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

CREATE INDEX review_preferences_by_run ON review_preferences (run_id, id);
