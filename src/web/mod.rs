//! The web layer: axum router, handlers grouped by page, askama views, one error type.
//!
//! Each page module exposes `router() -> Router<AppState>`; [`build_app`] merges them and adds
//! the cross-cutting layers (body limit, security headers, request tracing, 404 page).
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use tower_http::trace::TraceLayer;

pub mod archive;
pub mod assets;
pub mod candidates;
pub mod error;
pub mod evalsets;
pub mod measure;
pub mod operability;
pub mod overview;
pub mod runs;
pub mod scorecards;
pub mod serve;
pub mod thresholds;
pub mod views;

use crate::engine::run::Runner;
use crate::store::DynStore;

/// Largest request body accepted. Forms are small; anything larger is refused with a 413 page
/// before a single byte is stored. Individual fields are bounded by domain validation.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

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
    Router::new()
        .merge(overview::router())
        .merge(candidates::router())
        .merge(evalsets::router())
        .merge(runs::router())
        .merge(archive::router())
        .merge(thresholds::router())
        .merge(scorecards::router())
        .merge(measure::router())
        .merge(operability::router())
        .merge(assets::router())
        .fallback(error::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(security_headers))
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

/// Headers every response carries: pages load only our own scripts and styles (so even a
/// rendering bug cannot run injected script), and are never framed.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}
