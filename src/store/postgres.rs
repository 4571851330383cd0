//! PostgreSQL backend (teams, workers).
