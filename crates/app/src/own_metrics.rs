//! bakeoff's own Prometheus endpoint (`GET /metrics` of `bakeoff serve`, and of `bakeoff worker
//! --metrics-listen`): the runs it holds, the engine's requests, records and lags
//! (`engine::own_metrics`), and the web's page latency. Series names are documented in
//! docs/telemetry.md. Counts and durations only: no label ever carries a run, candidate, user or
//! eval-set name, so the endpoint says how busy a deployment is and nothing of what it measures.
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::own_metrics::EngineFigures;
use crate::engine::run::QueueView;

/// Upper bounds of the page-latency histogram, seconds.
pub const PAGE_BUCKETS_S: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Time the web took to answer its pages (non-cumulative counts per bucket, the last +Inf).
pub struct PageLatency {
    counts: [AtomicU64; PAGE_BUCKETS_S.len() + 1],
    sum_us: AtomicU64,
}

impl PageLatency {
    pub const fn new() -> PageLatency {
        PageLatency {
            counts: [const { AtomicU64::new(0) }; PAGE_BUCKETS_S.len() + 1],
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, seconds: f64) {
        let i = PAGE_BUCKETS_S
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(PAGE_BUCKETS_S.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds * 1e6).max(0.0) as u64, Ordering::Relaxed);
    }
}

impl Default for PageLatency {
    fn default() -> Self {
        Self::new()
    }
}

/// The page latency of this process (observed by the web's layer).
pub static PAGES: PageLatency = PageLatency::new();

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn optional(out: &mut String, name: &str, help: &str, value: Option<f64>) {
    if let Some(v) = value {
        family(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
}

/// The exposition text (format 0.0.4). `queue`: the runs this process's runner sees (None for
/// a process that holds none); `pages`: the web's latency (None for a worker).
pub fn render(queue: Option<&QueueView>, engine: &EngineFigures, pages: Option<&PageLatency>) -> String {
    let mut out = String::with_capacity(2048);
    family(&mut out, "bakeoff_info", "gauge", "bakeoff's version.");
    let _ = writeln!(out, "bakeoff_info{{version=\"{}\"}} 1", crate::VERSION);
    if let Some(q) = queue {
        family(
            &mut out,
            "bakeoff_runs",
            "gauge",
            "Runs executing now (on any worker) and waiting to start.",
        );
        let _ = writeln!(out, "bakeoff_runs{{state=\"running\"}} {}", q.executing.len());
        let _ = writeln!(out, "bakeoff_runs{{state=\"queued\"}} {}", q.waiting.len());
    }
    family(
        &mut out,
        "bakeoff_requests_in_flight",
        "gauge",
        "Measured requests this process has in flight.",
    );
    let _ = writeln!(out, "bakeoff_requests_in_flight {}", engine.requests_in_flight);
    family(
        &mut out,
        "bakeoff_requests_sent_total",
        "counter",
        "Measured requests (attempts) this process sent.",
    );
    let _ = writeln!(out, "bakeoff_requests_sent_total {}", engine.requests_sent);
    family(
        &mut out,
        "bakeoff_records_written_total",
        "counter",
        "Request records this process stored.",
    );
    let _ = writeln!(out, "bakeoff_records_written_total {}", engine.records_written);
    optional(
        &mut out,
        "bakeoff_writer_lag_seconds",
        "How long the oldest record of the last stored batch waited after its request ended.",
        engine.writer_lag_s,
    );
    optional(
        &mut out,
        "bakeoff_harness_lag_p99_seconds",
        "p99 event-loop lag of the last measured unit (the harness's own lag probe).",
        engine.harness_lag_p99_s,
    );
    optional(
        &mut out,
        "bakeoff_harness_lag_max_seconds",
        "Worst event-loop lag of the last measured unit.",
        engine.harness_lag_max_s,
    );
    family(
        &mut out,
        "bakeoff_unreliable_units_total",
        "counter",
        "Measured units whose speed figures the harness flagged as unreliable.",
    );
    let _ = writeln!(out, "bakeoff_unreliable_units_total {}", engine.unreliable_units);
    if let Some(p) = pages {
        let name = "bakeoff_page_latency_seconds";
        family(
            &mut out,
            name,
            "histogram",
            "Time the web took to answer a request, from receipt to response headers.",
        );
        let mut running = 0;
        for (i, count) in p.counts.iter().enumerate() {
            running += count.load(Ordering::Relaxed);
            let le = PAGE_BUCKETS_S.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {running}");
        }
        let _ = writeln!(out, "{name}_sum {}", p.sum_us.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {running}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_parses_and_carries_no_names() {
        let p = PageLatency::new();
        p.observe(0.003);
        p.observe(0.2);
        p.observe(60.0);
        let engine = crate::engine::own_metrics::figures();
        let text = render(None, &engine, Some(&p));
        let e = crate::domain::telemetry::parse(&text).expect("Prometheus text");
        let bucket = |le: &str| {
            e.samples
                .iter()
                .find(|s| s.name == "bakeoff_page_latency_seconds_bucket" && s.label("le") == Some(le))
                .map(|s| s.value)
        };
        assert_eq!(bucket("0.005"), Some(1.0));
        assert_eq!(bucket("0.25"), Some(2.0));
        assert_eq!(bucket("+Inf"), Some(3.0));
        for s in &e.samples {
            for (k, _) in &s.labels {
                assert!(["version", "state", "le"].contains(&k.as_str()), "{k}");
            }
        }
    }
}
