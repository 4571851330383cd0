//! Test databases on both backends, each isolated and removed when its guard drops.
//!
//! - SQLite: a fresh file in a temporary directory.
//! - PostgreSQL: a fresh schema in the server named by `BAKEOFF_TEST_POSTGRES_URL`
//!   (e.g. `postgres://postgres@127.0.0.1:5432/test`), selected with `search_path` in the URL.
//!   build.rs sets the cfg `bakeoff_test_postgres` when the variable is set at build time;
//!   without it the PostgreSQL tests are ignored, and the test runner's summary counts them.
//!
//! Write a test body once as `async fn name(store: TestStore)` and let `each_backend!(name)` make
//! one test per backend of it (`name::sqlite`, `name::postgres`); `each_backend_pair!` does the
//! same for a body taking a source and a target store.
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

use bakeoff::store::{self, DynStore};
use sqlx::Connection;

/// The environment variable naming the PostgreSQL server used by tests.
pub const POSTGRES_URL_VAR: &str = "BAKEOFF_TEST_POSTGRES_URL";

/// Keeps a SQLite test database's directory; dropping it deletes the file.
pub struct TempDirGuard(#[allow(dead_code)] tempfile::TempDir);

/// Keeps a PostgreSQL test schema; dropping it runs `DROP SCHEMA … CASCADE`.
pub struct SchemaGuard {
    admin_url: String,
    schema: String,
}

impl SchemaGuard {
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime, which cannot be blocked on; a short-lived thread
        // with its own runtime does the async cleanup.
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        let outcome = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let mut conn = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query("SET lock_timeout = '10s'").execute(&mut conn).await?;
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await?;
                conn.close().await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .join();
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop test schema {}: {e}", self.schema),
            Err(_) => eprintln!("could not drop test schema {}: cleanup thread panicked", self.schema),
        }
    }
}

/// A fresh SQLite database URL (`sqlite://…/bakeoff.db`; the file does not exist yet).
pub fn sqlite_url() -> (String, TempDirGuard) {
    let dir = tempfile::tempdir().expect("creating a temporary directory for the test database");
    let url = format!("sqlite://{}", dir.path().join("bakeoff.db").display());
    (url, TempDirGuard(dir))
}

/// A migrated SQLite store in a fresh temporary file.
pub async fn sqlite_store() -> (DynStore, TempDirGuard) {
    let (url, guard) = sqlite_url();
    let store = store::connect(&url).await.expect("opening the SQLite test store");
    (store, guard)
}

/// The PostgreSQL server URL from the environment; panics with what to set when it is unset
/// (a PostgreSQL test runs without the variable only when asked to run ignored tests).
pub fn postgres_server_url() -> String {
    match std::env::var(POSTGRES_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            panic!("this test needs PostgreSQL: set {POSTGRES_URL_VAR} (e.g. postgres://postgres@127.0.0.1:5432/test)")
        }
    }
}

/// A URL for a fresh, empty schema on the test PostgreSQL server (nothing migrated yet).
pub async fn postgres_url() -> (String, SchemaGuard) {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let admin_url = postgres_server_url();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let schema = format!(
        "bakeoff_test_{}_{}_{}",
        std::process::id(),
        nanos,
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut conn = sqlx::PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {POSTGRES_URL_VAR}: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&mut conn)
        .await
        .expect("creating the test schema");
    conn.close().await.ok();
    let separator = if admin_url.contains('?') { '&' } else { '?' };
    let url = format!("{admin_url}{separator}options=-c%20search_path%3D{schema}");
    (url, SchemaGuard { admin_url, schema })
}

/// One backend's test store. Fields drop in order: the store's pool closes before the guard
/// removes the database.
pub struct TestStore {
    /// "sqlite" or "postgres", for assertion messages.
    pub backend: &'static str,
    pub store: DynStore,
    /// The URL the store was opened with (connect again to test re-migration or raw SQL).
    pub url: String,
    _guard: Box<dyn Any + Send>,
}

impl TestStore {
    /// Runs raw SQL on a separate connection to the same database (to poke below the trait).
    pub async fn execute_raw(&self, sql: &str) -> Result<u64, sqlx::Error> {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        if self.backend == "sqlite" {
            let mut conn = sqlx::SqliteConnection::connect(&self.url).await?;
            Ok(sqlx::query(sql).execute(&mut conn).await?.rows_affected())
        } else {
            let mut conn = sqlx::PgConnection::connect(&self.url).await?;
            Ok(sqlx::query(sql).execute(&mut conn).await?.rows_affected())
        }
    }

    /// One integer from raw SQL on a separate connection (e.g. a COUNT).
    pub async fn fetch_i64(&self, sql: &str) -> Result<i64, sqlx::Error> {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        if self.backend == "sqlite" {
            let mut conn = sqlx::SqliteConnection::connect(&self.url).await?;
            sqlx::query_scalar(sql).fetch_one(&mut conn).await
        } else {
            let mut conn = sqlx::PgConnection::connect(&self.url).await?;
            sqlx::query_scalar(sql).fetch_one(&mut conn).await
        }
    }

    /// The first column of every row of raw SQL, as text.
    pub async fn fetch_texts(&self, sql: &str) -> Result<Vec<String>, sqlx::Error> {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        if self.backend == "sqlite" {
            let mut conn = sqlx::SqliteConnection::connect(&self.url).await?;
            sqlx::query_scalar(sql).fetch_all(&mut conn).await
        } else {
            let mut conn = sqlx::PgConnection::connect(&self.url).await?;
            sqlx::query_scalar(sql).fetch_all(&mut conn).await
        }
    }

    /// How the database would answer raw SQL, one line per step: SQLite's `EXPLAIN QUERY PLAN`
    /// details; PostgreSQL's `EXPLAIN` with sequential and bitmap scans off, so a table of a
    /// few rows shows which index can answer the query, as it would at a million.
    pub async fn plan_of(&self, sql: &str) -> Result<String, sqlx::Error> {
        let lines: Vec<String> = if self.backend == "sqlite" {
            let mut conn = sqlx::SqliteConnection::connect(&self.url).await?;
            let steps: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .fetch_all(&mut conn)
                    .await?;
            steps.into_iter().map(|step| step.3).collect()
        } else {
            let mut conn = sqlx::PgConnection::connect(&self.url).await?;
            sqlx::query("SET enable_seqscan = off").execute(&mut conn).await?;
            sqlx::query("SET enable_bitmapscan = off").execute(&mut conn).await?;
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
                .fetch_all(&mut conn)
                .await?
        };
        Ok(lines.join("\n"))
    }
}

/// The server key of every test store (so tests that reopen a database open its sealed API keys, and no key file is left in the working
/// directory by PostgreSQL stores).
pub const TEST_SERVER_KEY: [u8; 32] = [0x5e; 32];

/// Opens (and migrates) the database at `url` with [`TEST_SERVER_KEY`], as every test store is.
pub async fn open(url: &str) -> DynStore {
    store::connect_with_key(url, &store::server_key::ServerKey::from_bytes(TEST_SERVER_KEY))
        .await
        .unwrap_or_else(|e| panic!("opening the test store: {e}"))
}

/// A fresh, migrated SQLite store in a temporary file.
pub async fn sqlite_test_store() -> TestStore {
    let (url, guard) = sqlite_url();
    let store = open(&url).await;
    TestStore {
        backend: "sqlite",
        store,
        url,
        _guard: Box::new(guard),
    }
}

/// A fresh, migrated PostgreSQL store in its own schema of `BAKEOFF_TEST_POSTGRES_URL`.
pub async fn postgres_test_store() -> TestStore {
    let (url, guard) = postgres_url().await;
    let store = open(&url).await;
    TestStore {
        backend: "postgres",
        store,
        url,
        _guard: Box::new(guard),
    }
}

/// A fresh, migrated PostgreSQL store reached through `host_port` (e.g. a fault proxy to the
/// test server) instead of the server's own address.
pub async fn postgres_test_store_through(host_port: &str) -> TestStore {
    let (url, guard) = postgres_url().await;
    let server = url::Url::parse(&url).expect("the PostgreSQL test URL parses");
    let own = format!(
        "{}:{}",
        server.host_str().unwrap_or("127.0.0.1"),
        server.port().unwrap_or(5432)
    );
    let url = url.replacen(&own, host_port, 1);
    let store = open(&url).await;
    TestStore {
        backend: "postgres",
        store,
        url,
        _guard: Box::new(guard),
    }
}

/// One test per backend from one body, `async fn $test(store: TestStore)`: `$test::sqlite` and
/// `$test::postgres`, the latter ignored with the reason when build.rs found no PostgreSQL.
/// Arguments after the name go to `#[tokio::test(…)]`.
macro_rules! each_backend {
    ($test:ident $(, $($tokio:tt)+)?) => {
        mod $test {
            #[tokio::test$(($($tokio)+))?]
            async fn sqlite() {
                super::$test($crate::support::db::sqlite_test_store().await).await;
            }

            #[tokio::test$(($($tokio)+))?]
            #[cfg_attr(not(bakeoff_test_postgres), ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…")]
            async fn postgres() {
                super::$test($crate::support::db::postgres_test_store().await).await;
            }
        }
    };
}
pub(crate) use each_backend;

/// One test per (source, target) pair of backends from one body,
/// `async fn $test(from: TestStore, to: TestStore)`: `$test::sqlite_to_sqlite`,
/// `$test::sqlite_to_postgres`, `$test::postgres_to_sqlite` and `$test::postgres_to_postgres`,
/// those with PostgreSQL ignored with the reason when build.rs found no PostgreSQL.
/// Arguments after the name go to `#[tokio::test(…)]`.
macro_rules! each_backend_pair {
    ($test:ident $(, $($tokio:tt)+)?) => {
        mod $test {
            use $crate::support::db::{postgres_test_store, sqlite_test_store};

            #[tokio::test$(($($tokio)+))?]
            async fn sqlite_to_sqlite() {
                super::$test(sqlite_test_store().await, sqlite_test_store().await).await;
            }

            #[tokio::test$(($($tokio)+))?]
            #[cfg_attr(not(bakeoff_test_postgres), ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…")]
            async fn sqlite_to_postgres() {
                super::$test(sqlite_test_store().await, postgres_test_store().await).await;
            }

            #[tokio::test$(($($tokio)+))?]
            #[cfg_attr(not(bakeoff_test_postgres), ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…")]
            async fn postgres_to_sqlite() {
                super::$test(postgres_test_store().await, sqlite_test_store().await).await;
            }

            #[tokio::test$(($($tokio)+))?]
            #[cfg_attr(not(bakeoff_test_postgres), ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…")]
            async fn postgres_to_postgres() {
                super::$test(postgres_test_store().await, postgres_test_store().await).await;
            }
        }
    };
}
pub(crate) use each_backend_pair;
