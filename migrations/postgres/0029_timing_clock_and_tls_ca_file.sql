-- Issue 53. Which clock timed each record ('kernel-stamp': the kernel's receive stamp of the
-- segment that carried, or under TLS completed the record carrying, each event; 'user-space':
-- when bakeoff's read returned). NULL: measured before bakeoff recorded it.
ALTER TABLE request_records ADD COLUMN clock TEXT;
-- A PEM file of CA certificates trusted for the candidate's https besides the system's.
ALTER TABLE candidates ADD COLUMN tls_ca_file TEXT;

-- Records stay append-only: the new column gets a guard of its own, as 0028's do.
CREATE TRIGGER request_records_append_only_0029 BEFORE UPDATE OF clock
    ON request_records
    FOR EACH ROW EXECUTE FUNCTION bakeoff_refuse_update();
