-- Team settings chosen in the browser (the default threshold profile, …) and things a team has
-- retired (candidates, eval sets, threshold profiles): hidden from lists and new runs, kept with
-- every run that measured them. Append-only file: never edit once released.
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
