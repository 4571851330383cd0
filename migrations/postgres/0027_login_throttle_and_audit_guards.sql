-- Issue 44. Failed logins are reserved before a password is checked (atomically: the count is
-- raised first and rolled back when the attempt is throttled), so each row keeps the failure
-- before its last one too; throttled attempts are counted and audited at most once a minute
-- per row; old rows are pruned by their last failure.
ALTER TABLE login_failures ADD COLUMN prev_failure_at BIGINT;
ALTER TABLE login_failures ADD COLUMN throttled BIGINT NOT NULL DEFAULT 0;
ALTER TABLE login_failures ADD COLUMN throttle_audited_at BIGINT;
CREATE INDEX login_failures_last_failure ON login_failures (last_failure_at);
-- The audit log stays append-only under TRUNCATE too (row triggers do not fire for it).
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
