//! Admission: the per-profile requests-per-minute window and its headers, and the generation
//! slots a request waits for (FIFO).
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::HeaderValue;
use axum::response::Response;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::{ProfileState, Shared};

/// A fixed one-minute request window per profile.
pub(super) struct RateWindow {
    pub(super) started: Instant,
    pub(super) used: u32,
}

pub(super) struct RateStatus {
    pub(super) allowed: bool,
    pub(super) limit: u32,
    pub(super) remaining: u32,
    pub(super) reset: Duration,
}

const RATE_WINDOW: Duration = Duration::from_secs(60);

pub(super) fn admit(ps: &ProfileState) -> RateStatus {
    let limit = ps.profile.requests_per_minute;
    let mut w = ps.window.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if now.duration_since(w.started) >= RATE_WINDOW {
        w.started = now;
        w.used = 0;
    }
    let allowed = w.used < limit;
    if allowed {
        w.used += 1;
    }
    RateStatus {
        allowed,
        limit,
        remaining: limit - w.used,
        reset: RATE_WINDOW.saturating_sub(now.duration_since(w.started)),
    }
}

pub(super) fn rate_headers(response: &mut Response, rate: &RateStatus) {
    let h = response.headers_mut();
    h.insert("x-ratelimit-limit-requests", HeaderValue::from(rate.limit));
    h.insert("x-ratelimit-remaining-requests", HeaderValue::from(rate.remaining));
    if let Ok(v) = HeaderValue::from_str(&format!("{}s", rate.reset.as_secs_f64().ceil() as u64)) {
        h.insert("x-ratelimit-reset-requests", v);
    }
}

/// Holding a generation slot; counted as in flight until dropped.
pub(super) struct Slot {
    state: Shared,
    profile: usize,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let ps = &self.state.profiles[self.profile];
        ps.in_flight.fetch_sub(1, Ordering::Relaxed);
        ps.touch();
    }
}

/// Counted in the queue depth while waiting for a slot (also when the wait is abandoned).
struct Queued<'a>(&'a AtomicU64);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits (FIFO: tokio's semaphore is fair) for one of the profile's slots.
pub(super) async fn acquire_slot(state: &Shared, profile: usize) -> Slot {
    let ps = &state.profiles[profile];
    let permit = match &ps.slots {
        Some(slots) => {
            ps.queued.fetch_add(1, Ordering::Relaxed);
            let _queued = Queued(&ps.queued);
            // The semaphore is never closed; a closed one would just mean "no limit".
            slots.clone().acquire_owned().await.ok()
        }
        None => None,
    };
    ps.in_flight.fetch_add(1, Ordering::Relaxed);
    Slot {
        state: state.clone(),
        profile,
        _permit: permit,
    }
}
