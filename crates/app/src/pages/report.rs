//! The run page's reports beyond the first results table: the harness's verdict on its own
//! measurements, per-level figures of load-shape runs (concurrency levels and sweeps with the
//! knee, constant and Poisson rates, prompt-length bins, goodput under the run's SLOs), and
//! quality reports per candidate built from the stored grades (per-grader pass rates with
//! reasons, classification and field-extraction reports).
//!
//! Everything here is pure (records and stored reports in, strings out), so the views can be
//! cached with the rest of a terminal run's page and templates only print.
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::charts::{self, Chart, ThroughputSeries};
use super::format::NOT_MEASURED;
use super::metrics::{
    AGGREGATE, AGGREGATE_WHOLE_RUN, DECODE_PER_STREAM, E2E, E2E_PER_STREAM, ICL, ITL, REQUEST_THROUGHPUT, TPOT, TTFA,
    TTFT,
};
use crate::domain::calibers::{HarnessReport, LevelFigures, RunFigures, RunLevels};
use crate::domain::capacity::LoadAxis;
use crate::domain::format;
use crate::domain::grading::{FieldReport, FieldStats, FieldsDetail, classification_report, field_report, label_pair};
use crate::domain::load::LoadShape;
use crate::domain::metrics::Distribution;
use crate::domain::run::{RequestRecord, Run, RunConfig, Slo};
use crate::domain::validation::truncate;
use crate::runs::VersionOutline;

// ------------------------------------------------------------------------------ harness

/// The harness's report on itself, every figure with what it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HarnessView {
    /// The speed figures of this run must not be trusted; `reasons` says why.
    pub unreliable: bool,
    pub reasons: Vec<String>,
    pub facts: Vec<Fact>,
}

/// One labelled figure: `key` names it for tests and scripts (`data-harness`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fact {
    pub key: String,
    pub label: String,
    pub value: String,
    pub caliber: String,
}

/// `p50 0.12 ms · p90 0.30 ms · p99 1.2 ms · max 4.0 ms (n=200)`.
fn percentiles_ms(d: &Distribution) -> String {
    format!(
        "p50 {} ms · p90 {} ms · p99 {} ms · max {} ms (n={})",
        format::significant(d.p50),
        format::significant(d.p90),
        format::significant(d.p99),
        format::significant(d.max),
        d.n
    )
}

pub fn harness_view(h: &HarnessReport) -> HarnessView {
    let mut facts = cpu_facts(h);
    facts.extend(lag_facts(h));
    facts.push(Fact {
        key: "host".into(),
        label: "measured by".into(),
        value: format!("bakeoff {} on {} ({} cores)", h.bakeoff_version, h.host, h.cores),
        caliber: "the installation and host that sent the requests".into(),
    });
    HarnessView {
        unreliable: h.unreliable,
        reasons: h.reasons.clone(),
        facts,
    }
}

/// The verdict and what bakeoff's own CPU did.
fn cpu_facts(h: &HarnessReport) -> Vec<Fact> {
    let mut facts = vec![Fact {
        key: "verdict".into(),
        label: "speed figures".into(),
        value: if h.unreliable { "UNRELIABLE" } else { "reliable" }.into(),
        caliber: format!(
            "flagged when p99 schedule lag or client queue wait exceeds {} ms, or bakeoff's own lag could have moved a reported TTFT, E2E or ITL percentile by more than max({} ms, {} % of it)",
            format::significant(h.lag_bound_ms),
            format::significant(crate::domain::self_check::SHIFT_BOUND_MS),
            format::significant(crate::domain::self_check::SHIFT_BOUND_SHARE * 100.0)
        ),
    }];
    facts.push(Fact {
        key: "cpu_s".into(),
        label: "bakeoff CPU time".into(),
        value: match h.cpu_s {
            Some(c) => format!(
                "{} CPU-s over {} s wall",
                format::significant(c),
                format::significant(h.wall_s)
            ),
            None => format!("not measurable on this host ({} s wall)", format::significant(h.wall_s)),
        },
        caliber:
            "user + system CPU seconds of the bakeoff process during the run (an in-process mock's threads excluded)"
                .into(),
    });
    facts.push(Fact {
        key: "process".into(),
        label: "bakeoff process".into(),
        value: match (h.process_cpu_s, h.peak_rss_bytes) {
            (None, None) => NOT_MEASURED.into(),
            (cpu, rss) => format!(
                "{}; peak memory {}",
                cpu.map_or(NOT_MEASURED.into(), |c| format!("{} CPU-s", format::significant(c))),
                rss.map_or(NOT_MEASURED.into(), |b| format!(
                    "{} MB",
                    format::significant(b as f64 / 1e6)
                ))
            ),
        },
        caliber: "user + system CPU seconds of every thread of the bakeoff process during the run, and the process's peak resident memory since it started (the kernel's high-water mark)".into(),
    });
    facts.push(Fact {
        key: "cpu_share".into(),
        label: "bakeoff CPU share".into(),
        value: match h.cpu_share {
            Some(s) => format!("{:.1} % of {} cores", s * 100.0, h.cores),
            None => NOT_MEASURED.into(),
        },
        caliber: "CPU-s / (wall s × cores available)".into(),
    });
    facts.push(Fact {
        key: "cpu_per_mtok".into(),
        label: "bakeoff CPU-s per Mtok".into(),
        value: match h.cpu_s_per_million_tokens {
            Some(p) => format!("{} CPU-s per million output tokens", format::significant(p)),
            None => NOT_MEASURED.into(),
        },
        caliber: format!(
            "bakeoff CPU-s / output tokens of measured requests × 10⁶ ({} tokens streamed)",
            h.streamed_tokens
        ),
    });
    facts
}

/// How late bakeoff sent, queued and woke up, and the requests its lag spikes overlapped.
fn lag_facts(h: &HarnessReport) -> Vec<Fact> {
    let mut facts = Vec::new();
    let lag_caliber = |what: &str| {
        format!(
            "{what}; p99 above {} ms flags the run",
            format::significant(h.lag_bound_ms)
        )
    };
    if h.open_loop || h.schedule_lag_ms.is_some() {
        facts.push(Fact {
            key: "schedule_lag".into(),
            label: "schedule lag".into(),
            value: h.schedule_lag_ms.as_ref().map_or(NOT_MEASURED.into(), percentiles_ms),
            caliber: lag_caliber("open loop: actual − planned send time of every measured request"),
        });
    }
    if !h.open_loop || h.client_queue_ms.is_some() {
        facts.push(Fact {
            key: "client_queue".into(),
            label: "client queue wait".into(),
            value: h.client_queue_ms.as_ref().map_or(NOT_MEASURED.into(), percentiles_ms),
            caliber: lag_caliber(
                "closed loop: time a ready request waited inside bakeoff before it was sent (not in TTFT or E2E)",
            ),
        });
    }
    facts.push(Fact {
        key: "event_loop_lag".into(),
        label: "event-loop lag".into(),
        value: h.runtime_lag_ms.as_ref().map_or(NOT_MEASURED.into(), percentiles_ms),
        caliber: "how late bakeoff's event loop woke a 50 ms ticker during the run (timer resolution 1 ms); lag alone flags nothing, the figures it could have moved do".into(),
    });
    if h.lag_spikes.threshold_ms > 0.0 {
        facts.push(Fact {
            key: "lag_spikes".into(),
            label: "requests in lag spikes".into(),
            value: format!(
                "{} ({} spike interval{})",
                h.lag_spikes.describe(),
                h.lag_spikes.spikes.len(),
                if h.lag_spikes.spikes.len() == 1 { "" } else { "s" }
            ),
            caliber: format!(
                "measured requests whose span (send → end) overlapped an event-loop wake-up later than {} ms; overlapping alone flags nothing",
                format::significant(h.lag_spikes.threshold_ms)
            ),
        });
    }
    if let Some(worst) = h
        .figure_shifts
        .iter()
        .max_by(|a, b| (a.shift_ms / a.bound_ms).total_cmp(&(b.shift_ms / b.bound_ms)))
    {
        facts.push(Fact {
            key: "figure_shift".into(),
            label: "figures lag could move".into(),
            value: worst.describe(),
            caliber: "the reported percentile (TTFT, E2E, ITL) bakeoff's own lag spikes could have moved furthest against its bound, from the timestamps that fell inside a spike".into(),
        });
    }
    facts
}

// ------------------------------------------------------------------------ per level

/// A column head: the figure's label and how it is computed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Column {
    pub label: String,
    pub caliber: String,
}

fn col(label: impl Into<String>, caliber: impl Into<String>) -> Column {
    Column {
        label: label.into(),
        caliber: caliber.into(),
    }
}

/// Per-level figures of a load-shape run: one row per candidate × load level × prompt bin.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LevelsView {
    /// The load shape in words, e.g. "concurrency sweep c=1 → 32".
    pub shape: String,
    pub latency_columns: Vec<Column>,
    pub speed_columns: Vec<Column>,
    pub rows: Vec<LevelRow>,
    /// The knee rule in words (sweeps only).
    pub knee_rule: Option<String>,
    pub knees: Vec<KneeRow>,
    /// The SLOs goodput counts against, in words (None: no SLO set, no goodput).
    pub slo: Option<String>,
    /// Levels whose aggregates fell back to the whole span, failures by class.
    pub notes: Vec<String>,
    /// Throughput and latency vs concurrency (concurrency levels and sweeps).
    pub charts: Vec<Chart>,
    /// The levels past saturation, with why (`LevelFigures::saturation`).
    #[serde(default)]
    pub saturated: Vec<SaturatedRow>,
    /// The prompt-cache table's columns (`LevelRow::cache`), and whether any level's server
    /// reported cache fields (none: one line says so instead of a table of blanks).
    #[serde(default)]
    pub cache_columns: Vec<Column>,
    #[serde(default)]
    pub cache_reported: bool,
}

/// One level past saturation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SaturatedRow {
    pub candidate: String,
    pub load: String,
    pub prompt: String,
    /// "TTFT ×3.2 from the level's first third to its last; throughput flat while load rose".
    pub why: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LevelRow {
    pub candidate: String,
    /// `c=4`, `5 req/s Poisson`.
    pub load: String,
    /// `512 tokens` or "—".
    pub prompt: String,
    pub latency: Vec<String>,
    pub speed: Vec<String>,
    /// Prompt-cache figures (`cache_columns`).
    #[serde(default)]
    pub cache: Vec<String>,
    /// Why the level is past saturation (None: it is not): its load cells say so.
    #[serde(default)]
    pub past_saturation: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KneeRow {
    pub candidate: String,
    pub prompt: String,
    /// `c=4`.
    pub knee: String,
    /// `ttft`, `throughput` or `none`.
    pub rule: String,
    pub explanation: String,
}

pub fn shape_text(c: &RunConfig) -> String {
    match &c.load {
        LoadShape::Fixed => format!("fixed concurrency c={}", c.concurrency),
        LoadShape::Levels { levels } => format!(
            "concurrency levels {}",
            levels.iter().map(|l| format!("c={l}")).collect::<Vec<_>>().join(", ")
        ),
        LoadShape::Rate { per_second, poisson } => format!(
            "{} rate of {} req/s (open loop: sent on schedule whatever the server does)",
            if *poisson { "Poisson" } else { "constant" },
            per_second
        ),
        LoadShape::Sweep { max_concurrency, .. } => format!("concurrency sweep c=1 → {max_concurrency}, doubling"),
        LoadShape::Replay {
            workload_version,
            speed,
        } => format!(
            "the eval set at c={}, then a replay of workload version #{workload_version} at {}× (open loop: \
             every request at its recorded arrival and lengths, the same schedule for every candidate)",
            c.concurrency,
            crate::domain::format::shortest(*speed)
        ),
        LoadShape::FindCapacity { .. } => match c.load.search_settings() {
            Some(s) => format!(
                "find capacity @ SLO: a search per candidate over {} from {} (bracket within {} %, at most {} probe \
                 levels{})",
                match s.axis {
                    LoadAxis::Rate => "request rate (open loop, Poisson)",
                    LoadAxis::Concurrency => "concurrency (closed loop)",
                },
                s.axis.format(s.start),
                charts::axis_number(s.width * 100.0),
                s.max_probes,
                match c.load {
                    LoadShape::FindCapacity { max_load: Some(m), .. } => format!(", at most {}", s.axis.format(m)),
                    _ => String::new(),
                }
            ),
            None => "find capacity @ SLO".to_string(),
        },
    }
}

/// `TTFT ≤ 500 ms, TPOT ≤ 50 ms`.
pub fn slo_text(slo: &Slo) -> Option<String> {
    if !slo.is_set() {
        return None;
    }
    if slo.later_turns.is_some() {
        return slo.describe();
    }
    let parts: Vec<String> = [
        ("TTFT", slo.ttft_ms),
        ("TTFA", slo.ttfa_ms),
        ("TPOT", slo.tpot_ms),
        ("E2E", slo.e2e_ms),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} ≤ {} ms", format::significant(v))))
    .collect();
    let target = slo
        .target_attainment
        .map(|t| format!(" for {} % of requests", format::significant(t * 100.0)));
    (!parts.is_empty()).then(|| format!("{}{}", parts.join(", "), target.unwrap_or_default()))
}

/// Whether the run page shows per-level figures: any load shape but a fixed concurrency, or a
/// fixed run whose cases carry prompt-length bins.
fn has_levels<'a>(config: &RunConfig, mut figures: impl Iterator<Item = &'a RunFigures>) -> bool {
    !matches!(config.load, LoadShape::Fixed) || figures.any(|f| f.levels.iter().any(|l| l.prompt_tokens.is_some()))
}

/// Per-level figures of every candidate (warm-ups, rollout and other phases excluded by
/// `run_figures`); None for a plain eval run or before any measured request.
/// Each case's prompt-length bin, when the run page has a per-level table (a load shape, or
/// prompt-length bins); None when a plain run's results table says it all.
pub fn level_bins(run: &Run, version: Option<&VersionOutline>) -> Option<HashMap<String, Option<u32>>> {
    let bins: HashMap<String, Option<u32>> = version
        .map(|v| {
            v.cases
                .iter()
                .map(|c| (c.id.clone(), crate::domain::evalset::prompt_bin(&c.tags)))
                .collect()
        })
        .unwrap_or_default();
    (!(matches!(run.config.load, LoadShape::Fixed) && bins.values().all(Option::is_none))).then_some(bins)
}

/// A case's prompt bin, as the per-level table takes it.
pub type BinOf<'a> = Box<dyn Fn(&str) -> Option<u32> + Send + 'a>;

/// One candidate's per-level figures for the per-level table, fed its records one at a time
/// (`RunLevels::add`; the run's other records are left out).
pub fn candidate_levels<'a>(
    run: &'a Run,
    bins: &'a HashMap<String, Option<u32>>,
    candidate_id: i64,
    resumes: &'a [i64],
) -> RunLevels<'a, BinOf<'a>> {
    let bin_of: BinOf<'a> = Box::new(|case: &str| bins.get(case).copied().flatten());
    RunLevels::new(&run.config, candidate_id, bin_of, resumes)
}

/// The per-level table from every candidate's figures (candidate name, figures), in run order.
pub fn levels_view(run: &Run, figures: Vec<(String, RunFigures)>) -> Option<LevelsView> {
    let config = &run.config;
    if !has_levels(config, figures.iter().map(|(_, f)| f)) || figures.iter().all(|(_, f)| f.levels.is_empty()) {
        return None;
    }
    let slo = slo_text(&config.effective_slo());
    let latency_columns = latency_columns();
    let speed_columns = speed_columns(slo.as_deref());
    let mut rows = Vec::new();
    let mut knees = Vec::new();
    let mut notes = Vec::new();
    let mut saturated = Vec::new();
    for (name, f) in &figures {
        for l in &f.levels {
            let past_saturation = l.saturation.past_saturation().then(|| l.saturation.describe());
            if let Some(why) = &past_saturation {
                saturated.push(SaturatedRow {
                    candidate: name.clone(),
                    load: l.load.label(),
                    prompt: prompt_text(l.prompt_tokens),
                    why: why.clone(),
                });
            }
            rows.push(LevelRow {
                candidate: name.clone(),
                load: l.load.label(),
                prompt: prompt_text(l.prompt_tokens),
                latency: latency_cells(l, config.stream),
                speed: speed_cells(l, slo.is_some(), config.stream),
                cache: cache_cells(&l.prompt_cache),
                past_saturation,
            });
            notes.extend(level_notes(name, l));
        }
        for (bin, knee) in &f.knees {
            knees.push(KneeRow {
                candidate: name.clone(),
                prompt: prompt_text(*bin),
                knee: format!("c={}", knee.concurrency),
                rule: knee.rule.clone(),
                explanation: knee.explanation.clone(),
            });
        }
    }
    let knee_rule = knee_rule(config);
    let cache_reported = figures
        .iter()
        .any(|(_, f)| f.levels.iter().any(|l| l.prompt_cache.reported > 0));
    Some(LevelsView {
        cache_columns: cache_columns(),
        cache_reported,
        charts: load_charts(config, &run.candidate_ids, &figures),
        shape: shape_text(config),
        latency_columns,
        speed_columns,
        rows,
        knee_rule,
        knees,
        slo,
        notes,
        saturated,
    })
}

/// The latency table's columns, each with its caliber.
fn latency_columns() -> Vec<Column> {
    vec![
        col("ok / sent", "successful / measured requests (final attempts)"),
        col("retries", "attempts after the first (never in the figures)"),
        col(format!("{} p50", TTFT.label), TTFT.definition),
        col(format!("{} p95", TTFT.label), TTFT.definition),
        col(format!("{} p50", TTFA.label), TTFA.definition),
        col(format!("{} p50", E2E.label), "send → end of stream"),
        col(format!("{} p95", E2E.label), "send → end of stream"),
        col(format!("{} p50", TPOT.label), TPOT.definition),
        col(format!("{} p50", ITL.label), ITL.definition),
        col(format!("{} p99", ITL.label), ITL.definition),
        col(format!("{} p50", ICL.label), ICL.definition),
        col(
            "client queue p99",
            "wait inside bakeoff before the send (not in TTFT or E2E)",
        ),
    ]
}

/// The speed table's columns, each with its caliber; goodput and SLO attainment with an SLO.
fn speed_columns(slo: Option<&str>) -> Vec<Column> {
    let mut speed_columns = vec![
        col(format!("{} p50", DECODE_PER_STREAM.label), DECODE_PER_STREAM.definition),
        col(format!("{} p50", E2E_PER_STREAM.label), E2E_PER_STREAM.definition),
        col(
            "o200k e2e tok/s/stream p50",
            "canonical o200k tokens / E2E, per request",
        ),
        col(
            "chars/s/stream p50",
            "generated characters (answer + reasoning) / E2E, per request",
        ),
        col(
            "aggregate tok/s @ level, steady window (min–max of repetitions)",
            format!(
                "{}; with two repetitions or more, the lowest and highest repetition (a spread, not a confidence interval)",
                AGGREGATE.definition
            ),
        ),
        col("aggregate tok/s @ level, whole run", AGGREGATE_WHOLE_RUN.definition),
        col(
            "aggregate o200k tok/s",
            "canonical o200k tokens in the measured window / its length",
        ),
        col(
            "aggregate chars/s",
            "generated characters in the measured window / its length",
        ),
        col(
            "req/s",
            "successful requests ending in the measured window / its length",
        ),
    ];
    if let Some(s) = slo {
        speed_columns.push(col(
            "goodput req/s",
            format!(
                "{}: successful requests meeting {s}, ending in the window / its length",
                REQUEST_THROUGHPUT.name
            ),
        ));
        speed_columns.push(col(
            "goodput tok/s",
            format!("output tokens of the requests counted by goodput req/s, per second of the window ({s})"),
        ));
        speed_columns.push(col(
            "SLO attainment [95 % Wilson]",
            format!(
                "share of the level's requests meeting {s}; failed requests count as misses, warm-ups are not counted"
            ),
        ));
    }
    speed_columns.push(col("output tokens from", "where each request's token count came from"));
    speed_columns
}

/// The prompt-cache table's columns, each with its caliber (`prompt_cache::COUNTING_RULE`).
fn cache_columns() -> Vec<Column> {
    vec![
        col(
            "token hit rate",
            "Σ cached (read) prompt tokens / Σ whole prompt tokens; Anthropic: whole = input + cache read + cache creation",
        ),
        col(
            "requests with a hit",
            "requests with any cached token / requests whose usage reported the cache",
        ),
        col("cached (read) tokens", "Σ over the level"),
        col(
            "cache-write tokens",
            "Σ written to the cache (Anthropic cache_creation_input_tokens)",
        ),
        col("uncached tokens", "Σ whole prompt − read − written"),
        col(
            format!("cold {} p50 / p95 (n)", TTFT.label),
            "requests with no cached token",
        ),
        col(
            format!("warm {} p50 / p95 (n)", TTFT.label),
            "requests with some cached tokens",
        ),
    ]
}

/// One level's prompt-cache cells: "not reported by the server" (never 0 %) without cache
/// fields in the usage.
pub fn cache_cells(c: &crate::domain::prompt_cache::CacheFigures) -> Vec<String> {
    use crate::domain::prompt_cache::{NOT_REPORTED, rate_text};
    if c.reported == 0 {
        return vec![NOT_REPORTED.to_string(); 7];
    }
    let ttft = |d: &Option<Distribution>| match d {
        Some(d) => format!(
            "{} / {} ms (n={})",
            format::significant(d.p50),
            format::significant(d.p95),
            d.n
        ),
        None => "— (n=0)".to_string(),
    };
    let uncached = c.prompt_tokens.saturating_sub(c.read_tokens + c.creation_tokens);
    vec![
        rate_text(c.token_hit_rate()),
        format!(
            "{} ({} of {})",
            rate_text(c.hit_request_share()),
            c.requests_with_hit,
            c.reported
        ),
        c.read_tokens.to_string(),
        c.creation_tokens.to_string(),
        uncached.to_string(),
        ttft(&c.ttft_cold_ms),
        ttft(&c.ttft_warm_ms),
    ]
}

/// What a level's row cannot say: its segments, a window too short for a steady state, its
/// failures by class.
fn level_notes(name: &str, l: &LevelFigures) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(segments) = segments_text(l) {
        notes.push(format!(
            "{name} at {}{}: {segments}",
            l.load.label(),
            prompt_suffix(l.prompt_tokens)
        ));
    }
    if let Some(w) = l.repetitions.iter().find_map(|r| r.window.filter(|w| !w.steady)) {
        notes.push(format!(
            "{name} at {}{}: too few requests for a steady state; aggregates use the whole {} s span from first send to last end",
            l.load.label(),
            prompt_suffix(l.prompt_tokens),
            format::significant(w.secs())
        ));
    }
    if !l.errors.is_empty() {
        let errors: Vec<String> = l.errors.iter().map(|(k, v)| format!("{k} × {v}")).collect();
        notes.push(format!(
            "{name} at {}{}: failed requests by class: {}",
            l.load.label(),
            prompt_suffix(l.prompt_tokens),
            errors.join(", ")
        ));
    }
    notes
}

/// How a sweep's knee is found, in words (None: not a sweep).
fn knee_rule(config: &RunConfig) -> Option<String> {
    match config.load {
        LoadShape::Sweep {
            ttft_factor, min_gain, ..
        } => Some(format!(
            "The knee is the highest concurrency whose p95 TTFT stays within {}× the p95 TTFT at c=1, \
             and up to which aggregate tok/s still grows by at least {} % from one level to the next; \
             the first level where either fails ends the search (rule `ttft` or `throughput`; `none`: \
             neither happened up to the highest level).",
            format::at_most_decimals(ttft_factor, 2),
            format::at_most_decimals(min_gain * 100.0, 2)
        )),
        _ => None,
    }
}

/// Throughput and latency vs concurrency from the same level figures as the tables (one curve
/// per candidate and prompt bin), drawn by the scorecard's chart functions; none for a rate run.
fn load_charts(config: &RunConfig, candidate_ids: &[i64], figures: &[(String, RunFigures)]) -> Vec<Chart> {
    if !matches!(config.load, LoadShape::Sweep { .. } | LoadShape::Levels { .. }) {
        return Vec::new();
    }
    let mut series = Vec::new();
    for (&id, (name, f)) in candidate_ids.iter().zip(figures) {
        series.extend(ThroughputSeries::by_prompt_size(id, name, &f.levels, &f.knees));
    }
    [charts::throughput_chart(&series), charts::latency_chart(&series)]
        .into_iter()
        .flatten()
        .collect()
}

/// "measured in 2 segments; 41 s of downtime excluded" for a level of a resumed run.
pub fn segments_text(l: &LevelFigures) -> Option<String> {
    resumed_text(l.segments, l.downtime_s)
}

/// What every page says of figures measured in `segments` > 1 segments (a resumed run).
pub fn resumed_text(segments: u32, downtime_s: f64) -> Option<String> {
    (segments > 1).then(|| {
        format!(
            "measured in {segments} segments (the run was resumed); {} s of downtime excluded from every aggregate",
            format::significant(downtime_s)
        )
    })
}

fn prompt_text(bin: Option<u32>) -> String {
    bin.map_or(NOT_MEASURED.into(), |b| format!("{b} tokens"))
}

fn prompt_suffix(bin: Option<u32>) -> String {
    bin.map_or(String::new(), |b| format!(" · {b}-token prompts"))
}

fn dist_ms(d: &Option<Distribution>, f: fn(&Distribution) -> f64) -> String {
    d.as_ref()
        .map_or(NOT_MEASURED.into(), |d| format!("{} ms", format::significant(f(d))))
}

fn dist_rate(d: &Option<Distribution>, unit: &str) -> String {
    d.as_ref().map_or(NOT_MEASURED.into(), |d| {
        format!("{} {unit}", format::significant(d.p50))
    })
}

fn rate(v: Option<f64>, unit: &str) -> String {
    v.map_or(NOT_MEASURED.into(), |v| format!("{} {unit}", format::significant(v)))
}

/// What a decode figure of a non-streamed run reads: every token arrived at once, so there
/// is nothing between the first token and the last to time (never 0 ms from zero samples).
pub const NOT_STREAMED: &str = "not measured (not streamed)";

fn decode_ms(d: &Option<Distribution>, f: fn(&Distribution) -> f64, streamed: bool) -> String {
    match d {
        None if !streamed => NOT_STREAMED.into(),
        _ => dist_ms(d, f),
    }
}

fn latency_cells(l: &LevelFigures, streamed: bool) -> Vec<String> {
    vec![
        format!("{}/{}", l.succeeded, l.requests),
        l.retries.to_string(),
        dist_ms(&l.ttft_ms, |d| d.p50),
        dist_ms(&l.ttft_ms, |d| d.p95),
        dist_ms(&l.ttfa_ms, |d| d.p50),
        dist_ms(&l.e2e_ms, |d| d.p50),
        dist_ms(&l.e2e_ms, |d| d.p95),
        decode_ms(&l.tpot_ms, |d| d.p50, streamed),
        decode_ms(&l.itl_ms, |d| d.p50, streamed),
        decode_ms(&l.itl_ms, |d| d.p99, streamed),
        decode_ms(&l.icl_ms, |d| d.p50, streamed),
        dist_ms(&l.client_queue_ms, |d| d.p99),
    ]
}

/// Why a level's token rates are not figures, if they are not: requests succeeded, yet no
/// output token was counted in the window (0 tok/s beside a request rate would read as a
/// measured standstill).
fn token_floor(l: &LevelFigures) -> Option<String> {
    (l.succeeded > 0 && l.aggregate_tok_s.is_some_and(|v| v == 0.0))
        .then(|| "not measured: no output token was counted in the window".to_string())
}

fn speed_cells(l: &LevelFigures, slo: bool, streamed: bool) -> Vec<String> {
    let token_floor = token_floor(l);
    let token_rate = |v: Option<f64>, unit: &str| token_floor.clone().unwrap_or_else(|| rate(v, unit));
    let aggregate = match (l.aggregate_tok_s, l.aggregate_tok_s_spread) {
        _ if token_floor.is_some() => token_floor.clone().unwrap_or_default(),
        (Some(v), Some(s)) => format!(
            "{} tok/s (min–max of {} repetitions: {} – {})",
            format::significant(v),
            s.repetitions,
            format::significant(s.min),
            format::significant(s.max)
        ),
        (Some(v), None) => format!("{} tok/s", format::significant(v)),
        _ => NOT_MEASURED.into(),
    };
    let decode = match &l.decode_tok_s_per_stream {
        None if !streamed => NOT_STREAMED.into(),
        d => dist_rate(d, "tok/s"),
    };
    let mut cells = vec![
        decode,
        dist_rate(&l.e2e_tok_s_per_stream, "tok/s"),
        dist_rate(&l.canonical_e2e_tok_s_per_stream, "tok/s"),
        dist_rate(&l.chars_per_s_per_stream, "chars/s"),
        aggregate,
        rate(l.whole_run_tok_s, "tok/s"),
        token_rate(l.aggregate_canonical_tok_s, "tok/s"),
        token_rate(l.aggregate_chars_per_s, "chars/s"),
        rate(l.req_per_s, "req/s"),
    ];
    if slo {
        cells.push(rate(l.goodput_req_per_s, "req/s"));
        cells.push(token_rate(l.goodput_tok_s, "tok/s"));
        cells.push(match (l.slo_attainment, l.slo_attainment_interval) {
            (Some(a), Some(i)) => format!(
                "{:.1} % [{:.1}–{:.1}] ({} of {})",
                a * 100.0,
                i.lo * 100.0,
                i.hi * 100.0,
                l.slo_met,
                l.requests
            ),
            _ => NOT_MEASURED.into(),
        });
    }
    cells.push(if l.token_sources.is_empty() {
        NOT_MEASURED.into()
    } else {
        crate::domain::calibers::token_caliber(&l.token_sources, &l.chunk_attribution, l.succeeded)
    });
    cells
}

// --------------------------------------------------------------------------- quality

/// Most labels a confusion matrix is drawn for (free-text "labels" can be unbounded).
pub const MATRIX_LABELS: usize = 30;
/// Most rows of per-label and per-field tables.
pub const REPORT_ROWS: usize = 60;
/// Failing reasons shown per grader.
const REASON_SAMPLES: usize = 3;

/// One candidate's quality, from the grades of its measured, successful answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QualityView {
    pub candidate: String,
    /// Graded answers (successful measured requests with at least one grade).
    pub graded: u64,
    /// Measured requests that failed with an error (not graded, not in these figures).
    pub failed: u64,
    pub graders: Vec<GraderRow>,
    pub classification: Option<ClassificationView>,
    pub fields: Option<FieldsView>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GraderRow {
    pub grader: String,
    pub passed: u64,
    pub graded: u64,
    /// `92.0 %`.
    pub rate: String,
    /// Up to three failing reasons with their case: `c3: predicted "x", expected "y"`.
    pub failures: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassificationView {
    pub cases: u64,
    pub accuracy: String,
    pub macro_f1: String,
    pub per_label: Vec<LabelRow>,
    pub labels_left_out: usize,
    /// Distinct labels expected or predicted.
    pub label_count: usize,
    /// None when there are more than [`MATRIX_LABELS`] labels.
    pub matrix: Option<Matrix>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabelRow {
    pub label: String,
    pub support: u64,
    pub precision: String,
    pub recall: String,
    pub f1: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatrixCell {
    pub predicted: String,
    pub count: u64,
    /// Predicted = expected.
    pub diagonal: bool,
}

/// `rows[i].cells[j]`: answers expected `labels[i]` and predicted `labels[j]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Matrix {
    pub labels: Vec<String>,
    pub rows: Vec<MatrixRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatrixRow {
    pub expected: String,
    pub cells: Vec<MatrixCell>,
    /// Answers naming no label (or several).
    pub no_label: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FieldsView {
    pub records: u64,
    /// `40.0 % (8 of 20)`.
    pub exact: String,
    pub fields: Vec<FieldRow>,
    pub fields_left_out: usize,
    /// All fields pooled (micro-averaged).
    pub all: FieldRow,
    /// Answers without usable JSON (their fields counted wrong) and answers repaired (`lenient`).
    #[serde(default)]
    pub unusable: u64,
    #[serde(default)]
    pub repaired: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FieldRow {
    pub field: String,
    pub precision: String,
    pub recall: String,
    pub f1: String,
    pub correct: u64,
    pub wrong: u64,
    pub missing: u64,
    pub extra: u64,
}

fn ratio(v: f64) -> String {
    format!("{v:.3}")
}

fn field_row(s: &FieldStats) -> FieldRow {
    FieldRow {
        field: s.field.clone(),
        precision: ratio(s.precision),
        recall: ratio(s.recall),
        f1: ratio(s.f1),
        correct: s.counts.correct,
        wrong: s.counts.wrong,
        missing: s.counts.missing,
        extra: s.counts.extra,
    }
}

/// Quality per candidate in run order. Only measured requests of the run's measured phase
/// count (warm-ups and the staged rollout's requests are left out); answers graded by no
/// grader are left out too.
/// One candidate's quality section, from its records.
pub fn candidate_quality(run: &Run, name: String, records: &[RequestRecord], candidate_id: i64) -> QualityView {
    let phase = run.config.measured_phase();
    let mine = records
        .iter()
        .filter(|r| r.candidate_id == candidate_id && !r.is_warmup && r.phase == phase);
    quality_of(name, mine, run.config.retries)
}

/// The quality sections of every candidate; none before anything was measured.
pub fn quality_views(views: Vec<QualityView>) -> Vec<QualityView> {
    if views.iter().all(|q| q.graded == 0 && q.failed == 0) {
        return Vec::new();
    }
    views
}

fn quality_of<'a>(
    candidate: String,
    records: impl Iterator<Item = &'a RequestRecord>,
    retries_allowed: u32,
) -> QualityView {
    let mut graded = 0u64;
    let mut failed = 0u64;
    // Grader name → (passed, graded, failing reasons sampled, each with how often it recurred).
    type Reasons = Vec<(String, usize)>;
    let mut graders: BTreeMap<String, (u64, u64, Reasons)> = BTreeMap::new();
    let mut pairs: Vec<(String, Option<String>)> = Vec::new();
    let mut details: Vec<FieldsDetail> = Vec::new();
    for r in records {
        if !r.succeeded() {
            // A failure that will be retried is not the request's outcome.
            let retried = r.attempt < retries_allowed && r.error_class.is_some_and(|c| c.is_retryable());
            if !retried {
                failed += 1;
            }
            continue;
        }
        if r.grades.is_empty() {
            continue;
        }
        graded += 1;
        for g in &r.grades {
            let entry = graders.entry(g.grader.to_string()).or_default();
            entry.1 += 1;
            if g.passed {
                entry.0 += 1;
            } else {
                // A case failing the same way on every repetition is one reason, counted.
                let reason = format!("{}: {}", r.case_id, truncate(&g.reason, 160));
                let samples = &mut entry.2;
                match samples.iter().position(|(seen, _)| *seen == reason) {
                    Some(i) => samples[i].1 += 1,
                    None if samples.len() < REASON_SAMPLES => samples.push((reason, 1)),
                    None => {}
                }
            }
            if let Some(pair) = label_pair(g) {
                pairs.push(pair);
            }
            if let Some(d) = FieldsDetail::from_grade(g) {
                details.push(d);
            }
        }
    }
    let graders = graders
        .into_iter()
        .map(|(grader, (passed, n, failures))| GraderRow {
            grader,
            passed,
            graded: n,
            rate: if n > 0 {
                format!("{:.1} %", passed as f64 / n as f64 * 100.0)
            } else {
                NOT_MEASURED.into()
            },
            failures: failures
                .into_iter()
                .map(|(reason, count)| {
                    if count > 1 {
                        format!("{reason} (×{count})")
                    } else {
                        reason
                    }
                })
                .collect(),
        })
        .collect();
    QualityView {
        candidate,
        graded,
        failed,
        graders,
        classification: (!pairs.is_empty()).then(|| classification_view(&pairs)),
        fields: (!details.is_empty()).then(|| fields_view(&field_report(&details))),
    }
}

fn classification_view(pairs: &[(String, Option<String>)]) -> ClassificationView {
    let r = classification_report(pairs);
    let per_label: Vec<LabelRow> = r
        .per_label
        .iter()
        .take(REPORT_ROWS)
        .map(|s| LabelRow {
            label: s.label.clone(),
            support: s.support,
            precision: ratio(s.precision),
            recall: ratio(s.recall),
            f1: ratio(s.f1),
        })
        .collect();
    let matrix = (r.labels.len() <= MATRIX_LABELS).then(|| Matrix {
        labels: r.labels.clone(),
        rows: r
            .labels
            .iter()
            .zip(r.confusion.iter().zip(&r.no_label))
            .map(|(label, (cells, &no_label))| MatrixRow {
                expected: label.clone(),
                cells: r
                    .labels
                    .iter()
                    .zip(cells)
                    .map(|(predicted, &count)| MatrixCell {
                        predicted: predicted.clone(),
                        count,
                        diagonal: predicted == label,
                    })
                    .collect(),
                no_label,
            })
            .collect(),
    });
    ClassificationView {
        cases: r.cases,
        accuracy: format!("{:.1} % (n={})", r.accuracy * 100.0, r.cases),
        macro_f1: ratio(r.macro_f1),
        labels_left_out: r.per_label.len().saturating_sub(REPORT_ROWS),
        label_count: r.labels.len(),
        per_label,
        matrix,
    }
}

fn fields_view(r: &FieldReport) -> FieldsView {
    FieldsView {
        records: r.records,
        exact: match r.exact_rate() {
            Some(rate) => format!("{:.1} % ({} of {})", rate * 100.0, r.exact_records, r.records),
            None => NOT_MEASURED.into(),
        },
        fields: r.fields.iter().take(REPORT_ROWS).map(field_row).collect(),
        fields_left_out: r.fields.len().saturating_sub(REPORT_ROWS),
        all: field_row(&r.micro),
        unusable: r.unusable_records,
        repaired: r.repaired_records,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::grading::Grade;
    use crate::domain::run::RecordTexts;
    use crate::domain::run::RequestRecord;

    fn graded(case: &str, grades: Vec<Grade>) -> RequestRecord {
        RequestRecord {
            headers_us: Some(1).into(),
            first_chunk_us: Some(2).into(),
            first_content_us: Some(2).into(),
            last_token_us: Some(3).into(),
            end_us: Some(4).into(),
            chunks: vec![(2, 1)].into(),
            output_tokens: Some(1),
            output_chars: 1,
            texts: RecordTexts {
                output: "x".into(),
                ..Default::default()
            }
            .into(),
            grades,
            ..RequestRecord::test_quality(case)
        }
    }

    fn label(expected: &str, predicted: Option<&str>) -> Grade {
        Grade {
            grader: "label".into(),
            score: f64::from(u8::from(predicted == Some(expected))),
            passed: predicted == Some(expected),
            reason: format!("predicted {predicted:?}"),
            detail: Some(Box::new(
                serde_json::json!({"expected": expected, "predicted": predicted}),
            )),
            weight: 1.0,
            required: true,
        }
    }

    /// Issue 54, defect 3: a short run showed "0 tok/s" beside "9.26 req/s" from the same window.
    /// When requests succeeded yet no output token was counted, every token rate says why it is
    /// not a figure; the request rate stays a figure.
    #[test]
    fn no_token_counted_reads_not_measured_never_0_tok_s_beside_a_request_rate() {
        let records: Vec<RequestRecord> = ["a", "b", "c"].iter().map(|c| graded(c, vec![])).collect();
        let figures = crate::domain::calibers::run_figures(&records, &RunConfig::default(), 1, |_| None);
        let mut level = figures.levels.into_iter().next().expect("a level");
        assert!(level.succeeded > 0);
        level.aggregate_tok_s = Some(0.0);
        level.aggregate_canonical_tok_s = Some(0.0);
        level.aggregate_chars_per_s = Some(0.0);
        level.req_per_s = Some(9.26);
        let cells = speed_cells(&level, false, true);
        assert!(
            !cells
                .iter()
                .any(|c| c.starts_with("0 tok/s") || c.starts_with("0 chars/s")),
            "{cells:?}"
        );
        assert!(
            cells.contains(&"not measured: no output token was counted in the window".to_string()),
            "{cells:?}"
        );
        assert!(cells.contains(&"9.26 req/s".to_string()), "{cells:?}");
    }

    #[test]
    fn classification_counts_by_hand() {
        let records = [
            graded("a", vec![label("cat", Some("cat"))]),
            graded("b", vec![label("cat", Some("dog"))]),
            graded("c", vec![label("dog", Some("dog"))]),
            graded("d", vec![label("dog", None)]),
        ];
        let q = quality_of("m".into(), records.iter(), 0);
        assert_eq!((q.graded, q.failed), (4, 0));
        let c = q.classification.unwrap();
        assert_eq!(c.accuracy, "50.0 % (n=4)");
        let m = c.matrix.unwrap();
        assert_eq!(m.labels, ["cat", "dog"]);
        let counts = |i: usize| m.rows[i].cells.iter().map(|c| c.count).collect::<Vec<_>>();
        assert_eq!(counts(0), [1, 1]);
        assert_eq!((counts(1), m.rows[1].no_label), (vec![0, 1], 1));
        assert!(m.rows[1].cells[1].diagonal && !m.rows[1].cells[0].diagonal);
        // cat: P 1/1, R 1/2; dog: P 1/2, R 1/2.
        assert_eq!(
            (c.per_label[0].precision.as_str(), c.per_label[0].recall.as_str()),
            ("1.000", "0.500")
        );
        assert_eq!(q.graders[0].rate, "50.0 %");
        assert_eq!(q.graders[0].failures.len(), 2);
        assert!(q.graders[0].failures[0].starts_with("b: "));
    }
}
