//! Server-tokenizer counts (migration 0008): output tokens of stored records counted by the
//! candidate's own tokenize endpoint after its measured load ended. Records are append-only, so
//! counts live beside them in `record_token_counts` (append-only too) and are applied whenever
//! records are read (`attach_counts`). Written once for both backends: `token_count_queries!`
//! expands to the methods of this aggregate's trait and `token_count_helpers!` to the reads of counts that the
//! record queries share, both in `lib.rs` (`impl_store!`), so their paths are written as
//! seen from there.
use std::collections::HashMap;

use super::{Result, StoreError};
use crate::domain::run::{ChunkAttribution, RequestRecord, UncountedRecord};

/// One record's server-tokenizer count: output, reasoning, and per-chunk counts with how they
/// were found (migration 0022; None for counts stored before it).
pub(crate) type StoredCount = (u32, Option<u32>, Option<(Vec<u32>, ChunkAttribution)>);

/// Server-tokenizer counts by record id.
pub(crate) type CountsByRecord = HashMap<i64, StoredCount>;

/// The columns a count is read with (`CountRow`).
macro_rules! count_columns {
    () => {
        "request_record_id, output_tokens, reasoning_tokens, chunk_tokens, chunk_attribution"
    };
}
pub(crate) use count_columns;

/// One stored count, as read back.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CountRow {
    pub request_record_id: i64,
    pub output_tokens: i64,
    pub reasoning_tokens: Option<i64>,
    pub chunk_tokens: Option<String>,
    pub chunk_attribution: Option<String>,
}

/// Counts by record id, checked for range.
pub(crate) fn by_record(rows: Vec<CountRow>) -> Result<CountsByRecord> {
    let range = |id: i64, v: i64| {
        u32::try_from(v)
            .map_err(|_| StoreError::Corrupt(format!("record_token_counts of record {id}: {v} is out of range")))
    };
    rows.into_iter()
        .map(|r| {
            let id = r.request_record_id;
            let output = range(id, r.output_tokens)?;
            let reasoning = r.reasoning_tokens.map(|v| range(id, v)).transpose()?;
            let chunks = match (r.chunk_tokens, r.chunk_attribution) {
                (Some(json), Some(how)) => {
                    let counts: Vec<u32> = serde_json::from_str(&json).map_err(|e| {
                        StoreError::Corrupt(format!("record_token_counts.chunk_tokens of record {id}: {e}"))
                    })?;
                    let how = ChunkAttribution::parse(&how).ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "record_token_counts.chunk_attribution of record {id}: unknown value {how:?}"
                        ))
                    })?;
                    Some((counts, how))
                }
                _ => None,
            };
            Ok((id, (output, reasoning, chunks)))
        })
        .collect()
}

/// Applies the server-tokenizer counts to the records read (rows and records in the same order).
pub(crate) fn attach_counts(rows_ids: &[i64], records: &mut [RequestRecord], counts: &CountsByRecord) {
    if counts.is_empty() {
        return;
    }
    for (id, record) in rows_ids.iter().zip(records.iter_mut()) {
        if let Some((output, reasoning, chunks)) = counts.get(id) {
            record.apply_server_count(
                *output,
                *reasoning,
                chunks.as_ref().map(|(c, how)| (c.as_slice(), *how)),
            );
        }
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct UncountedRow {
    pub id: i64,
    pub output: String,
    pub reasoning: Option<String>,
    pub chunks: String,
    pub chunk_text: Option<String>,
}

impl UncountedRow {
    /// The record to count, with its chunk boundaries (when stored) and stored chunk counts.
    pub(crate) fn into_uncounted(self, output: String, reasoning: Option<String>) -> Result<UncountedRecord> {
        let corrupt = |column: &str, e: serde_json::Error| {
            StoreError::Corrupt(format!(
                "request_records.{column} of record {}: invalid JSON ({e})",
                self.id
            ))
        };
        let chunks: Vec<(i64, u32)> = serde_json::from_str(&self.chunks).map_err(|e| corrupt("chunks", e))?;
        let chunk_text: Vec<(u32, u32)> = match &self.chunk_text {
            Some(json) => serde_json::from_str(json).map_err(|e| corrupt("chunk_text", e))?,
            None => Vec::new(),
        };
        Ok(UncountedRecord {
            record_id: self.id,
            output,
            reasoning,
            chunks: chunks.len(),
            chunk_text,
            chunk_weights: chunks.iter().map(|c| c.1).collect(),
        })
    }
}

/// Counts per multi-row INSERT (8 binds each).
pub(crate) const COUNTS_PER_STATEMENT: usize = 1_000;

macro_rules! token_count_helpers {
    () => {
        /// The counts of these records (an index lookup each).
        async fn counts_for_records(&self, ids: &[i64]) -> Result<token_counts::CountsByRecord> {
            let mut rows: Vec<token_counts::CountRow> = Vec::new();
            for chunk in ids.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(concat!(
                    "SELECT ",
                    token_counts::count_columns!(),
                    " FROM record_token_counts WHERE request_record_id IN ("
                ));
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                qb.push(")");
                rows.extend(
                    qb.build_query_as::<token_counts::CountRow>()
                        .fetch_all(self.pool())
                        .await?,
                );
            }
            token_counts::by_record(rows)
        }
    };
}
pub(crate) use token_count_helpers;

macro_rules! token_count_queries {
    () => {
        fn uncounted_records(&self, run_id: i64, candidate_id: i64) -> StoreFuture<'_, Vec<UncountedRecord>> {
            Box::pin(async move {
                let rows: Vec<token_counts::UncountedRow> = sqlx::query_as(
                    "SELECT r.id, r.output, r.reasoning, r.chunks, r.chunk_text FROM request_records r \
                     WHERE r.run_id = $1 AND r.candidate_id = $2 AND NOT r.is_warmup \
                     AND (r.output_tokens_source IS NULL OR r.output_tokens_source NOT IN ($3, $4)) \
                     AND (r.output <> '' OR COALESCE(r.reasoning, '') <> '') \
                     AND NOT EXISTS (SELECT 1 FROM record_token_counts c WHERE c.request_record_id = r.id) \
                     ORDER BY r.sent_at_us, r.id",
                )
                .bind(run_id)
                .bind(candidate_id)
                .bind(crate::domain::run::TokenSource::Usage.as_str())
                .bind(crate::domain::run::TokenSource::ServerTokenizer.as_str())
                .fetch_all(self.pool())
                .await?;
                rows.into_iter()
                    .map(|mut r| {
                        let output = Self::TEXT.decode(std::mem::take(&mut r.output));
                        let reasoning = Self::TEXT.decode_opt(r.reasoning.take());
                        r.into_uncounted(output, reasoning)
                    })
                    .collect()
            })
        }

        fn save_server_token_counts<'a>(&'a self, run_id: i64, counts: &'a [ServerTokenCount]) -> StoreFuture<'a, u64> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                let mut stored = 0;
                for chunk in counts.chunks(token_counts::COUNTS_PER_STATEMENT) {
                    let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                        "INSERT INTO record_token_counts (request_record_id, run_id, output_tokens, \
                         reasoning_tokens, tokenizer, counted_at, chunk_tokens, chunk_attribution) ",
                    );
                    qb.push_values(chunk, |mut b, c| {
                        b.push_bind(c.record_id)
                            .push_bind(run_id)
                            .push_bind(i64::from(c.output_tokens))
                            .push_bind(c.reasoning_tokens.map(i64::from))
                            .push_bind(c.tokenizer.as_str())
                            .push_bind(now)
                            .push_bind(
                                c.chunks
                                    .as_ref()
                                    .map(|(counts, _)| serde_json::to_string(counts).unwrap_or_default()),
                            )
                            .push_bind(c.chunks.as_ref().map(|(_, how)| how.as_str()));
                    });
                    qb.push(" ON CONFLICT (request_record_id) DO NOTHING");
                    stored += qb
                        .build()
                        .execute(self.pool())
                        .await
                        .map_err(StoreError::from)
                        .map_err(|e| rows::not_found_on_foreign_key(e, || format!("a counted record of run {run_id}")))?
                        .rows_affected();
                }
                Ok(stored)
            })
        }
    };
}
pub(crate) use token_count_queries;
