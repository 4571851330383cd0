-- Issue 46: conversation cases. Mirrors migrations/postgres/0040_conversation_turns.sql.
-- Append-only: never edit once released.

-- A conversation turn's place in its conversation (`domain::conversation::TurnFacts` as JSON:
-- the conversation case, the 1-based turn and how many it has, the user who sent it, the
-- history mode, the think time drawn before it and the time actually waited); NULL for a
-- request that is no conversation turn. The record's case_id is the turn's key, `case#turn`.
ALTER TABLE request_records ADD COLUMN turn TEXT;

-- Prompt tokens the server said it read from its prompt cache (OpenAI
-- `usage.prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`) and wrote to
-- it (Anthropic `cache_creation_input_tokens`); NULL when not reported. `input_tokens` stays the
-- whole prompt (for Anthropic: input + cache read + cache creation), the hit rate's denominator.
ALTER TABLE request_records ADD COLUMN cached_prompt_tokens INTEGER CHECK (cached_prompt_tokens >= 0);
ALTER TABLE request_records ADD COLUMN cache_creation_tokens INTEGER CHECK (cache_creation_tokens >= 0);

-- Records stay append-only: these columns get a guard of their own.
CREATE TRIGGER request_records_append_only_0040 BEFORE UPDATE OF turn, cached_prompt_tokens, cache_creation_tokens
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;
