//! What a run's telemetry says (`domain::telemetry`): per candidate and level, the server's and
//! the GPU's figures over the level's measured window, server-side vs client-side TTFT, energy per
//! output token, and the diagnosis; and the server series on the run's time axis (seconds since
//! its first measured request, the axis of its throughput and TTFT charts). The page
//! (`/runs/{id}/telemetry`) and the JSON API read this; nothing here knows HTTP.
use serde::{Deserialize, Serialize};

use crate::AppError;
use crate::domain::load::Load;
use crate::domain::metrics::percentile;
use crate::domain::run::RequestRecord;
use crate::domain::telemetry::window::{find, signal_value};
use crate::domain::telemetry::{
    Diagnosis, LevelEvidence, Scrape, Signal, SignalSummary, Source, Window, catalogue, diagnose, energy_joules,
    gpu_cost_per_million_output_tokens, joules_per_output_token, summarise,
};
use crate::pages::charts::Chart;
use crate::store::DynStore;

/// One level of one candidate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LevelTelemetry {
    pub level: u32,
    /// `c=8`, `4 req/s`.
    pub label: String,
    /// A closed loop's concurrency (None: a rate).
    pub concurrency: Option<u32>,
    pub window_s: f64,
    pub measured_requests: usize,
    pub output_tokens: u64,
    pub server: Vec<SignalSummary>,
    pub gpu: Vec<SignalSummary>,
    /// GPU energy over the window and its method, joules per output token.
    pub energy_j: Option<f64>,
    pub energy_method: Option<String>,
    pub joules_per_output_token: Option<f64>,
    /// What the candidate's GPUs (its declared `gpu_count` × `gpu_hour_price`) cost per million
    /// output tokens over the window (`telemetry::gpu_cost_per_million_output_tokens`).
    pub gpu_cost_per_mtok: Option<f64>,
    /// The declared GPUs, "2 × H100 at $2.50/GPU-hour", when priced.
    pub gpus_declared: Option<String>,
    /// p99 client lag, ms (closed loop: wait in bakeoff before send; open loop: schedule lag).
    pub client_lag_p99_ms: Option<f64>,
    pub diagnosis: Diagnosis,
    /// bakeoff's own token hit rate of the level's measured requests, from their usage
    /// (`prompt_cache::COUNTING_RULE`), beside the server's counters; None: not reported.
    #[serde(default)]
    pub bakeoff_prefix_hit_rate: Option<f64>,
}

impl LevelTelemetry {
    /// The server's prefix-cache hit rate over the level: the increase of its hit counter over
    /// its query counter between the level's boundary scrapes (vLLM's
    /// `vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total`, tokens), else its
    /// hit-rate gauge.
    pub fn server_prefix_hit_rate(&self) -> Option<f64> {
        let hits = headline(&self.server, Signal::PrefixCacheHits);
        let queries = headline(&self.server, Signal::PrefixCacheQueries);
        match (hits, queries) {
            (Some(h), Some(q)) if q > 0.0 => Some(h / q),
            _ => headline(&self.server, Signal::PrefixCacheHitRate),
        }
    }
}

/// One candidate's telemetry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CandidateTelemetry {
    pub candidate_id: i64,
    pub name: String,
    /// Engines whose naming the scrapes carried ("vLLM", "DCGM exporter").
    pub engines: Vec<String>,
    pub scrapes: usize,
    pub failed_scrapes: usize,
    /// The first failed scrape's error, to say why.
    pub first_error: Option<String>,
    /// Series kept beyond the catalogue (the candidate's `metrics_keep`) that the scrapes
    /// carried, by sample name; each is charted.
    pub kept_series: Vec<String>,
    pub levels: Vec<LevelTelemetry>,
}

/// A run's telemetry, every candidate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunTelemetry {
    pub run_id: i64,
    pub candidates: Vec<CandidateTelemetry>,
    /// Server and GPU series over time, beside throughput and TTFT (charts of the run page).
    pub charts: Vec<Chart>,
}

/// The per-level accumulation of a candidate's measured records.
#[derive(Default)]
struct LevelRecords {
    first_send_us: Option<i64>,
    last_end_us: Option<i64>,
    ttft_ms: Vec<f64>,
    lag_ms: Vec<f64>,
    output_tokens: u64,
    requests: usize,
    cache: crate::domain::prompt_cache::CacheAccumulator,
}

impl LevelRecords {
    fn add(&mut self, r: &RequestRecord) {
        let end = r.sent_at_us + r.last_heard_us();
        self.first_send_us = Some(self.first_send_us.map_or(r.sent_at_us, |f| f.min(r.sent_at_us)));
        self.last_end_us = Some(self.last_end_us.map_or(end, |l| l.max(end)));
        self.requests += 1;
        self.lag_ms.push(r.client_queue_us as f64 / 1000.0);
        if r.succeeded() {
            if let Some(t) = r.ttft_us() {
                self.ttft_ms.push(t as f64 / 1000.0);
            }
            self.output_tokens += u64::from(r.output_tokens.unwrap_or(0));
            self.cache.add(r, None);
        }
    }
}

fn p(sorted: &mut [f64], q: f64) -> Option<f64> {
    sorted.sort_by(|a, b| a.total_cmp(b));
    percentile(sorted, q)
}

/// The level of `loads` a measured record belongs to.
fn level_of(loads: &[Load], r: &RequestRecord) -> Option<usize> {
    loads.iter().position(|l| match l {
        Load::Concurrency { concurrency } => *concurrency == r.concurrency,
        Load::Rate { .. } => true,
        Load::Replay { .. } => r.concurrency == 0,
    })
}

/// A run's telemetry; NotFound for no such run. Candidates without scrapes are left out.
pub async fn run_telemetry(store: &DynStore, run_id: i64) -> Result<RunTelemetry, AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    let harness_reasons = store
        .get_run_harness(run_id)
        .await?
        .filter(|h| h.unreliable)
        .map(|h| h.reasons)
        .unwrap_or_default();
    let loads = run.config.loads();
    // The run's time axis: its first measured request to its last end, as the run page's.
    let span = store.measured_span(run_id).await?;
    let grid = span.map(crate::domain::timeline::Grid::of);
    let mut candidates = Vec::new();
    // (name, palette slot, scrapes): a line per candidate, in the candidate's colour.
    let mut series: Vec<(String, usize, Vec<Scrape>)> = Vec::new();
    let colours = crate::domain::palette::CandidateColours::of(run.candidate_ids.iter().copied());
    let mut over_time = Vec::new();
    // As the run measured them (its snapshot: names, GPUs and their price then).
    let specs = store.run_candidates(run_id).await?;
    for &candidate_id in &run.candidate_ids {
        let scrapes = store.list_telemetry_scrapes(run_id, candidate_id).await?;
        if scrapes.is_empty() {
            continue;
        }
        let spec = specs.iter().find(|c| c.id == candidate_id).map(|c| &c.spec);
        let name = spec
            .map(|s| s.name.clone())
            .unwrap_or_else(|| format!("candidate {candidate_id}"));
        let (gpu_count, gpu_hour_price) = (spec.and_then(|s| s.gpu_count), spec.and_then(|s| s.gpu_hour_price));
        let gpus_declared = spec.and_then(declared_gpus);
        let mut levels: Vec<LevelRecords> = loads.iter().map(|_| LevelRecords::default()).collect();
        let mut buckets = grid.map(|g| g.fill());
        let mut each = |r: &mut RequestRecord| {
            if r.is_warmup {
                return;
            }
            if let Some(i) = level_of(&loads, r) {
                levels[i].add(r);
            }
            if let Some(b) = buckets.as_mut() {
                b.add(r);
            }
        };
        store
            .candidate_records_for_summaries(run_id, candidate_id, &mut each)
            .await?;
        if let Some(b) = buckets {
            over_time.push((candidate_id, b.finish()));
        }
        let (server, gpu): (Vec<Scrape>, Vec<Scrape>) =
            scrapes.iter().cloned().partition(|s| s.source == Source::Server);
        let mut out = Vec::new();
        for (i, (load, mut recs)) in loads.iter().zip(levels).enumerate() {
            let (Some(from_us), Some(to_us)) = (recs.first_send_us, recs.last_end_us) else {
                continue;
            };
            let window = Window {
                from_us,
                to_us,
                level: Some(i as u32),
            };
            let server_sums = summarise(&server, &window);
            let gpu_sums = summarise(&gpu, &window);
            let energy = energy_joules(&gpu, &window);
            let client_lag_p99_ms = p(&mut recs.lag_ms, 0.99);
            let diagnosis = diagnose(&LevelEvidence {
                server: &server_sums,
                gpu: &gpu_sums,
                client_ttft_p50_ms: p(&mut recs.ttft_ms, 0.5),
                client_ttft_p99_ms: p(&mut recs.ttft_ms, 0.99),
                client_lag_p99_ms,
                client_lag_bound_ms: crate::engine::run::harness::LAG_BOUND_MS,
                harness_reasons: &harness_reasons,
            });
            out.push(LevelTelemetry {
                level: i as u32,
                label: load.label(),
                concurrency: match load {
                    Load::Concurrency { concurrency } => Some(*concurrency),
                    Load::Rate { .. } | Load::Replay { .. } => None,
                },
                window_s: window.seconds(),
                measured_requests: recs.requests,
                output_tokens: recs.output_tokens,
                server: server_sums,
                gpu: gpu_sums,
                energy_j: energy.map(|e| e.0),
                energy_method: energy.map(|e| e.1.label().to_string()),
                joules_per_output_token: joules_per_output_token(energy.map(|e| e.0), recs.output_tokens),
                gpu_cost_per_mtok: gpu_cost_per_million_output_tokens(
                    gpu_count,
                    gpu_hour_price,
                    window.seconds(),
                    recs.output_tokens,
                ),
                gpus_declared: gpus_declared.clone(),
                client_lag_p99_ms,
                diagnosis,
                bakeoff_prefix_hit_rate: recs.cache.finish().token_hit_rate(),
            });
        }
        let failed: Vec<&Scrape> = scrapes.iter().filter(|s| s.error.is_some()).collect();
        candidates.push(CandidateTelemetry {
            candidate_id,
            name: name.clone(),
            engines: catalogue::engines_seen(scrapes.iter().flat_map(|s| s.samples.iter().map(|x| x.name.as_str())))
                .into_iter()
                .map(|e| e.label().to_string())
                .collect(),
            scrapes: scrapes.len(),
            failed_scrapes: failed.len(),
            first_error: failed.first().and_then(|s| s.error.clone()),
            kept_series: kept_names(&scrapes),
            levels: out,
        });
        series.push((name, colours.slot(candidate_id), scrapes));
    }
    let mut charts = Vec::new();
    if let (Some(grid), Some((start_us, end_us))) = (grid, span) {
        let names: Vec<String> = series.iter().map(|(n, _, _)| n.clone()).collect();
        charts.extend(crate::pages::charts::timeline_charts(
            &grid.timeline(over_time),
            &names,
            &colours,
        ));
        charts.extend(series_charts(&series, start_us, (end_us - start_us) as f64 / 1e6));
        charts.extend(kept_charts(&series, start_us, (end_us - start_us) as f64 / 1e6));
    }
    Ok(RunTelemetry {
        run_id,
        candidates,
        charts,
    })
}

/// "2 × H100 80GB at $2.50/GPU-hour": a candidate's declared GPUs, when they are priced.
fn declared_gpus(spec: &crate::domain::candidate::CandidateSpec) -> Option<String> {
    let (count, price) = (spec.gpu_count?, spec.gpu_hour_price?);
    Some(format!(
        "{count} × {} at {}/GPU-hour",
        spec.gpu_kind.as_deref().unwrap_or("GPU"),
        crate::domain::format::usd(price)
    ))
}

/// The signals drawn over time, with the unit their points are worded in and the scale from
/// the signal's unit to the chart's.
const CHARTED: [(Signal, &str, f64); 6] = [
    (Signal::QueueLength, "requests", 1.0),
    (Signal::RunningRequests, "requests", 1.0),
    (Signal::KvCacheUsage, "of 1", 1.0),
    (Signal::Preemptions, "preemptions", 1.0),
    (Signal::GpuUtilisation, "of 1", 1.0),
    (Signal::GpuPower, "W", 1.0),
];

/// The server's and GPU's series on the run's time axis (seconds since `origin_us`, the run's
/// first measured request, to `x_end`): a chart per charted signal any candidate's scrapes carry,
/// a line per candidate. A counter is drawn as its increase since the candidate's first scrape.
fn series_charts(series: &[(String, usize, Vec<Scrape>)], origin_us: i64, x_end: f64) -> Vec<Chart> {
    use crate::pages::charts::{OverTime, TimeLine, figure, over_time_chart};
    CHARTED
        .iter()
        .filter_map(|&(signal, unit, scale)| {
            let lines: Vec<TimeLine> = series
                .iter()
                .map(|(name, slot, scrapes)| {
                    let mut first: Option<f64> = None;
                    let points = scrapes
                        .iter()
                        .filter(|s| s.error.is_none())
                        .filter_map(|s| {
                            let mut v = signal_value(&s.samples, signal)?;
                            if signal.kind() == catalogue::SignalKind::Counter {
                                v -= *first.get_or_insert(v);
                            }
                            let (t, y) = ((s.at_us - origin_us) as f64 / 1e6, v * scale);
                            Some((
                                t,
                                y,
                                format!(
                                    "{name}, {} s: {}",
                                    crate::domain::format::significant_trimmed(t),
                                    figure(y, unit)
                                ),
                            ))
                        })
                        .collect();
                    TimeLine {
                        name: name.clone(),
                        slot: *slot,
                        points,
                    }
                })
                .filter(|l: &TimeLine| !l.points.is_empty())
                .collect();
            if lines.is_empty() {
                return None;
            }
            let counter = signal.kind() == catalogue::SignalKind::Counter;
            over_time_chart(
                OverTime {
                    id: chart_id(signal),
                    title: format!("{} over time", capitalised(signal.label())),
                    y_desc: if counter {
                        format!("{} since the first scrape", signal.label())
                    } else {
                        signal.label().to_string()
                    },
                    caption: format!(
                        "{} at each scrape, on the run's time axis{}.",
                        capitalised(signal.label()),
                        if counter {
                            " (its increase since the candidate's first scrape)"
                        } else {
                            ""
                        }
                    ),
                    x_end,
                },
                &lines,
            )
        })
        .collect()
}

/// A run's telemetry in brief, for the run page and the scorecard: each level's diagnosis with
/// its first piece of evidence, the GPUs' draw beside their cost, and one server series over
/// time (the telemetry page's own chart); the telemetry page has the rest.
#[derive(Debug, Clone)]
pub struct TelemetryBrief {
    pub run_id: i64,
    pub rows: Vec<LevelRow>,
    pub chart: Option<Chart>,
}

/// The server series a brief charts, the first the scrapes carry: what most often explains a
/// level's TTFT.
const BRIEF_CHARTS: [Signal; 4] = [
    Signal::QueueLength,
    Signal::KvCacheUsage,
    Signal::RunningRequests,
    Signal::GpuPower,
];

impl RunTelemetry {
    /// The brief; None when nothing was scraped.
    pub fn brief(self) -> Option<TelemetryBrief> {
        if self.candidates.is_empty() {
            return None;
        }
        let rows = self.rows();
        let chart = BRIEF_CHARTS.iter().find_map(|s| {
            let id = chart_id(*s);
            self.charts.iter().find(|c| c.id == id).cloned()
        });
        Some(TelemetryBrief {
            run_id: self.run_id,
            rows,
            chart,
        })
    }
}

/// The id of a signal's chart over time.
fn chart_id(signal: Signal) -> String {
    format!("chart-telemetry-{}", signal.as_str().replace('_', "-"))
}

/// A terminal run's telemetry brief (None for a run still measuring, whose records are still
/// coming, or one with no scrapes): the run page's and the scorecard's.
pub async fn brief(store: &DynStore, run_id: i64) -> Result<Option<TelemetryBrief>, AppError> {
    match store.get_run(run_id).await? {
        Some(run) if run.status.is_terminal() => Ok(run_telemetry(store, run_id).await?.brief()),
        _ => Ok(None),
    }
}

/// Most kept series charted for one run (a prefix can match hundreds); the page names the rest.
pub const MAX_KEPT_CHARTS: usize = 12;

/// The sample names of a candidate's scrapes that the catalogue does not know: the series kept
/// by name (`CandidateSpec::metrics_keep`), sorted. A histogram's buckets are left out (its
/// `_sum` and `_count` stand for it over time).
pub fn kept_names(scrapes: &[Scrape]) -> Vec<String> {
    let mut names: Vec<String> = scrapes
        .iter()
        .flat_map(|s| s.samples.iter())
        .filter(|x| catalogue::recognise(&x.name).is_none() && !x.name.ends_with("_bucket"))
        .map(|x| x.name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A kept series is read as a counter (drawn as its increase) when its name says so, as the
/// Prometheus naming conventions have it.
fn reads_as_counter(name: &str) -> bool {
    ["_total", "_count", "_sum"].iter().any(|s| name.ends_with(s))
}

/// A chart per kept series (summed over its label sets at each scrape), a line per candidate,
/// on the run's time axis; the first `MAX_KEPT_CHARTS` names.
fn kept_charts(series: &[(String, usize, Vec<Scrape>)], origin_us: i64, x_end: f64) -> Vec<Chart> {
    use crate::pages::charts::{OverTime, TimeLine, over_time_chart};
    let mut names: Vec<String> = series.iter().flat_map(|(_, _, s)| kept_names(s)).collect();
    names.sort();
    names.dedup();
    names
        .iter()
        .take(MAX_KEPT_CHARTS)
        .enumerate()
        .filter_map(|(i, metric)| {
            let counter = reads_as_counter(metric);
            let lines: Vec<TimeLine> = series
                .iter()
                .map(|(name, slot, scrapes)| {
                    let mut first: Option<f64> = None;
                    let points = scrapes
                        .iter()
                        .filter(|s| s.error.is_none())
                        .filter_map(|s| {
                            let values: Vec<f64> = s
                                .samples
                                .iter()
                                .filter(|x| x.name == *metric && x.value.is_finite())
                                .map(|x| x.value)
                                .collect();
                            if values.is_empty() {
                                return None;
                            }
                            let mut v: f64 = values.iter().sum();
                            if counter {
                                v -= *first.get_or_insert(v);
                            }
                            let t = (s.at_us - origin_us) as f64 / 1e6;
                            Some((
                                t,
                                v,
                                format!(
                                    "{name}, {} s: {}",
                                    crate::domain::format::significant_trimmed(t),
                                    crate::domain::format::significant(v)
                                ),
                            ))
                        })
                        .collect();
                    TimeLine {
                        name: name.clone(),
                        slot: *slot,
                        points,
                    }
                })
                .filter(|l| !l.points.is_empty())
                .collect();
            over_time_chart(
                OverTime {
                    id: format!("chart-telemetry-kept-{i}"),
                    title: format!("{metric} over time"),
                    y_desc: if counter {
                        format!("{metric} since the first scrape")
                    } else {
                        metric.clone()
                    },
                    caption: format!(
                        "{metric} (kept by name; summed over its label sets) at each scrape, on the run's time axis{}.",
                        if counter {
                            " (its increase since the candidate's first scrape)"
                        } else {
                            ""
                        }
                    ),
                    x_end,
                },
                &lines,
            )
        })
        .collect()
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// A level's figure of one signal, for tables: the gauge's mean, else the counter's increase.
pub fn headline(summaries: &[SignalSummary], signal: Signal) -> Option<f64> {
    find(summaries, signal).and_then(|s| s.mean.or(s.increase).or(s.p50))
}

/// One level's figures worded for a table (units in the words; "—" when not measured).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LevelRow {
    pub candidate: String,
    pub level: String,
    pub window: String,
    pub queue: String,
    pub running: String,
    pub kv_cache: String,
    pub preemptions: String,
    pub prefix_hit_rate: String,
    pub server_ttft: String,
    pub client_ttft: String,
    pub ttft_gap: String,
    pub client_lag: String,
    pub gpu_utilisation: String,
    pub gpu_power: String,
    pub energy: String,
    pub joules_per_token: String,
    /// GPU cost per million output tokens with its caliber, or "—" (no GPU price declared).
    pub gpu_cost: String,
    pub bottleneck: String,
    pub evidence: Vec<String>,
    pub also: String,
    /// A counter figure rests on the nearest periodic scrapes (the level's boundary scrapes
    /// were missing): it includes a little of what happened around the window.
    pub approximate: bool,
}

const NOT_MEASURED: &str = "—";

/// The server's prefix-cache hit rate beside bakeoff's from usage, with their difference:
/// "server 49.8 % · bakeoff 49.9 % (bakeoff − server +0.1 pp)".
fn prefix_cross_check(server: Option<f64>, bakeoff: Option<f64>) -> String {
    let pct = |v: f64| worded(Some(v * 100.0), "%");
    match (server, bakeoff) {
        (None, None) => NOT_MEASURED.to_string(),
        (Some(s), None) => format!(
            "server {} · bakeoff: {}",
            pct(s),
            crate::domain::prompt_cache::NOT_REPORTED
        ),
        (None, Some(b)) => format!("server — · bakeoff {}", pct(b)),
        (Some(s), Some(b)) => format!(
            "server {} · bakeoff {} (bakeoff − server {:+.1} pp)",
            pct(s),
            pct(b),
            (b - s) * 100.0
        ),
    }
}

fn worded(v: Option<f64>, unit: &str) -> String {
    v.filter(|v| v.is_finite())
        .map_or(NOT_MEASURED.to_string(), |v| crate::pages::charts::figure(v, unit))
}

fn mean_max(s: Option<&SignalSummary>, scale: f64, unit: &str) -> String {
    match s.and_then(|s| Some((s.mean?, s.max?))) {
        Some((mean, max)) => format!(
            "{} (max {})",
            worded(Some(mean * scale), unit),
            worded(Some(max * scale), unit)
        ),
        None => NOT_MEASURED.to_string(),
    }
}

impl RunTelemetry {
    /// Every level of every candidate as table rows.
    pub fn rows(&self) -> Vec<LevelRow> {
        let mut out = Vec::new();
        for c in &self.candidates {
            for l in &c.levels {
                let d = &l.diagnosis;
                let pair = |a: Option<f64>, b: Option<f64>| match (a, b) {
                    (None, None) => NOT_MEASURED.to_string(),
                    (a, b) => format!("{} / {}", worded(a, "ms"), worded(b, "ms")),
                };
                out.push(LevelRow {
                    candidate: c.name.clone(),
                    level: l.label.clone(),
                    window: format!("{} ({} requests)", worded(Some(l.window_s), "s"), l.measured_requests),
                    queue: mean_max(find(&l.server, Signal::QueueLength), 1.0, "requests"),
                    running: mean_max(find(&l.server, Signal::RunningRequests), 1.0, "requests"),
                    kv_cache: mean_max(find(&l.server, Signal::KvCacheUsage), 100.0, "%"),
                    preemptions: worded(
                        find(&l.server, Signal::Preemptions).and_then(|s| s.increase),
                        "in the window",
                    ),
                    prefix_hit_rate: prefix_cross_check(l.server_prefix_hit_rate(), l.bakeoff_prefix_hit_rate),
                    server_ttft: pair(d.server_ttft_p50_ms, d.server_ttft_p99_ms),
                    client_ttft: pair(d.client_ttft_p50_ms, d.client_ttft_p99_ms),
                    ttft_gap: worded(d.ttft_gap_p50_ms, "ms"),
                    client_lag: worded(l.client_lag_p99_ms, "ms"),
                    gpu_utilisation: mean_max(find(&l.gpu, Signal::GpuUtilisation), 100.0, "%"),
                    gpu_power: mean_max(find(&l.gpu, Signal::GpuPower), 1.0, "W"),
                    energy: match (&l.energy_j, &l.energy_method) {
                        (Some(j), Some(m)) => format!("{} ({m})", worded(Some(*j), "J")),
                        _ => NOT_MEASURED.to_string(),
                    },
                    joules_per_token: worded(l.joules_per_output_token, "J/token"),
                    gpu_cost: match (l.gpu_cost_per_mtok, &l.gpus_declared) {
                        (Some(c), Some(gpus)) => format!(
                            "{} per 1M output tokens ({gpus}, over the {} window)",
                            crate::domain::format::usd(c),
                            worded(Some(l.window_s), "s")
                        ),
                        _ => NOT_MEASURED.to_string(),
                    },
                    bottleneck: d.bottleneck.label().to_string(),
                    evidence: d.evidence.clone(),
                    also: d.also.iter().map(|b| b.label()).collect::<Vec<_>>().join(", "),
                    approximate: l.server.iter().chain(&l.gpu).any(|s| s.approximate),
                });
            }
        }
        out
    }
}
