-- Each version's header line on its own, so a page showing a page of cases reads the header
-- without the whole content (a 100,000-case version is about 15 MB, decompressed whole by substr()).
ALTER TABLE evalset_versions ADD COLUMN header TEXT;
-- The backfill is the one update a stored version ever gets (its own first line, derived), so
-- the immutability trigger steps aside for it alone: with it, any database holding an eval set
-- failed this migration.
ALTER TABLE evalset_versions DISABLE TRIGGER evalset_versions_immutable;
UPDATE evalset_versions SET header = split_part(content, E'\n', 1);
ALTER TABLE evalset_versions ENABLE TRIGGER evalset_versions_immutable;
