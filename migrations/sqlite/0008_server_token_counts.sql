-- Token counts from a candidate's own tokenize endpoint (llama.cpp, vLLM, llama-cpp-python) for
-- streams that carried no `usage`. Mirrors migrations/postgres/0008_server_token_counts.sql.

-- The declared endpoint: its API shape (llama-cpp | vllm | llama-cpp-python) and its path on
-- the candidate's own server (the base URL's origin). NULL kind: none declared.
ALTER TABLE candidates ADD COLUMN tokenize_kind TEXT;
ALTER TABLE candidates ADD COLUMN tokenize_path TEXT;

-- One row per counted record, beside it: request_records is append-only, so a count made after
-- the candidate's measured load ended is kept here and applied when records are read.
CREATE TABLE record_token_counts (
    request_record_id INTEGER PRIMARY KEY REFERENCES request_records (id) ON DELETE CASCADE,
    run_id            INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- All generated text (reasoning + answer), like request_records.output_tokens.
    output_tokens     INTEGER NOT NULL CHECK (output_tokens >= 0),
    reasoning_tokens  INTEGER CHECK (reasoning_tokens >= 0),
    -- What counted: the endpoint's kind and URL.
    tokenizer         TEXT    NOT NULL,
    counted_at        INTEGER NOT NULL
) STRICT;

CREATE INDEX record_token_counts_by_run ON record_token_counts (run_id);

CREATE TRIGGER record_token_counts_append_only BEFORE UPDATE ON record_token_counts
BEGIN
    SELECT RAISE(ABORT, 'record_token_counts is append-only: a stored count is never updated');
END;
