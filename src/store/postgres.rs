//! PostgreSQL backend (teams, workers).
//!
//! The queries are shared with SQLite (see `store`): both accept `$N` placeholders, `ON CONFLICT`
//! and `RETURNING`, so the shared test suite checks one behaviour on both.
//! Objects are unqualified: the schema is whatever `search_path` says, which lets tests isolate
//! themselves with `?options=-c search_path=<schema>` in the URL.
use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use super::Result;
use super::text::TextCodec;
use crate::domain::sealed::KeySealer;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// Room for several runs writing records at once plus the web pages reading.
const MAX_CONNECTIONS: u32 = 20;
/// How long a caller waits for a connection (free, or newly opened) before giving up with an
/// error: short, so a page answers 503 within a second while the database is away instead of
/// hanging (the record writer just tries again).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(900);

pub struct PostgresStore {
    pool: PgPool,
    sealer: KeySealer,
    /// Eval-set version heads read lately (see `store::HeadCache`).
    heads: super::HeadCache,
}

impl PostgresStore {
    /// PostgreSQL `text` refuses NUL: server text is escaped (see `store::text`).
    pub(super) const TEXT: TextCodec = TextCodec::Escaped;

    /// Opens `postgres://USER@HOST:PORT/DB` (URL parameters such as `options` are honoured) and
    /// applies migrations.
    pub async fn connect(url: &str, sealer: KeySealer) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)?.application_name("bakeoff");
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        MIGRATOR.run(&pool).await?;
        tracing::debug!("postgres store ready");
        Ok(PostgresStore {
            pool,
            sealer,
            heads: super::HeadCache::default(),
        })
    }

    /// Eval-set version heads read lately.
    pub(super) fn heads(&self) -> &super::HeadCache {
        &self.heads
    }

    /// Seals and opens stored API keys.
    pub(super) fn sealer(&self) -> &KeySealer {
        &self.sealer
    }

    /// The connection pool, for backend-specific work outside the `Store` trait.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Opens a write transaction: a plain `BEGIN` (SQLite's needs `BEGIN IMMEDIATE`).
    pub(super) async fn begin_write(&self) -> sqlx::Result<Transaction<'_, Postgres>> {
        self.pool.begin().await
    }
}
