-- Issue 47: a threshold profile's SLO block. Mirrors migrations/sqlite/0047_profile_slo.sql.
-- Append-only: never edit once released.

-- The version's SLO (`domain::run::Slo` as JSON: limits in ms, target attainment as a fraction,
-- optional later-turn limits); NULL: the version has none, and runs are judged by their own SLO.
ALTER TABLE threshold_profile_versions ADD COLUMN slo TEXT;
