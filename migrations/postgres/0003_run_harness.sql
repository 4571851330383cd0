-- The harness's self-report per run (engine::harness): bakeoff's CPU time, schedule lag or
-- client queue wait, and whether the run's speed figures are flagged unreliable. JSON
-- (domain::calibers::HarnessReport); NULL for runs measured before it existed.
ALTER TABLE runs ADD COLUMN harness TEXT;
