-- Issue 53, items 3 and 4: reasoning in the content, and hosted APIs as teams call them.
-- Mirrors migrations/postgres/0028_reasoning_in_content_and_hosted_apis.sql. Append-only: never
-- edit once released.

-- The candidate's switch for reasoning its server leaves in the content (`<think>…</think>`).
ALTER TABLE candidates ADD COLUMN reasoning_in_content TEXT NOT NULL DEFAULT 'auto'
    CHECK (reasoning_in_content IN ('auto', 'always', 'never'));
-- Custom headers sent with every request, as JSON [{"name", "value"} | {"name", "sealed"}]:
-- a secret header's value is sealed for its candidate like the API key. NULL: none.
ALTER TABLE candidates ADD COLUMN headers TEXT;

-- What a record's content held (`domain::reasoning::Recognised` as JSON; NULL: no reasoning in
-- the content), and the rate-limit headers its response carried (JSON; NULL: none).
ALTER TABLE request_records ADD COLUMN content_reasoning TEXT;
ALTER TABLE request_records ADD COLUMN rate_limit TEXT;

-- Records stay append-only: these columns get a guard of their own, beside the one naming the
-- older columns (so a later migration re-creating that one need not know of these).
CREATE TRIGGER request_records_append_only_0028 BEFORE UPDATE OF content_reasoning, rate_limit
    ON request_records
BEGIN
    SELECT RAISE(ABORT, 'request_records is append-only: a stored record is never updated');
END;
