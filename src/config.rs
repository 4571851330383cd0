//! The server's configuration (`bakeoff serve`) and the database flag other commands share:
//! command-line flags, each also readable from a `BAKEOFF_*` environment variable (flags win).
//! The command line as a whole is `cli::Cli`.
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// `sqlite://FILE` (created if missing) or `postgres://USER@HOST:PORT/DB`.
    #[arg(long, env = "BAKEOFF_DATABASE_URL", default_value = "sqlite://bakeoff.db")]
    pub database_url: String,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address the web app listens on.
    #[arg(long, env = "BAKEOFF_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Start the built-in mock in-process and register three demo candidates that point at it.
    #[arg(long, env = "BAKEOFF_DEMO")]
    pub demo: bool,
    /// Where the demo's mock listens (port 0 picks a free one).
    #[arg(long, env = "BAKEOFF_DEMO_MOCK_LISTEN", default_value = "127.0.0.1:0")]
    pub demo_mock_listen: SocketAddr,
    /// The address people open bakeoff at (`scheme://host[:port]`), e.g. `https://bakeoff.example.com`
    /// behind a proxy. Requests naming another Host, and forms posted from another origin, are
    /// refused. Default: `http://` and the listen address (required when listening on 0.0.0.0).
    #[arg(long, env = "BAKEOFF_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// File holding the server's secret key (seals stored API keys, signs CSRF tokens); created
    /// with mode 0600 on first start. Ignored when `BAKEOFF_SECRET_KEY` is set. Default: beside
    /// the SQLite database (`bakeoff.db.key`), else `./bakeoff-secret.key`.
    #[arg(long, env = "BAKEOFF_SECRET_KEY_FILE")]
    pub secret_key_file: Option<PathBuf>,
    /// Environment variables, besides those named `BAKEOFF_KEY_…`, that a candidate's
    /// "API key environment variable" may name (comma-separated), e.g. `OPENAI_API_KEY`.
    /// The server's own variables (`BAKEOFF_SECRET_KEY`, `BAKEOFF_ADMIN_PASSWORD`, `DATABASE_URL`,
    /// any other `BAKEOFF_…` but `BAKEOFF_KEY_…`, `PG…`) are refused, always.
    #[arg(long = "allow-key-env", env = "BAKEOFF_ALLOW_KEY_ENV", value_delimiter = ',')]
    pub allow_key_env: Vec<String>,
    #[command(flatten)]
    pub candidate_origins: CandidateOrigins,
    /// Most runs executing at once; further runs wait, queued, first come first served.
    #[arg(long, env = "BAKEOFF_MAX_RUNS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_runs: u32,
    /// Most runs sending requests to one candidate at once. With 1 a second run on the same
    /// candidate waits, so no figure is distorted; above 1 runs that share a candidate are flagged.
    #[arg(long, env = "BAKEOFF_MAX_RUNS_PER_CANDIDATE", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_runs_per_candidate: u32,
    /// Directory where a run's finished records go while the database does not answer, beyond
    /// those kept in memory (one append-only file per run, replayed when the database is back
    /// or on the next start). Default: beside the SQLite database (`bakeoff.db.spill/`), else
    /// `./bakeoff-spill/`.
    #[arg(long, env = "BAKEOFF_SPILL_DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Finished records kept in memory while the database does not answer; the rest go to the
    /// spill file.
    #[arg(long, env = "BAKEOFF_WRITER_MEMORY_RECORDS", default_value_t = crate::engine::run::writer::MEMORY_RECORDS)]
    pub writer_memory_records: usize,
    /// Seconds the database may stay away during a run before the run is paused (every
    /// finished record kept; resume it from its page or by restarting).
    #[arg(long, env = "BAKEOFF_DB_OUTAGE_PAUSE_SECS", default_value_t = crate::engine::run::writer::PAUSE_AFTER.as_secs())]
    pub db_outage_pause_secs: u64,
    /// Serve pages only: measure nothing here (`bakeoff worker` processes sharing the
    /// database take the runs).
    #[arg(long, env = "BAKEOFF_NO_WORKER")]
    pub no_worker: bool,
    /// The embedded worker's name among the workers (default `HOST:PORT`): unique, and kept
    /// across restarts so a restarted server takes back its own runs at once.
    #[arg(long, env = "BAKEOFF_WORKER_NAME")]
    pub worker_name: Option<String>,
    /// Labels the embedded worker carries (comma-separated, e.g. `gpu-a,eu`): candidates that
    /// need labels are measured only by workers carrying all of them.
    #[arg(long, env = "BAKEOFF_WORKER_LABELS", default_value = "")]
    pub worker_labels: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
}

/// The servers candidates may point at, for deployments that restrict them.
#[derive(Debug, Clone, Default, Args)]
pub struct CandidateOrigins {
    /// Origins (`scheme://host[:port]`, comma-separated) candidates may point at; unset: any.
    /// An editor can make the server send requests (runs, probes, soaks, tokenizer calls) to any
    /// candidate base URL and read the answers; with this list, a candidate naming another
    /// server is refused when saved, and nothing is sent to one stored before.
    #[arg(long = "candidate-origins", env = "BAKEOFF_CANDIDATE_ORIGINS", value_delimiter = ',')]
    pub candidate_origins: Vec<String>,
}

impl CandidateOrigins {
    /// Applies the list to this process (`domain::candidate::restrict_candidate_origins`).
    pub fn apply(&self) -> anyhow::Result<()> {
        crate::domain::candidate::restrict_candidate_origins(&self.candidate_origins).map_err(anyhow::Error::msg)
    }
}

/// How long a worker's lease on a unit lasts.
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    /// Seconds a worker's lease on a unit lasts without a heartbeat (it beats five times per
    /// lease): a worker killed or cut off loses its units to another after this long.
    #[arg(long, env = "BAKEOFF_LEASE_SECS", default_value_t = crate::engine::run::DEFAULT_LEASE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_secs: u64,
}

impl LeaseArgs {
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.lease_secs)
    }
}

/// A worker name as given: printable, no spaces, at most 100 characters.
pub fn check_worker_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "worker name {name:?}: 1 to 100 printable characters without spaces"
        ))
    }
}

impl ServeArgs {
    /// The embedded worker this server runs (it takes any run; with `--no-worker` none).
    pub fn worker(&self) -> anyhow::Result<crate::engine::run::WorkerIdentity> {
        let name = self
            .worker_name
            .clone()
            .unwrap_or_else(|| format!("{}:{}", crate::engine::run::harness::host_name(), self.listen.port()));
        check_worker_name(&name).map_err(anyhow::Error::msg)?;
        let labels = crate::domain::workers::parse_labels(&self.worker_labels)
            .map_err(|e| anyhow::anyhow!("--worker-labels: {e}"))?;
        Ok(crate::engine::run::WorkerIdentity {
            name,
            labels,
            capacity: self.max_runs as usize,
            embedded: true,
            lease: self.lease.lease(),
            claims_any: true,
            measures: !self.no_worker,
        })
    }

    /// Where runs' records writers spill and when they pause a run.
    pub fn writer_settings(&self) -> crate::engine::run::writer::WriterSettings {
        let defaults = crate::engine::run::writer::WriterSettings::for_database(&self.database.database_url);
        crate::engine::run::writer::WriterSettings {
            spill_dir: self.spill_dir.clone().or(defaults.spill_dir),
            memory_records: self.writer_memory_records,
            pause_after: Some(std::time::Duration::from_secs(self.db_outage_pause_secs)),
            ..defaults
        }
    }

    /// The run-admission caps these flags set.
    pub fn caps(&self) -> crate::engine::run::admission::Caps {
        crate::engine::run::admission::Caps {
            max_runs: self.max_runs as usize,
            per_candidate: self.max_runs_per_candidate as usize,
        }
    }
}
