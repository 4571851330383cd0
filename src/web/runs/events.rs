//! `GET /runs/{id}/events`: live progress pushed with server-sent events.
//!
//! The stream checks the store every [`CHECK_EVERY`] and, when anything changed (status, stored
//! attempts, the event log), sends the run page's live fragment as a `progress` event; htmx's
//! SSE extension swaps it in. Once the run is terminal it sends the last fragment, then a `done`
//! event (the page closes the connection on it), and ends. Without JavaScript the page refreshes
//! itself instead (`<noscript>` in runs/detail.html).
use std::convert::Infallible;
use std::time::Duration;

use askama::Template;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::time::Instant;

use super::detail::{LivePartial, live_view, load};
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::security::{PageContext, with_page};

/// How often the stream looks for changes.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// A connection is closed after this long (the browser reconnects), so no stream lives forever.
pub const MAX_STREAM: Duration = Duration::from_secs(15 * 60);

/// Name of the event carrying the live fragment.
pub const PROGRESS_EVENT: &str = "progress";
/// Name of the event that says the run is over.
pub const DONE_EVENT: &str = "done";

pub async fn events(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, WebError> {
    let id = parse_id(&raw, "run")?;
    if state.store.get_run(id).await?.is_none() {
        return Err(WebError::NotFound(format!("run #{id}")));
    }
    // Fragments are rendered after this handler returned: they carry the request's CSRF token.
    let page = crate::web::security::page();
    let start = Feed::Watching {
        last: None,
        since: Instant::now(),
    };
    let stream = futures_util::stream::unfold((state, id, start), move |(state, id, phase)| {
        let page = page.clone();
        async move {
            let (last, since) = match phase {
                Feed::Watching { last, since } => (last, since),
                Feed::SayDone => {
                    let event = Event::default().event(DONE_EVENT).data("done");
                    return Some((Ok(event), (state, id, Feed::Ended)));
                }
                Feed::Ended => return None,
            };
            let mut first = last.is_none();
            loop {
                if since.elapsed() > MAX_STREAM {
                    return None;
                }
                match change_key(&state, id).await {
                    Ok((key, terminal)) if first || Some(&key) != last.as_ref() => {
                        match render(&state, id, &page).await {
                            Ok(html) => {
                                let next = if terminal {
                                    Feed::SayDone
                                } else {
                                    Feed::Watching { last: Some(key), since }
                                };
                                let event = Event::default().event(PROGRESS_EVENT).data(html);
                                return Some((Ok(event), (state, id, next)));
                            }
                            Err(e) => tracing::warn!(run_id = id, error = %e, "live fragment failed; retrying"),
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(run_id = id, error = %e, "reading run progress failed; retrying"),
                }
                first = false;
                tokio::time::sleep(CHECK_EVERY).await;
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Where the stream is.
enum Feed {
    /// Sending fragments when `last` (the change key last sent) changes.
    Watching {
        last: Option<String>,
        since: Instant,
    },
    /// The terminal fragment went out; say `done` next.
    SayDone,
    Ended,
}

/// A cheap summary that changes whenever the live fragment would: status, stored attempts per
/// candidate, the number of event-log lines and each unit's status, worker and claims. Also
/// whether the run is over.
async fn change_key(state: &AppState, id: i64) -> Result<(String, bool), WebError> {
    let run = state
        .store
        .get_run(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run #{id}")))?;
    let progress = state.store.run_progress(id).await?;
    let events = state.store.list_run_events(id).await?.len();
    let counts: Vec<String> = progress
        .iter()
        .map(|p| {
            format!(
                "{}:{}:{}:{}",
                p.candidate_id, p.measured_attempts, p.warmup_attempts, p.failed_attempts
            )
        })
        .collect();
    let units: Vec<String> = state
        .store
        .list_run_units(id)
        .await?
        .iter()
        .map(|u| {
            format!(
                "{}:{}:{}:{}",
                u.seq,
                u.status.as_str(),
                u.worker.as_deref().unwrap_or_default(),
                u.claims
            )
        })
        .collect();
    let key = format!(
        "{}|{}|{events}|{}",
        run.status.as_str(),
        counts.join(","),
        units.join(",")
    );
    Ok((key, run.status.is_terminal()))
}

async fn render(state: &AppState, id: i64, page: &PageContext) -> Result<String, WebError> {
    let (run, _, candidates) = load(state, &id.to_string()).await?;
    let mut live = live_view(state, &run, &candidates).await?;
    live.pushed = true;
    let partial = LivePartial { live };
    with_page(page.clone(), || partial.render())
        .map_err(|e| WebError::Internal(format!("rendering the live fragment of run {id}: {e}")))
}
