//! The archive: every finished run, filtered and paginated on the server (`/archive`); any two
//! or more runs side by side with per-case marks against a baseline (`/archive/compare`); one
//! candidate's key figures on one eval set over time, with regressions flagged only beyond the
//! measured noise (`/archive/history`); and export/import of whole runs
//! (`/runs/{id}/export.json`, `POST /archive/import`).
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::app::runs::{RunRecords, RunVersion, store_summary, stored_summary};
use crate::domain::compare::{Figures, figures_of};
use crate::domain::run::Run;
use crate::domain::scorecard::CandidateRecords;
use crate::store::EvalSetVersion;
use crate::web::AppState;
use crate::web::error::WebError;

pub(crate) mod compare;
pub(crate) mod history;
pub(crate) mod list;

/// Largest accepted import (a run of 100,000 requests exports to roughly 100 MiB).
pub const MAX_IMPORT_BYTES: usize = 256 * 1024 * 1024;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/archive", get(list::page))
        .route(
            "/archive/import",
            post(list::import).layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES)),
        )
        .route("/archive/compare", get(compare::page))
        .route("/archive/history", get(history::page))
        .route("/runs/{id}/export.json", get(list::export))
}

/// Cache kind of a terminal run's per-candidate figures.
/// (2: aggregates from the one level computation, per level; 3: latencies per level and the
/// token sources, for comparing like with like; 4: per-level finals keyed by level, as the
/// scorecard reads them; 5: a run's headline TTFT, E2E and decode are its level's; 6: a
/// resumed run's aggregates per segment, with its segments; 7: downtime over every repetition; 8: bins on a fixed grid.)
pub const FIGURES_KIND: &str = "figures/8";

/// Per-candidate figures of a run, in the run's candidate order: read from the run's cached
/// summary when it is terminal, else computed from its records a candidate at a time (and
/// cached when terminal). A resumed run's aggregates are per segment, as on the run page and
/// the scorecard. `version` is read only when they are computed.
pub async fn run_figures(
    state: &AppState,
    run: &Run,
    version: &RunVersion,
    records: &RunRecords,
) -> Result<Vec<Figures>, WebError> {
    if let Some(stored) = stored_summary(&state.store, run, FIGURES_KIND).await? {
        return Ok(stored);
    }
    let every_candidate = async {
        let mut out = Vec::with_capacity(run.candidate_ids.len());
        for &id in &run.candidate_ids {
            out.push(candidate_figures(state, version, records, id).await?);
        }
        Ok::<_, WebError>(out)
    };
    // An unfinished run's are shared by its views (history, comparisons).
    static LIVE: crate::app::live::Live<Vec<Figures>> = crate::app::live::Live::new();
    let out = LIVE.for_run(&state.store, run, every_candidate).await?;
    store_summary(&state.store, run, FIGURES_KIND, &out).await?;
    Ok(out)
}

/// One candidate's figures, from its records alone.
pub async fn candidate_figures(
    state: &AppState,
    version: &RunVersion,
    records: &RunRecords,
    candidate_id: i64,
) -> Result<Figures, WebError> {
    let (mine, levels) = records
        .of_candidate_leveled(&state.store, candidate_id, &mut |_| {})
        .await?;
    let resumes = records.resumes(&state.store).await?;
    let weights = version
        .outline(&state.store)
        .await?
        .map(|v| v.weights())
        .unwrap_or_default();
    let data = CandidateRecords::new(candidate_id, &mine)
        .with_resumes(resumes)
        .with_levels(levels)
        .map_err(|e| records.corrupt(candidate_id, e))?;
    Ok(figures_of(&data, &mine, |case| {
        weights.get(case).copied().unwrap_or(1.0)
    }))
}

/// Eval-set versions by id, each read (and parsed) once per request: many archived runs share
/// one version.
#[derive(Default)]
pub struct Versions(std::collections::HashMap<i64, Option<std::sync::Arc<EvalSetVersion>>>);

impl Versions {
    pub async fn get(&mut self, state: &AppState, id: i64) -> Result<Option<std::sync::Arc<EvalSetVersion>>, WebError> {
        if let Some(v) = self.0.get(&id) {
            return Ok(v.clone());
        }
        let v = state.store.get_evalset_version(id).await?.map(std::sync::Arc::new);
        self.0.insert(id, v.clone());
        Ok(v)
    }
}

/// "0.812 [0.77, 0.85]"-style cells: a value with its interval, or "—".
pub fn with_interval(
    value: Option<f64>,
    ci: Option<&crate::domain::stats::Interval>,
    fmt: impl Fn(f64) -> String,
) -> String {
    match (value, ci) {
        (Some(v), Some(i)) => format!("{} [{} – {}]", fmt(v), fmt(i.lo), fmt(i.hi)),
        (Some(v), None) => fmt(v),
        _ => crate::web::views::NOT_MEASURED.to_string(),
    }
}
