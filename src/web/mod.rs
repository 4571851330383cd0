//! The web layer: axum router, handlers grouped by page, askama views, one error type.
//!
//! Each page module exposes `router() -> Router<AppState>`; [`build_app`] merges them and adds
//! the cross-cutting layers (body limit, security headers, request tracing, 404 page).
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use tower_http::trace::TraceLayer;

pub mod access;
pub mod accounts;
pub mod api;
pub mod archive;
pub mod assets;
pub mod audit;
pub mod candidate_page;
pub mod candidates;
pub mod error;
pub mod evalsets;
pub mod how_we_measure;
pub mod notifications;
pub mod operability;
pub mod overview;
pub mod own_metrics;
pub mod retirement;
pub mod review;
pub mod runs;
pub mod schedules;
pub mod scorecards;
pub mod security;
pub mod serve;
pub mod thresholds;
pub mod views;
pub mod workers;
pub mod workloads;

use crate::app::state::App;

/// Largest request body accepted. Forms are small; anything larger is refused with a 413 page
/// before a single byte is stored. Individual fields are bounded by domain validation.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Shared by every handler; cheap to clone. Derefs to the application's state ([`App`]: the
/// store, the runner, the live views), which handlers read as `state.store` and so on.
#[derive(Clone)]
pub struct AppState {
    pub app: App,
    /// Base URL of the demo's in-process mock, when running with `--demo`.
    pub demo_mock_url: Option<Arc<str>>,
    /// Public URL and CSRF key (see [`security`]).
    pub security: Arc<security::Security>,
}

impl std::ops::Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.app
    }
}

/// The whole application router; tests drive exactly this.
pub fn build_app(state: AppState) -> Router {
    Router::new()
        .merge(overview::router())
        .merge(candidates::router())
        .merge(candidate_page::router())
        .merge(evalsets::router())
        .merge(workloads::router())
        .merge(runs::router())
        .merge(archive::router())
        .merge(thresholds::router())
        .merge(retirement::router())
        .merge(review::router())
        .merge(scorecards::router())
        .merge(how_we_measure::router())
        .merge(operability::router())
        .merge(audit::router())
        .merge(workers::router())
        .merge(schedules::router())
        .merge(notifications::router())
        .merge(accounts::router())
        .merge(assets::router())
        .merge(api::router())
        .merge(own_metrics::router())
        .fallback(error::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(state.clone(), security::guard))
        // Outside the guard, so its refusals reach API clients as problem details too.
        .layer(axum::middleware::from_fn(api::problem::problems))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::security_headers,
        ))
        .layer(axum::middleware::from_fn(own_metrics::time_pages))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            // The route pattern, not the raw path, so ids don't explode log cardinality.
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "(unmatched)".to_string());
            tracing::info_span!("http", method = %req.method(), route)
        }))
        .with_state(state)
}
