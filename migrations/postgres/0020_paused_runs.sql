-- A run whose database stayed away past the writer's limit is `paused` (resumable, like an
-- interrupted run) instead of failed with loss.
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'paused', 'finished', 'failed', 'cancelled'));
DROP INDEX runs_unfinished;
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('queued', 'running', 'paused');
