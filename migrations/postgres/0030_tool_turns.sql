-- Issue 45: tool cases. Mirrors migrations/sqlite/0030_tool_turns.sql. Append-only: never
-- edit once released.

-- A tool case's calls as the server sent them (`domain::tool_calls::ToolTurn` as JSON: the
-- mode, each call's name and raw arguments text, whether the stream was cut mid-call, the
-- tool-turn timings); NULL for a request without tools. Kept raw so a record is re-gradable.
-- (A case's tools and expected calls ride in `eval_cases.input`, which is JSON already.)
ALTER TABLE request_records ADD COLUMN tool_turn TEXT;

-- Records stay append-only: this column gets a guard of its own.
CREATE TRIGGER request_records_append_only_0030 BEFORE UPDATE OF tool_turn
    ON request_records
    FOR EACH ROW EXECUTE FUNCTION bakeoff_refuse_update();
