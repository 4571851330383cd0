//! `GET /metrics`: bakeoff's own Prometheus endpoint (`app::own_metrics`), and the layer that
//! times every page for it. In accounts mode it needs a viewer, like every page: Prometheus
//! sends an API token as `authorization: Bearer …` (its scrape config's `authorization`). Its
//! series carry counts and durations only, never a run's, candidate's or user's name.
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use crate::app::own_metrics::{PAGES, render};
use crate::engine::run::Runner;

/// The content type of the text exposition format.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>) -> Response {
    let queue = state.runner.queue();
    let text = render(Some(&queue), &crate::engine::own_metrics::figures(), Some(&PAGES));
    ([(header::CONTENT_TYPE, EXPOSITION)], text).into_response()
}

/// Times every request but the metrics scrape itself and static assets (page latency).
pub async fn time_pages(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let timed = path != "/metrics" && !path.starts_with("/static/");
    let started = Instant::now();
    let response = next.run(request).await;
    if timed {
        PAGES.observe(started.elapsed().as_secs_f64());
    }
    response
}

/// `bakeoff worker --metrics-listen`: the worker's own series on `listener`, nothing else
/// served. Runs until the process ends.
pub async fn serve_worker_metrics(listener: tokio::net::TcpListener, runner: Runner) -> std::io::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let runner = runner.clone();
            async move {
                let queue = runner.queue();
                let text = render(Some(&queue), &crate::engine::own_metrics::figures(), None);
                ([(header::CONTENT_TYPE, EXPOSITION)], text).into_response()
            }
        }),
    );
    axum::serve(listener, app).await
}
