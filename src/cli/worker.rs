//! `bakeoff worker`: a measurement worker with no web pages. It shares the team's database
//! with the web nodes (`serve`, maybe `--no-worker`) and other workers, takes the units of
//! queued runs under leases (`engine::run::Runner`), and measures them from where it runs —
//! next to a candidate in another network, or as one more client machine.
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::config::{DatabaseArgs, LeaseArgs, check_worker_name};
use crate::engine::run::writer::WriterSettings;
use crate::engine::run::{Runner, WorkerIdentity};

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// This worker's name among the workers (default: the host's name): unique, and kept
    /// across restarts so a restarted worker takes back its own units at once.
    #[arg(long, env = "BAKEOFF_WORKER_NAME")]
    pub name: Option<String>,
    /// Labels this worker carries (comma-separated, e.g. `gpu-a,eu`): candidates that need
    /// labels are measured only by workers carrying all of them.
    #[arg(long, env = "BAKEOFF_WORKER_LABELS", default_value = "")]
    pub labels: String,
    /// Units (one candidate's measured phase each) this worker measures at once, at most.
    #[arg(long, env = "BAKEOFF_WORKER_CAPACITY", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub capacity: u32,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Directory where a run's finished records go while the database does not answer.
    /// Default: beside an SQLite database, else `./bakeoff-spill/`.
    #[arg(long, env = "BAKEOFF_SPILL_DIR")]
    pub spill_dir: Option<PathBuf>,
    #[command(flatten)]
    pub candidate_origins: crate::config::CandidateOrigins,
    /// Serve this worker's own Prometheus series (docs/telemetry.md) at `http://ADDR/metrics`,
    /// e.g. `127.0.0.1:9464`. Unauthenticated (counts and durations only, no names): bind it
    /// where only your Prometheus reaches. Default: not served.
    #[arg(long, env = "BAKEOFF_WORKER_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let name = args.name.clone().unwrap_or_else(crate::engine::run::harness::host_name);
    check_worker_name(&name).map_err(anyhow::Error::msg)?;
    args.candidate_origins.apply()?;
    let labels = crate::domain::workers::parse_labels(&args.labels).map_err(|e| anyhow::anyhow!("--labels: {e}"))?;
    let url = &args.database.database_url;
    let store = crate::store::connect(url)
        .await
        .with_context(|| format!("opening database {}", crate::domain::redact::url(url)))?;
    let defaults = WriterSettings::for_database(url);
    let writer = WriterSettings {
        spill_dir: args.spill_dir.clone().or(defaults.spill_dir),
        ..defaults
    };
    let identity = WorkerIdentity {
        name,
        labels,
        capacity: args.capacity as usize,
        embedded: false,
        lease: args.lease.lease(),
        claims_any: true,
        measures: true,
    };
    tracing::info!(
        worker = %identity.name,
        labels = %crate::domain::workers::labels_text(&identity.labels),
        capacity = identity.capacity,
        lease_s = identity.lease.as_secs(),
        "bakeoff {} worker taking units from {}",
        crate::VERSION,
        crate::domain::redact::url(url)
    );
    let runner = Runner::new(store.clone()).with_writer(writer).with_identity(identity);
    // A run this worker closes gets its page summaries stored here, as `serve` does, so no page
    // of a big run computes them from every record.
    crate::app::pages::summaries::install(&crate::app::state::App::new(store, runner.clone()));
    runner.start_worker();
    if let Some(addr) = args.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--metrics-listen {addr}"))?;
        tracing::info!(%addr, "serving this worker's own metrics at /metrics");
        let runner = runner.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::web::own_metrics::serve_worker_metrics(listener, runner).await {
                tracing::warn!(error = %e, "the worker's metrics listener stopped");
            }
        });
    }
    crate::app::shutdown::signal().await;
    tracing::info!("worker stopping: units it held are taken over once their leases run out");
    Ok(())
}
