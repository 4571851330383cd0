-- Each version's header line on its own, so a page showing a page of cases reads the header
-- without the whole content (a 100,000-case version is about 15 MB, decompressed whole by substr()).
ALTER TABLE evalset_versions ADD COLUMN header TEXT;
UPDATE evalset_versions SET header = split_part(content, E'\n', 1);
