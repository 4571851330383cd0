//! `/api/v1/workers`: the workers page as JSON — every measurement worker's heartbeat row, live
//! or silent by the database's clock, the caps every worker applies and this server's own
//! worker.
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiResult, ok, rfc3339};
use crate::domain::Timestamp;
use crate::domain::workers::WorkerStatus;
use crate::web::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/workers", get(list))
}

/// One worker as its last heartbeat left it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerView {
    /// Unique among workers; stable across its restarts.
    pub name: String,
    /// `serve`'s own worker (true) or a `bakeoff worker` process.
    pub embedded: bool,
    /// What it carries: a candidate requiring labels is measured only by a worker with all.
    pub labels: Vec<String>,
    /// Its bakeoff version.
    pub version: String,
    pub host: String,
    pub pid: u32,
    /// Units it measures at once, at most.
    pub capacity: u32,
    /// Units it held at its last heartbeat.
    pub units_held: u32,
    pub started_at: String,
    pub heartbeat_at: String,
    /// Milliseconds from its last heartbeat to `database_now`.
    pub since_heartbeat_ms: i64,
    /// How long its leases last: silent for longer, it has lost them.
    pub lease_ms: i64,
    /// It beat within its lease: it holds its leases.
    pub live: bool,
    /// Its process's CPU time over wall time since its previous heartbeat (1.0 = one core).
    pub cpu_share: Option<f64>,
    /// Its host's one-minute load average.
    pub load_avg: Option<f64>,
}

impl WorkerView {
    fn new(w: &WorkerStatus, now: Timestamp) -> Self {
        WorkerView {
            name: w.name.clone(),
            embedded: w.embedded,
            labels: w.labels.clone(),
            version: w.version.clone(),
            host: w.host.clone(),
            pid: w.pid,
            capacity: w.capacity,
            units_held: w.units_held,
            started_at: rfc3339(w.started_at),
            heartbeat_at: rfc3339(w.heartbeat_at),
            since_heartbeat_ms: now.0 - w.heartbeat_at.0,
            lease_ms: w.lease_ms,
            live: w.is_live(now),
            cpu_share: w.cpu_share,
            load_avg: w.load_avg,
        }
    }
}

/// The caps every worker applies, across all of them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CapsView {
    /// Runs executing at once, at most.
    pub max_runs: usize,
    /// Runs sending requests to one candidate at once, at most.
    pub per_candidate: usize,
}

/// This server's own worker.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ThisWorker {
    pub name: String,
    /// False for a web-only server (`serve --no-worker`).
    pub measures: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerList {
    /// The database's clock, which every heartbeat and lease is written with.
    pub database_now: String,
    pub caps: CapsView,
    pub this_server: ThisWorker,
    /// Every worker that ever beat against this database, by name.
    pub items: Vec<WorkerView>,
}

/// Every measurement worker sharing this database.
#[utoipa::path(get, operation_id = "list_workers", path = "/api/v1/workers", tag = "workers",
    responses((status = 200, description = "The workers, the caps they apply and this server's own worker", body = WorkerList)))]
pub async fn list(State(state): State<AppState>) -> ApiResult {
    let now = state.store.database_now().await?;
    let items = state
        .store
        .list_workers()
        .await?
        .iter()
        .map(|w| WorkerView::new(w, now))
        .collect();
    let caps = state.runner.caps();
    let identity = state.runner.identity();
    ok(&WorkerList {
        database_now: rfc3339(now),
        caps: CapsView {
            max_runs: caps.max_runs,
            per_candidate: caps.per_candidate,
        },
        this_server: ThisWorker {
            name: identity.name.clone(),
            measures: identity.measures,
        },
        items,
    })
}
