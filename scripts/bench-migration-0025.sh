#!/bin/bash
# Times migration 0025 (outline columns backfilled from grades, the outline index rebuilt) on a
# PostgreSQL database whose records were stored before it: a database migrated up to 0024 is
# filled with N synthetic records (16 chunks, one grade each), then 0025 runs in one
# transaction, as the app runs it. Run for 100,000 and 1,000,000 records: the ratio says
# whether it grows with the records and nothing more.
#   scripts/bench-migration-0025.sh [postgres://postgres@127.0.0.1:5432]
# Creates and drops the database bakeoff_bench_mig25 on that server.
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER="${1:-postgres://postgres@127.0.0.1:5432}"
DB=bakeoff_bench_mig25
psql_on() { psql "$SERVER/$1" -q -v ON_ERROR_STOP=1 "${@:2}"; }
CHUNKS="[$(seq -s, 0 15 | sed 's/\([0-9]*\)/[\1,1]/g')]"

time_migration() {
    local n=$1
    psql_on test -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>/dev/null
    for f in $(ls migrations/postgres/*.sql | sort | awk -F/ '$3 < "0025"'); do
        psql_on "$DB" -1 -f "$f" > /dev/null
    done
    # Foreign keys and the append-only guards are the app's; the synthetic rows need neither.
    psql_on "$DB" <<SQL
SET session_replication_role = replica;
INSERT INTO request_records (run_id, candidate_id, case_id, phase, repetition, attempt, concurrency, is_warmup,
    sent_at_us, client_queue_us, headers_us, first_chunk_us, first_content_us, last_token_us, end_us, chunks,
    http_status, finish_reason, input_tokens, output_tokens, output_tokens_source, canonical_tokens, output_chars, output)
SELECT 1, 1 + (i / 1000) % 2, 'case-' || lpad((i % 1000)::text, 6, '0'), 'quality', i / 2000, 0, 8, false,
    i * 100, 15, 30000, 40000, 40000, 190000, 200000, '$CHUNKS', 200, 'stop', 24, 16, 'usage', 16, 60, 'positive'
FROM generate_series(0, $n - 1) AS i;
INSERT INTO grades (request_record_id, position, grader, score, passed, reason)
SELECT id, 0, 'exact', (id % 5 <> 0)::int, id % 5 <> 0, '' FROM request_records;
SET session_replication_role = origin;
VACUUM ANALYZE;
SQL
    local start end
    start=$(date +%s.%N)
    psql_on "$DB" -1 -f migrations/postgres/0025_outline_indexes.sql
    end=$(date +%s.%N)
    local passed
    passed=$(psql_on "$DB" -At -c "SELECT count(*) FILTER (WHERE case_passed) FROM request_records")
    [ "$passed" -eq $((n * 4 / 5)) ] || { echo "backfill wrong: $passed of $n passed" >&2; exit 1; }
    psql_on test -c "DROP DATABASE $DB"
    echo "$end - $start" | bc
}

small=$(time_migration 100000)
big=$(time_migration 1000000)
printf 'migration 0025 on PostgreSQL: 100,000 records %.1f s; 1,000,000 records %.1f s (%.1f× for 10× the records)\n' \
    "$small" "$big" "$(echo "$big / $small" | bc -l)"
