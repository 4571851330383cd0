//! Server-tokenizer counts (migration 0008): output tokens of stored records counted by the
//! candidate's own tokenize endpoint after its measured load ended. Records are append-only, so
//! counts live beside them in `record_token_counts` (append-only too) and are applied whenever
//! records are read (`attach_counts`). The SQL is the same on SQLite and PostgreSQL: one macro
//! writes both; `Store` delegates here.
use std::collections::HashMap;

use super::rows::RecordRow;
use super::{Result, StoreError};
use crate::domain::run::{RequestRecord, ServerTokenCount, TokenSource, UncountedRecord};

/// One stored count, as read back.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CountRow {
    pub request_record_id: i64,
    pub output_tokens: i64,
    pub reasoning_tokens: Option<i64>,
}

/// Counts by record id, checked for range.
pub(crate) fn by_record(rows: Vec<CountRow>) -> Result<HashMap<i64, (u32, Option<u32>)>> {
    let range = |id: i64, v: i64| {
        u32::try_from(v)
            .map_err(|_| StoreError::Corrupt(format!("record_token_counts of record {id}: {v} is out of range")))
    };
    rows.into_iter()
        .map(|r| {
            let output = range(r.request_record_id, r.output_tokens)?;
            let reasoning = r.reasoning_tokens.map(|v| range(r.request_record_id, v)).transpose()?;
            Ok((r.request_record_id, (output, reasoning)))
        })
        .collect()
}

/// Applies the server-tokenizer counts to the records read (rows and records in the same order).
pub(crate) fn attach_counts(
    rows_ids: &[i64],
    records: &mut [RequestRecord],
    counts: &HashMap<i64, (u32, Option<u32>)>,
) {
    if counts.is_empty() {
        return;
    }
    for (id, record) in rows_ids.iter().zip(records.iter_mut()) {
        if let Some(&(output, reasoning)) = counts.get(id) {
            record.apply_server_count(output, reasoning);
        }
    }
}

/// The ids of rows, in order (kept before the rows are turned into records).
pub(crate) fn ids(rows: &[RecordRow]) -> Vec<i64> {
    rows.iter().map(|r| r.id).collect()
}

#[derive(Debug, sqlx::FromRow)]
struct UncountedRow {
    id: i64,
    output: String,
    reasoning: Option<String>,
}

/// Counts per multi-row INSERT (6 binds each).
const COUNTS_PER_STATEMENT: usize = 1_000;

macro_rules! token_count_queries {
    ($db:ty) => {
        use sqlx::QueryBuilder;

        use super::*;
        use crate::domain::Timestamp;

        type Pool = sqlx::Pool<$db>;

        /// Every count of a run's records.
        pub(crate) async fn for_run(pool: &Pool, run_id: i64) -> Result<HashMap<i64, (u32, Option<u32>)>> {
            let rows: Vec<CountRow> = sqlx::query_as(
                "SELECT request_record_id, output_tokens, reasoning_tokens FROM record_token_counts \
                 WHERE run_id = $1",
            )
            .bind(run_id)
            .fetch_all(pool)
            .await?;
            by_record(rows)
        }

        /// The counts of these records (an index lookup each).
        pub(crate) async fn for_records(pool: &Pool, ids: &[i64]) -> Result<HashMap<i64, (u32, Option<u32>)>> {
            let mut rows: Vec<CountRow> = Vec::new();
            for chunk in ids.chunks(super::super::rows::SMALL_ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::<$db>::new(
                    "SELECT request_record_id, output_tokens, reasoning_tokens FROM record_token_counts \
                     WHERE request_record_id IN (",
                );
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                qb.push(")");
                rows.extend(qb.build_query_as::<CountRow>().fetch_all(pool).await?);
            }
            by_record(rows)
        }

        /// Measured records of one candidate with generated text, no `usage` count and no
        /// server count yet, in send order.
        pub(crate) async fn uncounted(pool: &Pool, run_id: i64, candidate_id: i64) -> Result<Vec<UncountedRecord>> {
            let rows: Vec<UncountedRow> = sqlx::query_as(
                "SELECT r.id, r.output, r.reasoning FROM request_records r \
                 WHERE r.run_id = $1 AND r.candidate_id = $2 AND NOT r.is_warmup \
                 AND (r.output_tokens_source IS NULL OR r.output_tokens_source NOT IN ($3, $4)) \
                 AND (r.output <> '' OR COALESCE(r.reasoning, '') <> '') \
                 AND NOT EXISTS (SELECT 1 FROM record_token_counts c WHERE c.request_record_id = r.id) \
                 ORDER BY r.sent_at_us, r.id",
            )
            .bind(run_id)
            .bind(candidate_id)
            .bind(TokenSource::Usage.as_str())
            .bind(TokenSource::ServerTokenizer.as_str())
            .fetch_all(pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|r| UncountedRecord {
                    record_id: r.id,
                    output: r.output,
                    reasoning: r.reasoning,
                })
                .collect())
        }

        /// Stores counts; a record already counted keeps its first count. Returns how many were new.
        pub(crate) async fn save(pool: &Pool, run_id: i64, counts: &[ServerTokenCount]) -> Result<u64> {
            let now = Timestamp::now().0;
            let mut stored = 0;
            for chunk in counts.chunks(COUNTS_PER_STATEMENT) {
                let mut qb = QueryBuilder::<$db>::new(
                    "INSERT INTO record_token_counts \
                     (request_record_id, run_id, output_tokens, reasoning_tokens, tokenizer, counted_at) ",
                );
                qb.push_values(chunk, |mut b, c| {
                    b.push_bind(c.record_id)
                        .push_bind(run_id)
                        .push_bind(i64::from(c.output_tokens))
                        .push_bind(c.reasoning_tokens.map(i64::from))
                        .push_bind(c.tokenizer.as_str())
                        .push_bind(now);
                });
                qb.push(" ON CONFLICT (request_record_id) DO NOTHING");
                stored += qb
                    .build()
                    .execute(pool)
                    .await
                    .map_err(StoreError::from)
                    .map_err(|e| {
                        super::super::rows::not_found_on_foreign_key(e, || format!("a counted record of run {run_id}"))
                    })?
                    .rows_affected();
            }
            Ok(stored)
        }
    };
}

pub(crate) mod sqlite {
    token_count_queries!(sqlx::Sqlite);
}

pub(crate) mod postgres {
    token_count_queries!(sqlx::Postgres);
}
