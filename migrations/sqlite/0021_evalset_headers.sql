-- Each version's header line on its own, so a page showing a page of cases reads the header
-- without the whole content (a 100,000-case version is about 15 MB, read whole by substr()).
ALTER TABLE evalset_versions ADD COLUMN header TEXT;
-- The backfill is the one update a stored version ever gets (its own first line, derived), so
-- the immutability trigger steps aside for it alone: with it, any database holding an eval set
-- failed this migration.
DROP TRIGGER evalset_versions_immutable;
UPDATE evalset_versions SET header = CASE
    WHEN instr(content, char(10)) > 0 THEN substr(content, 1, instr(content, char(10)) - 1)
    ELSE content
END;

CREATE TRIGGER evalset_versions_immutable BEFORE UPDATE ON evalset_versions
BEGIN
    SELECT RAISE(ABORT, 'evalset_versions is immutable: save a new version instead');
END;
