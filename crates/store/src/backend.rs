//! What a database backend gives the query macros: the whole contract between the queries,
//! written once in the aggregates' files, and the two backends (`sqlite.rs`, `postgres.rs`).
//! The macros reach a backend only through [`SqlBackend`]; everything else they call is a
//! query of their own or of another aggregate.
use std::future::Future;

use sqlx::Transaction;

use crate::domain::sealed::KeySealer;
use crate::text::TextCodec;
use crate::{Backend, HeadCache};

/// The sqlx database of backend `S`, as the macros name it (`sqlx::QueryBuilder::<Db<Self>>`).
pub(crate) type Db<S> = <S as SqlBackend>::Db;

/// What the query macros need from a backend. Each item exists because the two databases
/// differ there, or because the store's shared state lives in the backend's struct.
///
/// The macros expand once per backend, on its concrete type, so the associated types are
/// known where the queries are written and no `Encode + Type` bound is ever spelled out.
pub trait SqlBackend: Send + Sync + 'static {
    /// The sqlx database the queries are built for (`QueryBuilder`, `Transaction`,
    /// `Connection`): the one thing every query is checked against.
    type Db: sqlx::Database;
    /// What plain queries run on (`fetch_all(self.pool())`). A type of its own rather than
    /// `sqlx::Pool<Self::Db>`: PostgreSQL's bounds the wait for each answer (`BoundedPool`).
    type Pool: Sync;

    /// Which backend this is, for [`crate::Store::backend`].
    const KIND: Backend;
    /// How server text is stored: SQLite keeps NUL, PostgreSQL's `text` refuses it and is
    /// escaped (see `text.rs`). Every text column a query writes or reads goes through it.
    const TEXT: TextCodec;
    /// A statement answering the database's clock in ms since the epoch: leases and
    /// heartbeats are compared on one clock, never a worker's (`workers.rs`).
    const NOW_MS: &'static str;

    /// The connection pool the queries outside a transaction run on; also for
    /// backend-specific work outside the store's traits (tests reading pragmas, say).
    fn pool(&self) -> &Self::Pool;
    /// Seals and opens stored API keys (candidates): the server key is the backend's, given
    /// at connect.
    fn sealer(&self) -> &KeySealer;
    /// Eval-set version heads read lately (see [`HeadCache`]): the store's one cache, kept
    /// per open store.
    fn heads(&self) -> &HeadCache;
    /// A transaction that takes no lock before its first statement (SQLite: a deferred
    /// `BEGIN`; PostgreSQL: as [`SqlBackend::begin_write`]), for the writes whose first
    /// statement writes, so they wait for the lock there.
    fn begin(&self) -> impl Future<Output = sqlx::Result<Transaction<'_, Self::Db>>> + Send;
    /// A transaction that writes. SQLite needs `BEGIN IMMEDIATE` (the write lock up front,
    /// so a transaction that reads first never fails half-way with SQLITE_BUSY); PostgreSQL
    /// lifts the page queries' statement timeout for it.
    fn begin_write(&self) -> impl Future<Output = sqlx::Result<Transaction<'_, Self::Db>>> + Send;
    /// The transaction a worker's claim runs in, serialised with every other claim: the caps
    /// are a predicate over all admitted runs, which row locks cannot guard (SQLite: its one
    /// write lock; PostgreSQL: an advisory lock).
    fn begin_coordination(&self) -> impl Future<Output = sqlx::Result<Transaction<'_, Self::Db>>> + Send;
    /// The transaction a change that must keep an active admin runs in, serialised with every
    /// other such change ("another active admin remains" is a predicate over rows the change
    /// does not touch).
    fn begin_accounts(&self) -> impl Future<Output = sqlx::Result<Transaction<'_, Self::Db>>> + Send;
    /// Brings the record tables' planner statistics and page visibility up to date after a
    /// run (PostgreSQL's `VACUUM (ANALYZE)`; nothing on SQLite).
    fn vacuum_record_tables(&self) -> impl Future<Output = sqlx::Result<()>> + Send;
}
