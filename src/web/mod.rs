//! The web layer: axum router, handlers grouped by page, askama views, one error type.
use std::sync::Arc;

use axum::Router;

pub mod serve;

use crate::engine::Runner;
use crate::store::DynStore;

/// Shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: DynStore,
    pub runner: Runner,
    /// Base URL of the demo's in-process mock, when running with `--demo`.
    pub demo_mock_url: Option<Arc<str>>,
}

/// The whole application router; tests drive exactly this.
pub fn build_app(state: AppState) -> Router {
    Router::new().with_state(state)
}
