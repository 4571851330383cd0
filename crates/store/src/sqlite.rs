//! SQLite backend (default): one file, WAL, foreign keys on, busy timeout.
//!
//! Write transactions start with `BEGIN IMMEDIATE` (`begin_write`, its part of [`SqlBackend`]): it takes the
//! write lock up front (waiting up to the busy timeout), so a transaction that reads before
//! writing can never fail with SQLITE_BUSY half-way when another connection writes meanwhile.
//! The queries themselves are shared with PostgreSQL (see `store`).
use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, Transaction};

use super::text::TextCodec;
use super::{Result, SqlBackend};
use crate::domain::sealed::KeySealer;

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/sqlite");

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// WAL lets readers run beside the one writer; a handful of connections covers the web
/// pages plus a few runs writing records.
const MAX_CONNECTIONS: u32 = 8;

/// Creates the database file readable and writable by its owner only (mode 0600, as the key
/// file), before SQLite opens it: it holds password, session and token hashes and sealed keys.
/// SQLite creates its `-wal` and `-shm` files with the database file's mode. A database (and
/// its `-wal`/`-shm`) that others may read is made owner-only, and the log says so.
fn owner_only(path: &std::path::Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        match created {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            // A directory that does not exist yet, say: SQLite's own error says it better.
            Err(_) => return Ok(()),
        }
        let mut files = vec![path.to_path_buf()];
        for suffix in ["-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            files.push(name.into());
        }
        for file in files {
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0 {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode & 0o700))
                    .map_err(|e| super::StoreError::Database(sqlx::Error::Io(e)))?;
                tracing::warn!(
                    file = %file.display(),
                    was = format!("{:o}", mode & 0o777),
                    "the database file could be read by other users; it is now owner-only (0600)"
                );
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// A new in-memory database gets the schema every migration leads to, written out once
/// (`migrations/sqlite-fresh.sql`: each table, index and trigger as SQLite keeps it after the
/// last migration, and the rows the migrations insert), in one batch. Replaying the 37
/// migrations instead made SQLite re-parse the whole schema after each of their `ALTER TABLE`s:
/// ~35 ms of CPU, most of a one-request `measure`'s start-up. Nothing exists yet to check against
/// and the database dies with the process, so no record of applied versions is kept. A test
/// keeps the file equal to what the migrations build (`BAKEOFF_WRITE_SCHEMAS=1` rewrites it).
async fn migrate_fresh_in_memory(pool: &SqlitePool) -> Result<()> {
    sqlx::raw_sql(FRESH_SCHEMA).execute(pool).await?;
    Ok(())
}

/// What the migrations build, as one script (see `migrate_fresh_in_memory`).
const FRESH_SCHEMA: &str = include_str!("../../../migrations/sqlite-fresh.sql");

pub struct SqliteStore {
    pool: SqlitePool,
    sealer: KeySealer,
    /// Eval-set version heads read lately (see `store::HeadCache`).
    heads: super::HeadCache,
}

impl SqliteStore {
    /// Opens `sqlite://FILE` (created if missing) or `sqlite::memory:` and applies migrations.
    pub async fn connect(url: &str, sealer: KeySealer) -> Result<Self> {
        let in_memory = super::is_in_memory(url);
        let mut options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .synchronous(SqliteSynchronous::Normal);
        let pool_options = if in_memory {
            // One connection keeps the in-memory database alive and avoids shared-cache table
            // locks, which the busy timeout does not cover.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            options = options.journal_mode(SqliteJournalMode::Wal);
            owner_only(options.get_filename())?;
            SqlitePoolOptions::new().max_connections(MAX_CONNECTIONS)
        };
        let pool = pool_options.connect_with(options).await?;
        if in_memory {
            migrate_fresh_in_memory(&pool).await?;
        } else {
            MIGRATOR.run(&pool).await?;
        }
        tracing::debug!(in_memory, "sqlite store ready");
        Ok(SqliteStore {
            pool,
            sealer,
            heads: super::HeadCache::default(),
        })
    }
}

impl SqlBackend for SqliteStore {
    type Db = Sqlite;
    type Pool = SqlitePool;

    const KIND: super::Backend = super::Backend::Sqlite;
    /// SQLite TEXT holds NUL: text is stored as it is (see `store::text`).
    const TEXT: TextCodec = TextCodec::Verbatim;
    const NOW_MS: &'static str = "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn sealer(&self) -> &KeySealer {
        &self.sealer
    }

    fn heads(&self) -> &super::HeadCache {
        &self.heads
    }

    async fn begin(&self) -> sqlx::Result<Transaction<'_, Sqlite>> {
        self.pool.begin().await
    }

    /// `BEGIN IMMEDIATE` (see the module comment).
    async fn begin_write(&self) -> sqlx::Result<Transaction<'_, Sqlite>> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }

    /// `BEGIN IMMEDIATE` takes SQLite's one write lock, so claims never interleave.
    async fn begin_coordination(&self) -> sqlx::Result<Transaction<'_, Sqlite>> {
        self.begin_write().await
    }

    /// `BEGIN IMMEDIATE` serialises it with every other write.
    async fn begin_accounts(&self) -> sqlx::Result<Transaction<'_, Sqlite>> {
        self.begin_write().await
    }

    /// Nothing to refresh: this store keeps no planner statistics (no `ANALYZE` is run), SQLite's
    /// own rules pick the send-order and per-case indexes at any size, and its index-only reads
    /// need no visibility map.
    async fn vacuum_record_tables(&self) -> sqlx::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table, index and trigger as SQLite keeps it, the migrator's own table left out.
    async fn schema(store: &SqliteStore) -> Vec<(String, String, Option<String>)> {
        sqlx::query_as(
            "SELECT type, name, sql FROM sqlite_master WHERE tbl_name <> '_sqlx_migrations' ORDER BY type, name",
        )
        .fetch_all(&store.pool)
        .await
        .unwrap()
    }

    /// The database as one script that builds it again: tables, then indexes, triggers and
    /// views (each in the order it was made, as SQLite keeps its text), then every row of every
    /// table, in text order. SQLite's own objects and the migrator's table are left out.
    async fn script(store: &SqliteStore) -> String {
        let objects: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' \
             AND tbl_name <> '_sqlx_migrations' \
             ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'trigger' THEN 2 ELSE 3 END, rowid",
        )
        .fetch_all(&store.pool)
        .await
        .unwrap();
        let mut out = String::from(
            "-- GENERATED: the schema and rows every migration in migrations/sqlite/ leads to, for a new\n\
             -- in-memory database (crates/store/src/sqlite.rs, `migrate_fresh_in_memory`). Do not edit:\n\
             -- `BAKEOFF_WRITE_SCHEMAS=1 cargo test -p bakeoff-store in_memory` writes it again.\n",
        );
        for (_, _, sql) in &objects {
            out.push_str(sql);
            out.push_str(";\n");
        }
        for (kind, table, _) in &objects {
            if kind != "table" {
                continue;
            }
            let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info(?) ORDER BY cid")
                .bind(table)
                .fetch_all(&store.pool)
                .await
                .unwrap();
            let quoted: Vec<String> = columns.iter().map(|c| format!("quote(\"{c}\")")).collect();
            let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT 'INSERT INTO \"{table}\" VALUES(' || {} || ');' FROM \"{table}\" ORDER BY 1",
                quoted.join(" || ',' || ")
            )))
            .fetch_all(&store.pool)
            .await
            .unwrap();
            for row in rows {
                out.push_str(&row);
                out.push('\n');
            }
        }
        out
    }

    #[tokio::test]
    async fn an_in_memory_database_gets_the_same_schema_and_rows_as_a_migrated_file() {
        let dir = tempfile::tempdir().unwrap();
        let file_url = format!("sqlite://{}", dir.path().join("migrated.db").display());
        let sealer = || KeySealer::new(&[7; 32]);
        let file = SqliteStore::connect(&file_url, sealer()).await.unwrap();
        let migrated = script(&file).await;
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/sqlite-fresh.sql");
        if std::env::var_os("BAKEOFF_WRITE_SCHEMAS").is_some() {
            std::fs::write(path, &migrated).unwrap();
            return;
        }
        assert!(
            FRESH_SCHEMA == migrated,
            "migrations/sqlite-fresh.sql is not what the migrations build: run BAKEOFF_WRITE_SCHEMAS=1 cargo test -p bakeoff-store in_memory"
        );
        let memory = SqliteStore::connect("sqlite::memory:", sealer()).await.unwrap();
        let (from_file, in_memory) = (schema(&file).await, schema(&memory).await);
        assert!(from_file.len() > 30, "{from_file:?}");
        assert_eq!(from_file, in_memory);
        assert_eq!(script(&memory).await, migrated, "the same rows too");
        let on: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&memory.pool)
            .await
            .unwrap();
        assert_eq!(on, 1);
    }
}
