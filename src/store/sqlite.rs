//! SQLite backend (default): one file, WAL, foreign keys on, busy timeout.
