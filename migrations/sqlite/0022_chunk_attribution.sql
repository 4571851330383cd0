-- How output tokens were attributed to a stream's chunks (issue 14 item 2; docs/measurement.md
-- "Tokens per chunk"). Mirrored in migrations/{sqlite,postgres}/0022_chunk_attribution.sql.

-- The record's own attribution, made when it was stored: as-streamed | single-chunk |
-- o200k-proportional. NULL: no chunks, or stored before this column existed.
ALTER TABLE request_records ADD COLUMN chunk_attribution TEXT;
-- Bytes of (reasoning, answer) text each token-bearing chunk carried, as a JSON array of pairs,
-- kept only for records a server tokenizer may recount (no usage, several chunks): the chunk
-- boundaries its cumulative prefixes are counted at. NULL otherwise.
ALTER TABLE request_records ADD COLUMN chunk_text TEXT;

-- A server-tokenizer recount's per-chunk counts (JSON array, one per chunk, summing to
-- output_tokens) and how they were found: one-per-chunk | server-prefixes |
-- server-prefixes-grouped | o200k-proportional. NULL: counted before this column existed
-- (read as o200k-proportional, the rescaling used then).
ALTER TABLE record_token_counts ADD COLUMN chunk_tokens TEXT;
ALTER TABLE record_token_counts ADD COLUMN chunk_attribution TEXT;
