//! What held a level back, from the server's and the GPU's figures over its window and the
//! harness's own lag: one bottleneck named, with every figure that supports it. The rules, in
//! the order they are tried (the first that holds is named; the others that hold are listed as
//! secondary):
//! 1. **client-bound** — bakeoff itself was late: the level's p99 client lag (closed loop: the
//!    wait of a ready request inside bakeoff; open loop: schedule lag) is above the harness's
//!    bound (when a server rule holds too and the lag is no longer than the server's own TTFT
//!    p50, the server's rule comes first: the client's lag did not make the level slow). A run whose harness report flagged its speed figures (a busy or starved client) is
//!    client-bound only where no server rule below holds: the flag makes the client's timings
//!    suspect, not the server's counters; elsewhere it is listed as a caveat.
//! 2. **KV-full / preempting** — the server preempted requests in the window, or its KV-cache use
//!    reached `KV_FULL` at some scrape.
//! 3. **server-queued** — requests waited in the server's queue: mean queue length at least
//!    `QUEUE_MEAN` over the window.
//! 4. **GPU-bound** — the GPU was busy: mean utilisation at least `GPU_BUSY`.
//! 5. **none found** — none of the above, with whatever was measured.
use serde::{Deserialize, Serialize};

use super::catalogue::Signal;
use super::window::{SignalSummary, find};

/// KV-cache use at or above this at any scrape reads as full.
pub const KV_FULL: f64 = 0.95;
/// A mean server queue of at least this many requests reads as queued.
pub const QUEUE_MEAN: f64 = 1.0;
/// Mean GPU utilisation at or above this reads as GPU-bound.
pub const GPU_BUSY: f64 = 0.9;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bottleneck {
    ClientBound,
    KvFullPreempting,
    ServerQueued,
    GpuBound,
    NoneFound,
}

impl Bottleneck {
    pub fn label(self) -> &'static str {
        match self {
            Bottleneck::ClientBound => "client-bound",
            Bottleneck::KvFullPreempting => "KV-full / preempting",
            Bottleneck::ServerQueued => "server-queued",
            Bottleneck::GpuBound => "GPU-bound",
            Bottleneck::NoneFound => "none found",
        }
    }
}

/// What the diagnosis of one level reads.
#[derive(Debug, Clone, Default)]
pub struct LevelEvidence<'a> {
    /// Server and GPU signals over the level's window.
    pub server: &'a [SignalSummary],
    pub gpu: &'a [SignalSummary],
    /// Client-side TTFT of the level's measured requests, ms.
    pub client_ttft_p50_ms: Option<f64>,
    pub client_ttft_p99_ms: Option<f64>,
    /// The level's p99 client lag, ms (closed loop: wait inside bakeoff before send; open
    /// loop: schedule lag), and the bound above which the harness flags a run.
    pub client_lag_p99_ms: Option<f64>,
    pub client_lag_bound_ms: f64,
    /// Reasons the run's harness report flagged its speed figures (empty: not flagged).
    pub harness_reasons: &'a [String],
}

/// One level's diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub bottleneck: Bottleneck,
    /// The figures behind it, worded with units ("preemptions: 14 in the window").
    pub evidence: Vec<String>,
    /// Other rules that also held, weaker by the order above.
    pub also: Vec<Bottleneck>,
    /// Server-side TTFT p50/p99 (from its histogram), ms, beside the client's.
    pub server_ttft_p50_ms: Option<f64>,
    pub server_ttft_p99_ms: Option<f64>,
    pub client_ttft_p50_ms: Option<f64>,
    pub client_ttft_p99_ms: Option<f64>,
    /// Client p50 TTFT minus server p50 TTFT, ms: network and client time.
    pub ttft_gap_p50_ms: Option<f64>,
}

fn num(v: f64) -> String {
    crate::format::significant_trimmed(v)
}

/// Names the level's bottleneck.
pub fn diagnose(e: &LevelEvidence) -> Diagnosis {
    let mut held: Vec<(Bottleneck, Vec<String>)> = Vec::new();

    let mut client = Vec::new();
    if let Some(lag) = e.client_lag_p99_ms
        && lag > e.client_lag_bound_ms
    {
        client.push(format!(
            "client lag p99 {} ms > bound {} ms",
            num(lag),
            num(e.client_lag_bound_ms)
        ));
    }
    if !client.is_empty() {
        held.push((Bottleneck::ClientBound, client));
    }

    let mut kv = Vec::new();
    if let Some(p) = find(e.server, Signal::Preemptions).and_then(|s| s.increase)
        && p > 0.0
    {
        kv.push(format!("preemptions: {} in the window", num(p)));
    }
    if let Some(s) = find(e.server, Signal::KvCacheUsage)
        && let Some(max) = s.max
        && max >= KV_FULL
    {
        kv.push(format!(
            "KV-cache use max {} %, mean {} % (full at ≥ {} %)",
            num(max * 100.0),
            num(s.mean.unwrap_or(max) * 100.0),
            num(KV_FULL * 100.0)
        ));
    }
    if !kv.is_empty() {
        held.push((Bottleneck::KvFullPreempting, kv));
    }

    if let Some(q) = find(e.server, Signal::QueueLength)
        && let Some(mean) = q.mean
        && mean >= QUEUE_MEAN
    {
        held.push((
            Bottleneck::ServerQueued,
            vec![format!(
                "server queue mean {} requests, max {} (queued at mean ≥ {})",
                num(mean),
                num(q.max.unwrap_or(mean)),
                num(QUEUE_MEAN)
            )],
        ));
    }

    if let Some(u) = find(e.gpu, Signal::GpuUtilisation)
        && let Some(mean) = u.mean
        && mean >= GPU_BUSY
    {
        let mut ev = vec![format!(
            "GPU utilisation mean {} % (busy at ≥ {} %)",
            num(mean * 100.0),
            num(GPU_BUSY * 100.0)
        )];
        if let Some(p) = find(e.gpu, Signal::GpuPower).and_then(|p| p.mean) {
            ev.push(format!("GPU power mean {} W", num(p)));
        }
        held.push((Bottleneck::GpuBound, ev));
    }

    let server_ttft = find(e.server, Signal::ServerTtft);
    let server_ttft_p50_ms = server_ttft.and_then(|s| s.p50).map(|s| s * 1000.0);
    let server_ttft_p99_ms = server_ttft.and_then(|s| s.p99).map(|s| s * 1000.0);
    // A client late by less than the server's own TTFT did not make the level slow: the server's
    // bottleneck comes first, the client's lag after it.
    if let (Some(lag), Some(server_p50)) = (e.client_lag_p99_ms, server_ttft_p50_ms)
        && held.len() > 1
        && held[0].0 == Bottleneck::ClientBound
        && lag <= server_p50
    {
        let client = held.remove(0);
        held.insert(1, client);
    }
    let ttft_gap_p50_ms = match (e.client_ttft_p50_ms, server_ttft_p50_ms) {
        (Some(c), Some(s)) => Some(c - s),
        _ => None,
    };
    // The run's harness flag (a starved or busy client) makes the client's timings suspect, not
    // the server's counters: it names the level client-bound only when the server shows nothing.
    let harness: Vec<String> = e.harness_reasons.iter().map(|r| format!("harness: {r}")).collect();
    let mut caveats = Vec::new();
    if !harness.is_empty() {
        if held.is_empty() {
            held.push((Bottleneck::ClientBound, harness));
        } else if held[0].0 == Bottleneck::ClientBound {
            held[0].1.extend(harness);
        } else {
            caveats = harness;
            held.push((Bottleneck::ClientBound, Vec::new()));
        }
    }
    let (bottleneck, mut evidence) = if held.is_empty() {
        let mut ev = Vec::new();
        for (signal, what) in [
            (Signal::QueueLength, "server queue mean"),
            (Signal::KvCacheUsage, "KV-cache use mean"),
        ] {
            if let Some(m) = find(e.server, signal).and_then(|s| s.mean) {
                ev.push(format!("{what} {}", num(m)));
            }
        }
        if let Some(m) = find(e.gpu, Signal::GpuUtilisation).and_then(|s| s.mean) {
            ev.push(format!("GPU utilisation mean {} %", num(m * 100.0)));
        }
        if ev.is_empty() && e.server.is_empty() && e.gpu.is_empty() {
            ev.push("no server or GPU telemetry for this level".into());
        }
        (Bottleneck::NoneFound, ev)
    } else {
        held[0].clone()
    };
    evidence.extend(
        caveats
            .into_iter()
            .map(|c| format!("caveat, client timings suspect: {c}")),
    );
    if let (Some(c), Some(s), Some(gap)) = (e.client_ttft_p50_ms, server_ttft_p50_ms, ttft_gap_p50_ms) {
        evidence.push(format!(
            "TTFT p50: client {} ms, server {} ms (gap {} ms: network and client)",
            num(c),
            num(s),
            num(gap)
        ));
    }
    Diagnosis {
        bottleneck,
        evidence,
        also: held.iter().skip(1).map(|(b, _)| *b).collect(),
        server_ttft_p50_ms,
        server_ttft_p99_ms,
        client_ttft_p50_ms: e.client_ttft_p50_ms,
        client_ttft_p99_ms: e.client_ttft_p99_ms,
        ttft_gap_p50_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge(signal: Signal, mean: f64, max: f64) -> SignalSummary {
        SignalSummary {
            signal,
            mean: Some(mean),
            max: Some(max),
            increase: None,
            rate_per_s: None,
            observations: None,
            p50: None,
            p99: None,
            scrapes: 5,
            approximate: false,
        }
    }

    fn counter(signal: Signal, increase: f64) -> SignalSummary {
        SignalSummary {
            mean: None,
            max: None,
            increase: Some(increase),
            ..gauge(signal, 0.0, 0.0)
        }
    }

    fn evidence<'a>(server: &'a [SignalSummary], gpu: &'a [SignalSummary]) -> LevelEvidence<'a> {
        LevelEvidence {
            server,
            gpu,
            client_lag_bound_ms: 10.0,
            ..Default::default()
        }
    }

    #[test]
    fn queue_bound() {
        let server = [
            gauge(Signal::QueueLength, 6.0, 9.0),
            gauge(Signal::KvCacheUsage, 0.4, 0.5),
            counter(Signal::Preemptions, 0.0),
        ];
        let d = diagnose(&evidence(&server, &[]));
        assert_eq!(d.bottleneck, Bottleneck::ServerQueued);
        assert!(d.evidence[0].contains("queue mean 6"), "{:?}", d.evidence);
        assert!(d.also.is_empty());
    }

    #[test]
    fn kv_bound_outranks_the_queue_it_causes() {
        let server = [
            gauge(Signal::QueueLength, 3.0, 5.0),
            gauge(Signal::KvCacheUsage, 0.9, 1.0),
            counter(Signal::Preemptions, 14.0),
        ];
        let d = diagnose(&evidence(&server, &[]));
        assert_eq!(d.bottleneck, Bottleneck::KvFullPreempting);
        assert!(d.evidence[0].contains("preemptions: 14"), "{:?}", d.evidence);
        assert_eq!(d.also, vec![Bottleneck::ServerQueued]);
    }

    #[test]
    fn client_bound_from_the_harness_lag() {
        let server = [gauge(Signal::QueueLength, 0.0, 0.0)];
        let mut e = evidence(&server, &[]);
        e.client_lag_p99_ms = Some(42.0);
        let d = diagnose(&e);
        assert_eq!(d.bottleneck, Bottleneck::ClientBound);
        assert!(d.evidence[0].contains("42 ms > bound 10 ms"), "{:?}", d.evidence);
        // Late by 42 ms at a server queueing for 300 ms: the server's queue comes first.
        let mut ttft = gauge(Signal::ServerTtft, 0.0, 0.0);
        (ttft.mean, ttft.max, ttft.p50) = (None, None, Some(0.3));
        let queued = [gauge(Signal::QueueLength, 6.0, 8.0), ttft];
        let mut e = evidence(&queued, &[]);
        e.client_lag_p99_ms = Some(42.0);
        let d = diagnose(&e);
        assert_eq!(
            (d.bottleneck, d.also.clone()),
            (Bottleneck::ServerQueued, vec![Bottleneck::ClientBound])
        );
        let reasons = vec!["bakeoff used 95 % of the cores".to_string()];
        let mut e = evidence(&server, &[]);
        e.harness_reasons = &reasons;
        assert_eq!(diagnose(&e).bottleneck, Bottleneck::ClientBound);
        // A flagged run whose server was queueing: the server's counters still name it.
        let queued = [gauge(Signal::QueueLength, 5.0, 8.0)];
        let mut e = evidence(&queued, &[]);
        e.harness_reasons = &reasons;
        let d = diagnose(&e);
        assert_eq!(d.bottleneck, Bottleneck::ServerQueued);
        assert_eq!(d.also, vec![Bottleneck::ClientBound]);
        assert!(d.evidence.iter().any(|x| x.contains("caveat")), "{:?}", d.evidence);
    }

    #[test]
    fn gpu_bound_and_none() {
        let gpu = [
            gauge(Signal::GpuUtilisation, 0.97, 1.0),
            gauge(Signal::GpuPower, 690.0, 700.0),
        ];
        let server = [gauge(Signal::QueueLength, 0.2, 1.0)];
        let d = diagnose(&evidence(&server, &gpu));
        assert_eq!(d.bottleneck, Bottleneck::GpuBound);
        assert_eq!(d.evidence.len(), 2);
        let idle = [gauge(Signal::GpuUtilisation, 0.2, 0.3)];
        let d = diagnose(&evidence(&server, &idle));
        assert_eq!(d.bottleneck, Bottleneck::NoneFound);
        let d = diagnose(&evidence(&[], &[]));
        assert_eq!(
            d.evidence,
            vec!["no server or GPU telemetry for this level".to_string()]
        );
    }

    #[test]
    fn ttft_gap_names_network_and_client_time() {
        let mut ttft = gauge(Signal::ServerTtft, 0.0, 0.0);
        (ttft.mean, ttft.max, ttft.p50, ttft.p99) = (None, None, Some(0.2), Some(0.5));
        let server = [ttft];
        let mut e = evidence(&server, &[]);
        e.client_ttft_p50_ms = Some(230.0);
        let d = diagnose(&e);
        assert_eq!(d.server_ttft_p50_ms, Some(200.0));
        assert_eq!(d.ttft_gap_p50_ms, Some(30.0));
        assert!(d.evidence.last().unwrap().contains("gap 30 ms"), "{:?}", d.evidence);
    }
}
