-- Issue 48: cached-input prices. Mirrors migrations/postgres/0046_cached_input_prices.sql.
-- Append-only: never edit once released.

-- What a candidate charges per million prompt tokens read from its prompt cache (OpenAI cached
-- input, Anthropic cache reads) and written to it (Anthropic cache writes); NULL: those tokens
-- cost the input price (`domain::cost::prompt_cost`).
ALTER TABLE candidates ADD COLUMN price_cached_input_per_mtok REAL CHECK (price_cached_input_per_mtok >= 0);
ALTER TABLE candidates ADD COLUMN price_cache_write_per_mtok REAL CHECK (price_cache_write_per_mtok >= 0);
