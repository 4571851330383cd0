-- Verdicts of runs by threshold profiles, so the archive filters by profile and verdict with
-- one indexed lookup instead of judging every run's records on each page view.
-- Append-only file: never edit once released.
--
-- One row per (run, profile, candidate): the latest judgement of that run by that profile.
-- Written when a run finishes (by every profile's then-current version, without incumbent or
-- pipeline) and replaced when a scorecard of the run is saved with that profile
-- (`scorecard_id` set). `profile_version` says which version judged it.
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

CREATE INDEX run_verdicts_by_profile ON run_verdicts (profile_id, verdict, run_id);

-- Scorecards saved before this table existed: each (run, profile)'s newest one.
INSERT OR IGNORE INTO run_verdicts
    (run_id, profile_id, candidate_id, profile_version, verdict, scorecard_id, judged_at)
SELECT s.run_id, s.profile_id, CAST(json_extract(j.value, '$.candidate_id') AS INTEGER),
       s.profile_version, json_extract(j.value, '$.verdict'), s.id, s.created_at
FROM scorecards s, json_each(s.verdicts) j
WHERE s.id = (SELECT MAX(s2.id) FROM scorecards s2 WHERE s2.run_id = s.run_id AND s2.profile_id = s.profile_id)
  AND json_extract(j.value, '$.verdict') IN ('GO', 'NO-GO', 'INCONCLUSIVE');
