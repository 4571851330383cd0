//! Whether a soak degrades over time: per-window tok/s and p95 latency, their trends and drift,
//! error bursts, with pauses (a restart) cut out of the windows.
use serde::Serialize;

use super::StabilityOptions;
use super::repetitions::{completion_us, p95_ms};
use super::trend::Trend;
use crate::format;
use crate::run::RequestRecord;
use crate::stats::wilson;

/// One time window of a soak (requests are placed by when they completed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoakWindow {
    pub index: usize,
    /// Seconds from the soak's first completion.
    pub start_s: f64,
    pub end_s: f64,
    pub requests: usize,
    pub failed: usize,
    /// Output tokens of successful requests completed in the window / window length.
    pub tok_s: f64,
    pub p95_e2e_ms: Option<f64>,
    pub error_rate: f64,
    /// Error rate far above the soak's overall rate.
    pub burst: bool,
}

/// A soak, windowed, with trends and the degradation flag.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoakAnalysis {
    pub requests: usize,
    /// Load time covered, seconds (pauses left out, see `paused_s`).
    pub duration_s: f64,
    /// Time with nothing in flight for longer than [`SOAK_PAUSE_US`] (a restart), left out of
    /// the windows so a pause does not read as a throughput drop; 0 for an unbroken soak.
    pub paused_s: f64,
    pub windows: Vec<SoakWindow>,
    pub error_rate: f64,
    pub tok_s: Trend,
    pub p95_latency: Trend,
    pub error_bursts: usize,
    /// Latency climbs or throughput falls beyond noise (see [`Trend`]).
    pub degrading: bool,
    /// Why it is (or is not) flagged, in words.
    pub verdict: String,
}

/// A soak with nothing in flight for longer than this (µs) was paused, e.g. by a restart of
/// bakeoff; a running soak always has requests in flight.
pub const SOAK_PAUSE_US: i64 = 2_000_000;

/// Maps wall-clock µs onto the soak's load time: every pause (nothing in flight for longer than
/// [`SOAK_PAUSE_US`]) is cut out. Returns the mapping and the total time cut.
fn load_clock(records: &[&RequestRecord]) -> (impl Fn(i64) -> i64 + use<>, i64) {
    let mut spans: Vec<(i64, i64)> = records.iter().map(|r| (r.sent_at_us, completion_us(r))).collect();
    spans.sort_unstable();
    // (wall time the pause ended, total cut up to and including it)
    let mut cuts: Vec<(i64, i64)> = Vec::new();
    let mut covered = spans.first().map_or(0, |s| s.1);
    let mut total = 0;
    for &(start, end) in spans.iter().skip(1) {
        if start - covered > SOAK_PAUSE_US {
            total += start - covered;
            cuts.push((start, total));
        }
        covered = covered.max(end);
    }
    let map = move |t: i64| {
        // Completions lie inside covered time, never inside a pause.
        let cut = cuts.iter().take_while(|(at, _)| *at <= t).last().map_or(0, |c| c.1);
        t - cut
    };
    (map, total)
}

/// Windows a soak's records and judges its trend; None with fewer than two windows' worth of
/// completions.
pub fn soak_analysis(records: &[&RequestRecord], options: &StabilityOptions) -> Option<SoakAnalysis> {
    let windows_wanted = options.soak_windows.max(3);
    if records.len() < windows_wanted {
        return None;
    }
    let (load_time, paused_us) = load_clock(records);
    let completion = |r: &RequestRecord| load_time(completion_us(r));
    let first = records.iter().map(|r| completion(r)).min()?;
    let last = records.iter().map(|r| completion(r)).max()?;
    if last <= first {
        return None;
    }
    let width = (last - first) as f64 / windows_wanted as f64;
    let mut buckets: Vec<Vec<&RequestRecord>> = vec![Vec::new(); windows_wanted];
    for r in records {
        let i = (((completion(r) - first) as f64 / width) as usize).min(windows_wanted - 1);
        buckets[i].push(r);
    }
    let failed_total = records.iter().filter(|r| !r.succeeded()).count();
    let overall = failed_total as f64 / records.len() as f64;
    let width_s = width / 1e6;
    let mut windows: Vec<SoakWindow> = buckets
        .iter()
        .enumerate()
        .map(|(index, rs)| {
            let failed = rs.iter().filter(|r| !r.succeeded()).count();
            let tokens: u64 = rs
                .iter()
                .filter(|r| r.succeeded())
                .filter_map(|r| r.output_tokens)
                .map(u64::from)
                .sum();
            let ok = rs.iter().filter(|r| r.succeeded()).count();
            SoakWindow {
                index,
                start_s: index as f64 * width_s,
                end_s: (index + 1) as f64 * width_s,
                requests: rs.len(),
                failed,
                tok_s: tokens as f64 / width_s,
                p95_e2e_ms: (ok >= options.min_window_requests).then(|| p95_ms(rs)).flatten(),
                error_rate: if rs.is_empty() {
                    0.0
                } else {
                    failed as f64 / rs.len() as f64
                },
                burst: false,
            }
        })
        .collect();
    for w in &mut windows {
        let lower = wilson(w.failed as u64, w.requests as u64, options.confidence).map_or(0.0, |i| i.lo);
        w.burst = overall > 0.0 && w.failed >= 2 && w.error_rate >= options.burst_factor * overall && lower > overall;
    }
    let mid_min = |w: &SoakWindow| (w.start_s + w.end_s) / 2.0 / 60.0;
    let tok_points: Vec<(f64, f64)> = windows.iter().map(|w| (mid_min(w), w.tok_s)).collect();
    let lat_points: Vec<(f64, f64)> = windows
        .iter()
        .filter_map(|w| w.p95_e2e_ms.map(|p| (mid_min(w), p)))
        .collect();
    let tok_s = Trend::of(&tok_points, options.confidence);
    let p95_latency = Trend::of(&lat_points, options.confidence);
    let latency_up = p95_latency.moved(1.0, options.degrade_min_drift);
    let throughput_down = tok_s.moved(-1.0, options.degrade_min_drift);
    let pct = |d: Option<f64>| d.map_or("—".to_string(), |d| format::signed_percent(d, 1));
    let verdict = match (latency_up, throughput_down) {
        (true, true) => format!(
            "steadily degrading: p95 latency {} and tok/s {} from the first to the last window, beyond noise",
            pct(p95_latency.drift),
            pct(tok_s.drift)
        ),
        (true, false) => format!(
            "steadily degrading: p95 latency {} from the first to the last window, beyond noise",
            pct(p95_latency.drift)
        ),
        (false, true) => format!(
            "steadily degrading: tok/s {} from the first to the last window, beyond noise",
            pct(tok_s.drift)
        ),
        (false, false) => format!(
            "no steady degradation: p95 latency {}, tok/s {} (trend within noise or below {:.0} %)",
            pct(p95_latency.drift),
            pct(tok_s.drift),
            options.degrade_min_drift * 100.0
        ),
    };
    let paused_s = paused_us as f64 / 1e6;
    let verdict = if paused_us > 0 {
        format!(
            "{verdict}; windows cover load time only: {paused_s:.0} s with nothing in flight (a restart) are left out"
        )
    } else {
        verdict
    };
    Some(SoakAnalysis {
        requests: records.len(),
        duration_s: (last - first) as f64 / 1e6,
        paused_s,
        error_bursts: windows.iter().filter(|w| w.burst).count(),
        error_rate: overall,
        windows,
        tok_s,
        p95_latency,
        degrading: latency_up || throughput_down,
        verdict,
    })
}
