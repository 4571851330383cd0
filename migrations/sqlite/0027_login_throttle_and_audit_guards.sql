-- Issue 44. Failed logins are reserved before a password is checked (atomically: the count is
-- raised first and rolled back when the attempt is throttled), so each row keeps the failure
-- before its last one too; throttled attempts are counted and audited at most once a minute
-- per row; old rows are pruned by their last failure.
ALTER TABLE login_failures ADD COLUMN prev_failure_at INTEGER;
ALTER TABLE login_failures ADD COLUMN throttled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE login_failures ADD COLUMN throttle_audited_at INTEGER;
CREATE INDEX login_failures_last_failure ON login_failures (last_failure_at);
-- The audit log stays append-only under INSERT OR REPLACE / REPLACE INTO: REPLACE deletes the
-- row it replaces without firing a DELETE trigger (recursive triggers are off), so an insert
-- naming an id already used is refused before it happens.
CREATE TRIGGER audit_log_no_replace BEFORE INSERT ON audit_log
WHEN NEW.id IS NOT NULL AND EXISTS (SELECT 1 FROM audit_log WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
