-- Issue 45: both tool modes in one run. Mirrors migrations/sqlite/0041_prompt_mode_variants.sql.
-- Append-only: never edit once released.

-- A run whose tool mode is `both` measures each candidate natively and, beside it, its
-- prompt-mode variant: a candidate of its own ("NAME (prompt mode)"), a copy of candidate
-- `prompt_mode_of` refreshed from it whenever such a run is created. Variants stay out of the
-- candidate lists and the run form; runs keep them (and their snapshots) like any candidate.
-- NULL for every candidate a team created. Deleting a candidate deletes its unused variant.
ALTER TABLE candidates ADD COLUMN prompt_mode_of BIGINT REFERENCES candidates (id) ON DELETE CASCADE;
CREATE UNIQUE INDEX candidates_prompt_mode_of ON candidates (prompt_mode_of) WHERE prompt_mode_of IS NOT NULL;
