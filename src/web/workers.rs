//! `GET /workers`: every measurement worker sharing this database (docs/workers.md) as its
//! heartbeat row shows it — `serve`'s embedded worker and each `bakeoff worker` — live or
//! silent by the database's clock, with the caps every worker applies and what this web node's
//! own worker is.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::routing::get;

use super::AppState;
use super::error::WebError;
use super::views::NOT_MEASURED;
use crate::domain::format;
use crate::domain::workers::WorkerStatus;

pub fn router() -> Router<AppState> {
    Router::new().route("/workers", get(page))
}

/// One worker as listed.
#[derive(Debug, Clone)]
pub struct WorkerRow {
    pub name: String,
    /// "embedded (serve)" or "bakeoff worker".
    pub kind: &'static str,
    /// "eu, gpu-a", or empty for none.
    pub labels: String,
    pub version: String,
    pub host: String,
    pub pid: u32,
    /// "3 s ago".
    pub heartbeat: String,
    pub heartbeat_at: String,
    /// Beat within its lease: it holds its leases.
    pub live: bool,
    pub lease: String,
    /// "1 / 4".
    pub units: String,
    /// "37 % of one core", or "—".
    pub cpu: String,
    /// "0.52", or "—".
    pub load: String,
    pub started: String,
}

impl WorkerRow {
    /// `now` is the database's clock, the one every heartbeat is written with.
    pub fn new(w: &WorkerStatus, now: crate::domain::Timestamp) -> Self {
        WorkerRow {
            name: w.name.clone(),
            kind: if w.embedded {
                "embedded (serve)"
            } else {
                "bakeoff worker"
            },
            labels: w.labels.join(", "),
            version: w.version.clone(),
            host: w.host.clone(),
            pid: w.pid,
            heartbeat: format::ago(now.0 - w.heartbeat_at.0),
            heartbeat_at: w.heartbeat_at.display(),
            live: w.is_live(now),
            lease: format::duration(w.lease_ms as f64 / 1000.0),
            units: format!("{} / {}", w.units_held, w.capacity),
            cpu: w.cpu_share.map_or_else(
                || NOT_MEASURED.to_string(),
                |s| format!("{} % of one core", format::at_most_decimals(s * 100.0, 0)),
            ),
            load: w
                .load_avg
                .map_or_else(|| NOT_MEASURED.to_string(), |l| format!("{l:.2}")),
            started: w.started_at.display(),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "workers.html")]
pub struct WorkersPage {
    pub nav: &'static str,
    pub rows: Vec<WorkerRow>,
    pub live: usize,
    /// The caps every worker applies, in words.
    pub caps: String,
    /// This web node's own worker.
    pub me: String,
    /// Whether this web node measures (false: `serve --no-worker`).
    pub measures: bool,
    /// Whether it takes any run (serve) or only those it was asked to start.
    pub claims_any: bool,
}

async fn page(State(state): State<AppState>) -> Result<WorkersPage, WebError> {
    let now = state.store.database_now().await?;
    let rows: Vec<WorkerRow> = state
        .store
        .list_workers()
        .await?
        .iter()
        .map(|w| WorkerRow::new(w, now))
        .collect();
    let identity = state.runner.identity();
    Ok(WorkersPage {
        nav: "workers",
        live: rows.iter().filter(|r| r.live).count(),
        rows,
        caps: state.runner.caps().describe(),
        me: identity.name.clone(),
        measures: identity.measures,
        claims_any: identity.claims_any,
    })
}
