//! bakeoff's own figures for its `/metrics` endpoint (docs/telemetry.md, "bakeoff's own
//! metrics"): process-wide counters the engine keeps as it works, read by `bakeoff serve` and
//! `bakeoff worker`. Plain atomics: one relaxed add per request or stored batch, nothing on a
//! timer's path. Counts only, never a name (no run, candidate or user appears in a label).
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

static REQUESTS_IN_FLIGHT: AtomicI64 = AtomicI64::new(0);
static REQUESTS_SENT: AtomicU64 = AtomicU64::new(0);
static RECORDS_WRITTEN: AtomicU64 = AtomicU64::new(0);
/// µs; u64::MAX: none yet.
static WRITER_LAG_US: AtomicU64 = AtomicU64::new(u64::MAX);
static HARNESS_LAG_P99_US: AtomicU64 = AtomicU64::new(u64::MAX);
static HARNESS_LAG_MAX_US: AtomicU64 = AtomicU64::new(u64::MAX);
static UNRELIABLE_UNITS: AtomicU64 = AtomicU64::new(0);

/// A measured request is in flight while this lives.
pub struct InFlight(());

impl InFlight {
    pub fn begin() -> InFlight {
        REQUESTS_IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        REQUESTS_SENT.fetch_add(1, Ordering::Relaxed);
        InFlight(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        REQUESTS_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `new` records were stored; the oldest of the batch had ended `oldest_wait_us` before.
pub fn records_stored(new: u64, oldest_wait_us: i64) {
    RECORDS_WRITTEN.fetch_add(new, Ordering::Relaxed);
    WRITER_LAG_US.store(oldest_wait_us.max(0) as u64, Ordering::Relaxed);
}

/// A unit's harness report was made: its event-loop lag (ms) and whether it was flagged.
pub fn harness_reported(lag_p99_ms: Option<f64>, lag_max_ms: Option<f64>, unreliable: bool) {
    let us = |ms: Option<f64>| ms.map_or(u64::MAX, |m| (m * 1000.0).max(0.0) as u64);
    HARNESS_LAG_P99_US.store(us(lag_p99_ms), Ordering::Relaxed);
    HARNESS_LAG_MAX_US.store(us(lag_max_ms), Ordering::Relaxed);
    if unreliable {
        UNRELIABLE_UNITS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The engine's figures now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineFigures {
    pub requests_in_flight: i64,
    pub requests_sent: u64,
    pub records_written: u64,
    /// Seconds; None before the first stored batch.
    pub writer_lag_s: Option<f64>,
    pub harness_lag_p99_s: Option<f64>,
    pub harness_lag_max_s: Option<f64>,
    pub unreliable_units: u64,
}

pub fn figures() -> EngineFigures {
    let s = |a: &AtomicU64| {
        let v = a.load(Ordering::Relaxed);
        (v != u64::MAX).then(|| v as f64 / 1e6)
    };
    EngineFigures {
        requests_in_flight: REQUESTS_IN_FLIGHT.load(Ordering::Relaxed),
        requests_sent: REQUESTS_SENT.load(Ordering::Relaxed),
        records_written: RECORDS_WRITTEN.load(Ordering::Relaxed),
        writer_lag_s: s(&WRITER_LAG_US),
        harness_lag_p99_s: s(&HARNESS_LAG_P99_US),
        harness_lag_max_s: s(&HARNESS_LAG_MAX_US),
        unreliable_units: UNRELIABLE_UNITS.load(Ordering::Relaxed),
    }
}
