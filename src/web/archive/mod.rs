//! The archive: every finished run, filtered and paginated on the server (`/archive`); any two
//! or more runs side by side with per-case marks against a baseline (`/archive/compare`); one
//! candidate's key figures on one eval set over time, with regressions flagged only beyond the
//! measured noise (`/archive/history`); and export/import of whole runs
//! (`/runs/{id}/export.json`, `POST /archive/import`).
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

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
