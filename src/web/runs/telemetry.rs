//! `GET /runs/{id}/telemetry`: what the candidates' servers and GPUs were doing during the run
//! (`app::telemetry`): their series on the run's time axis beside throughput and TTFT, and per
//! level the server's figures, server- vs client-side TTFT, energy per output token and the
//! diagnosis with its evidence.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};

use crate::app::pages::charts::Chart;
use crate::app::telemetry::{CandidateTelemetry, LevelRow, run_telemetry};
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};

#[derive(Template, WebTemplate)]
#[template(path = "runs/telemetry.html")]
pub struct TelemetryPage {
    pub nav: &'static str,
    pub id: i64,
    pub name: String,
    pub candidates: Vec<CandidateTelemetry>,
    pub rows: Vec<LevelRow>,
    pub charts: Vec<Chart>,
    pub max_kept_charts: usize,
}

pub async fn page(State(state): State<AppState>, Path(raw): Path<String>) -> Result<TelemetryPage, WebError> {
    let id = parse_id(&raw, "run")?;
    let run = state
        .store
        .get_run(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run #{id}")))?;
    let t = run_telemetry(&state.store, id).await?;
    Ok(TelemetryPage {
        nav: "runs",
        id,
        name: run.name,
        rows: t.rows(),
        candidates: t.candidates,
        charts: t.charts,
        max_kept_charts: crate::app::telemetry::MAX_KEPT_CHARTS,
    })
}
