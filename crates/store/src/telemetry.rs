//! Telemetry scrapes of a run (`telemetry_scrapes`, migration 0032), written once for both
//! backends: `telemetry_queries!` expands to the methods of `TelemetryStore` in `lib.rs`
//! (`impl_store!`), so its paths are written as seen from there. Append-only, like the records
//! the scrapes are read beside.
use super::text::TextCodec;
use super::{Result, StoreError};
use crate::domain::telemetry::{Boundary, Scrape, Source};

/// At most this many scrapes are read back for one candidate of a run (a 1 s interval for 5 h):
/// figures over longer runs use the first ones, and say so by their count.
pub const MAX_SCRAPES_READ: i64 = 20_000;

/// One row of `telemetry_scrapes`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScrapeRow {
    id: i64,
    source: String,
    at_us: i64,
    took_us: i64,
    level: Option<i64>,
    boundary: Option<String>,
    error: Option<String>,
    samples: String,
}

impl ScrapeRow {
    pub(crate) fn into_scrape(self, text: TextCodec) -> Result<Scrape> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("telemetry_scrapes {} {what}", self.id));
        let source = Source::parse(&self.source).ok_or_else(|| corrupt("source"))?;
        let boundary = match &self.boundary {
            Some(b) => Some(Boundary::parse(b).ok_or_else(|| corrupt("boundary"))?),
            None => None,
        };
        let samples = Scrape::samples_from_text(&text.decode(self.samples.clone()))
            .map_err(|e| corrupt(&format!("samples: {e}")))?;
        Ok(Scrape {
            source,
            at_us: self.at_us,
            took_us: self.took_us,
            level: self.level.and_then(|l| u32::try_from(l).ok()),
            boundary,
            error: self.error.map(|e| text.decode(e)),
            samples,
        })
    }
}

/// Telemetry writes shared by the scraper's appends and an import (inside its transaction).
macro_rules! telemetry_helpers {
    () => {
        /// Inserts one candidate's scrapes of a run in `tx`; returns how many.
        async fn insert_telemetry_scrapes_in(
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            run_id: i64,
            candidate_id: i64,
            scrapes: &[Scrape],
        ) -> Result<u64> {
            let mut n = 0;
            for s in scrapes {
                n += sqlx::query(
                    "INSERT INTO telemetry_scrapes (run_id, candidate_id, source, at_us, took_us, level, \
                     boundary, error, samples) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(run_id)
                .bind(candidate_id)
                .bind(s.source.as_str())
                .bind(s.at_us)
                .bind(s.took_us)
                .bind(s.level.map(i64::from))
                .bind(s.boundary.map(|b| b.as_str()))
                .bind(s.error.as_deref().map(|e| Self::TEXT.encode(e)))
                .bind(Self::TEXT.encode(&s.samples_text()))
                .execute(&mut **tx)
                .await
                .map_err(|e| {
                    rows::not_found_on_foreign_key(e.into(), || format!("candidate {candidate_id} of run {run_id}"))
                })?
                .rows_affected();
            }
            Ok(n)
        }
    };
}
pub(crate) use telemetry_helpers;

macro_rules! telemetry_queries {
    () => {
        fn append_telemetry_scrapes<'a>(
            &'a self,
            run_id: i64,
            candidate_id: i64,
            scrapes: &'a [Scrape],
        ) -> StoreFuture<'a, u64> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                let n = Self::insert_telemetry_scrapes_in(&mut tx, run_id, candidate_id, scrapes).await?;
                tx.commit().await?;
                Ok(n)
            })
        }

        fn list_telemetry_scrapes(&self, run_id: i64, candidate_id: i64) -> StoreFuture<'_, Vec<Scrape>> {
            Box::pin(async move {
                let rows: Vec<telemetry::ScrapeRow> = sqlx::query_as(
                    "SELECT id, source, at_us, took_us, level, boundary, error, samples FROM telemetry_scrapes \
                     WHERE run_id = $1 AND candidate_id = $2 ORDER BY at_us, id LIMIT $3",
                )
                .bind(run_id)
                .bind(candidate_id)
                .bind(telemetry::MAX_SCRAPES_READ)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_scrape(Self::TEXT)).collect()
            })
        }
    };
}
pub(crate) use telemetry_queries;
