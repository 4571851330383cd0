//! PostgreSQL backend (teams, workers).
//!
//! The queries are shared with SQLite (see `store`): both accept `$N` placeholders, `ON CONFLICT`
//! and `RETURNING`, so the shared test suite checks one behaviour on both.
//! Objects are unqualified: the schema is whatever `search_path` says, which lets tests isolate
//! themselves with `?options=-c search_path=<schema>` in the URL.
use std::str::FromStr;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Connection, Either, Execute, Executor, Postgres, SqlStr, Transaction};

use super::text::TextCodec;
use super::{Result, SqlBackend};
use crate::domain::sealed::KeySealer;

/// The advisory lock key every worker claim takes ("bakeoff" in ASCII).
const COORDINATION_LOCK: i64 = 0x62_616b_656f_6666;
/// The advisory lock changes of admins take (`begin_accounts`): "bakeoffA" in ASCII.
const ACCOUNTS_LOCK: i64 = 0x62_616b_656f_6641;

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/postgres");

/// Room for several runs writing records at once plus the web pages reading.
const MAX_CONNECTIONS: u32 = 20;
/// How long a caller waits for a connection (free, or newly opened) before giving up with an
/// error: short, so a page answers 503 within a second while the database is away instead of
/// hanging (the record writer just tries again).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(900);
/// Longest wait for the database's next answer to a query outside a write transaction (a
/// page's reads): a connection whose packets are silently dropped (no reset) would otherwise
/// hang the page until the network heals. The wait is for each answer (each row of a long
/// listing), not for the whole result.
const ANSWER_WAIT: Duration = Duration::from_secs(3);
/// Server-side bound of a statement outside a write transaction: a runaway page query stops
/// on the server too once the page has given up on it.
const STATEMENT_TIMEOUT: &str = "15s";
/// Server-side bound of a statement inside a write transaction (the engine's record batches,
/// imports, large eval sets): generous, so no long write is cut, yet not endless.
const WRITE_STATEMENT_TIMEOUT: &str = "10min";

pub struct PostgresStore {
    pool: BoundedPool,
    sealer: KeySealer,
    /// Eval-set version heads read lately (see `store::HeadCache`).
    heads: super::HeadCache,
}

impl PostgresStore {
    /// Opens `postgres://USER@HOST:PORT/DB` (URL parameters such as `options` are honoured) and
    /// applies migrations.
    pub async fn connect(url: &str, sealer: KeySealer) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)?.application_name("bakeoff");
        // Migrations on a connection of their own, without the statement timeout (a backfill
        // may take longer than any page query may).
        let mut migrating = sqlx::PgConnection::connect_with(&options).await?;
        MIGRATOR.run(&mut migrating).await?;
        migrating.close().await?;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.options([("statement_timeout", STATEMENT_TIMEOUT)]))
            .await?;
        tracing::debug!("postgres store ready");
        Ok(PostgresStore {
            pool: BoundedPool {
                pool,
                wait: ANSWER_WAIT,
            },
            sealer,
            heads: super::HeadCache::default(),
        })
    }

    /// A write transaction holding the transaction-scoped advisory lock `key`.
    async fn locked(&self, key: i64) -> sqlx::Result<Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(key)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }
}

impl SqlBackend for PostgresStore {
    type Db = Postgres;
    type Pool = BoundedPool;

    const KIND: super::Backend = super::Backend::Postgres;
    /// PostgreSQL `text` refuses NUL: server text is escaped (see `store::text`).
    const TEXT: TextCodec = TextCodec::Escaped;
    const NOW_MS: &'static str = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

    /// Each answer bounded by [`ANSWER_WAIT`].
    fn pool(&self) -> &BoundedPool {
        &self.pool
    }

    fn sealer(&self) -> &KeySealer {
        &self.sealer
    }

    fn heads(&self) -> &super::HeadCache {
        &self.heads
    }

    async fn begin(&self) -> sqlx::Result<Transaction<'_, Postgres>> {
        self.pool.begin().await
    }

    /// A plain `BEGIN` (SQLite's needs `BEGIN IMMEDIATE`), with the write statement timeout.
    async fn begin_write(&self) -> sqlx::Result<Transaction<'_, Postgres>> {
        self.pool.begin().await
    }

    /// Serialised with every other claim by a transaction-scoped advisory lock (released at
    /// commit or rollback).
    async fn begin_coordination(&self) -> sqlx::Result<Transaction<'_, Postgres>> {
        self.locked(COORDINATION_LOCK).await
    }

    /// Serialised with every other such change by its own advisory lock.
    async fn begin_accounts(&self) -> sqlx::Result<Transaction<'_, Postgres>> {
        self.locked(ACCOUNTS_LOCK).await
    }

    /// Refreshes the planner's statistics of the record tables and marks their pages
    /// all-visible (`VACUUM (ANALYZE)`). Autovacuum analyzes a growing table only every tenth or
    /// so of its growth, so at a run's end the statistics end before its latest send times:
    /// PostgreSQL then estimates a handful of rows after a send time that has hundreds of
    /// thousands, and reads a page of them by sorting all of them (400 ms a page at a million
    /// records, where the index answers in 2 ms). And an index-only scan of the outline indexes
    /// (migration 0025) still visits every row whose page is not marked all-visible. Records
    /// are append-only, so the vacuum reads the pages written since the last one. The run case
    /// tables (migration 0026) are read by index too, and written at a run's end.
    async fn vacuum_record_tables(&self) -> sqlx::Result<()> {
        // VACUUM runs outside a transaction, so the write timeout is set on the session.
        let mut conn = self.pool.unbounded().acquire().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET statement_timeout = '{WRITE_STATEMENT_TIMEOUT}'"
        )))
        .execute(&mut *conn)
        .await?;
        let vacuumed = sqlx::query("VACUUM (ANALYZE) request_records, grades, run_cases, run_case_marks")
            .execute(&mut *conn)
            .await;
        sqlx::query("RESET statement_timeout").execute(&mut *conn).await?;
        vacuumed.map(|_| ())
    }
}

/// The pool with a bound on each answer of a query sent through it (see [`ANSWER_WAIT`]);
/// transactions opened from it ([`BoundedPool::begin`]) are writes, left to the server's
/// longer [`WRITE_STATEMENT_TIMEOUT`]. A query that waits too long fails with a timed-out I/O
/// error, which the store reads as "the database is not answering" (pages answer 503).
#[derive(Debug, Clone)]
pub struct BoundedPool {
    pool: PgPool,
    wait: Duration,
}

impl BoundedPool {
    /// A write transaction (no bound on its answers; its statements may run for
    /// [`WRITE_STATEMENT_TIMEOUT`]).
    pub async fn begin(&self) -> sqlx::Result<Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET LOCAL statement_timeout = '{WRITE_STATEMENT_TIMEOUT}'"
        )))
        .execute(&mut *tx)
        .await?;
        Ok(tx)
    }

    /// The pool itself, without the bound.
    pub fn unbounded(&self) -> &PgPool {
        &self.pool
    }

    fn timed_out(wait: Duration) -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer from the database within {} s", wait.as_secs_f64()),
        ))
    }
}

impl<'p> Executor<'p> for &'p BoundedPool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, sqlx::Result<Either<PgQueryResult, PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let wait = self.wait;
        // Each answer within the wait; after a timeout the stream ends.
        futures_util::stream::unfold(Some(self.pool.fetch_many(query)), move |answers| async move {
            let mut answers = answers?;
            match tokio::time::timeout(wait, answers.next()).await {
                Ok(Some(answer)) => Some((answer, Some(answers))),
                Ok(None) => None,
                Err(_) => Some((Err(BoundedPool::timed_out(wait)), None)),
            }
        })
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, sqlx::Result<Option<PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let wait = self.wait;
        tokio::time::timeout(wait, self.pool.fetch_optional(query))
            .map(move |answer| answer.unwrap_or_else(|_| Err(BoundedPool::timed_out(wait))))
            .boxed()
    }

    fn prepare_with<'e>(self, sql: SqlStr, parameters: &'e [PgTypeInfo]) -> BoxFuture<'e, sqlx::Result<PgStatement>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, sqlx::Result<sqlx::Describe<Postgres>>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}
