//! Measured values for catalog metrics, computed from one candidate's raw records, each with its
//! interval, sample size and the conditions it was measured under.
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::intervals::{MIN_BOOTSTRAP_N, bootstrap, bootstrap_items, quantile, wilson};
use crate::calibers::{
    ConcurrencyLevels, LevelFigures, ReadAfterSealing, ReadWhole, RequestFigures, figures_at_concurrency,
};
use crate::cost::CostSummary;
use crate::grading::case_passed;
use crate::operability::{ChecklistAnswers, ProbeReport, operability_metric};
use crate::paired::CaseResults;
use crate::run::{ErrorClass, Phase, RecordGroup, RequestRecord, TokenSource, last_attempts};
use crate::stability::StabilityOptions;
use crate::stability::soak::soak_analysis;
use crate::thresholds::key::MetricKey;
use crate::thresholds::units::{Dimension, Uncertainty};

/// Each level's figures ([`CandidateRecords::level_at`]) fed while one candidate's records are
/// read, before their chunk times are let go (a big run's end step). Level figures take final
/// attempts only: a success is always its request's last attempt (only failures are retried), so
/// successes are fed as they are read; a failure is held until a later attempt of its request
/// is read, and the failures left when the read ends are the final ones. A failure gives no
/// figure a chunk time: held, it costs only itself, and failures are few.
/// [`CandidateRecords::with_levels`] checks that the attempts fed were the final ones.
pub struct LevelsFold {
    candidate_id: i64,
    levels: ConcurrencyLevels,
    /// Successes sent in the same microsecond as the last one read, held until a later one is:
    /// fed in `send_order`, as `level_at` adds the final attempts, so that every figure summed
    /// over them adds in the same order and comes out the same to the last bit.
    tied: Vec<RequestRecord>,
    /// The last failed attempt of each request whose last attempt read so far failed.
    failures: HashMap<AttemptKey, RequestRecord>,
    successes: usize,
    /// When sealing: the records left to read of each (concurrency, repetition), and those read
    /// whole, sealed once their tied successes were fed.
    whole: Option<ReadWhole<(u32, u32)>>,
    to_seal: Vec<(u32, u32)>,
}

/// A request of a candidate, as `CandidateRecords` keys its final attempts.
type AttemptKey = (std::sync::Arc<str>, u32, Phase, u32);

fn attempt_key(r: &RequestRecord) -> AttemptKey {
    (r.case_id.clone(), r.repetition, r.phase, r.concurrency)
}

/// Level figures from the final attempts a [`LevelsFold`] was fed, and how many it took.
pub struct FedLevels {
    figures: BTreeMap<u32, LevelFigures>,
    successes: usize,
    failures: usize,
}

impl LevelsFold {
    /// `resumes` as the records' `CandidateRecords` will be given them.
    pub fn new(candidate_id: i64, resumes: &[i64]) -> Self {
        LevelsFold {
            candidate_id,
            levels: ConcurrencyLevels::new(resumes),
            tied: Vec::new(),
            failures: HashMap::new(),
            successes: 0,
            whole: None,
            to_seal: Vec::new(),
        }
    }

    /// Fed every record of the candidate `groups` counts: each repetition's passes are sealed
    /// once its last record was fed (see [`ConcurrencyLevels::seal`]), so the figures' timelines
    /// no longer grow with the run's length.
    pub fn sealing(mut self, groups: &[RecordGroup]) -> Self {
        self.whole = Some(ReadWhole::new(self.candidate_id, groups, ConcurrencyLevels::pass_of));
        self
    }

    /// Adds one record read, in the store's order (send time, then id).
    pub fn add(&mut self, r: &RequestRecord) {
        let read_whole = self.whole.as_mut().and_then(|w| w.read(r));
        self.take(r);
        // Sealed after `r` itself is fed, with the successes tied to it.
        self.to_seal.extend(read_whole);
    }

    fn take(&mut self, r: &RequestRecord) {
        if r.candidate_id != self.candidate_id || !ConcurrencyLevels::takes(r) {
            return;
        }
        // Only a retry (a later attempt) ends a failure's claim to be final.
        if r.attempt > 0 || !r.succeeded() {
            let key = attempt_key(r);
            let later = self.failures.get(&key).is_none_or(|held| held.attempt < r.attempt);
            if !r.succeeded() {
                if later {
                    self.failures.insert(key, r.clone());
                }
                return;
            }
            if later {
                self.failures.remove(&key);
            }
        }
        if self.tied.first().is_some_and(|t| t.sent_at_us != r.sent_at_us) {
            self.feed_tied();
        }
        self.tied.push(r.clone());
        self.successes += 1;
    }

    fn feed_tied(&mut self) {
        self.tied.sort_by(crate::run::send_order);
        for r in self.tied.drain(..) {
            self.levels.add(&r);
        }
        for pass in self.to_seal.drain(..) {
            self.levels.seal(pass);
        }
    }

    /// Timeline bins held (what sealing lets go).
    #[cfg(test)]
    pub(crate) fn bins_held(&self) -> usize {
        self.levels.bins_held()
    }

    /// Once every record was read: the figures, their chunk-time bins let go.
    pub fn finish(mut self) -> Result<FedLevels, ReadAfterSealing> {
        self.feed_tied();
        let failures = self.failures.len();
        for r in self.failures.values() {
            self.levels.add(r);
        }
        if self.levels.read_after_sealing() {
            return Err(ReadAfterSealing);
        }
        Ok(FedLevels {
            figures: self.levels.finish(),
            successes: self.successes,
            failures,
        })
    }
}

/// The attempts a [`LevelsFold`] was fed were not a candidate's final attempts: a success was
/// followed by another attempt of its request, or a retry was read before the failure it
/// followed. No run executes either; the figures must then be computed from the records whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the attempts fed to the level figures as they were read were not the final attempts")]
pub struct NotFinalAttempts;

/// What the sample size of a measurement counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleUnit {
    Cases,
    Requests,
    Attempts,
    /// Blind comparisons that were not a tie.
    Comparisons,
    /// Cases an LLM judge compared in both orders whose verdicts were not a tie on balance.
    JudgedCases,
}

impl SampleUnit {
    /// The unit's noun for `n` of it: "1 request", "2 requests", "1 decided comparison".
    pub fn noun(&self, n: u64) -> &'static str {
        if n != 1 {
            return self.as_str();
        }
        match self {
            SampleUnit::Cases => "case",
            SampleUnit::Requests => "request",
            SampleUnit::Attempts => "attempt",
            SampleUnit::Comparisons => "decided comparison",
            SampleUnit::JudgedCases => "decided case (judged both ways)",
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            SampleUnit::Cases => "cases",
            SampleUnit::Requests => "requests",
            SampleUnit::Attempts => "attempts",
            SampleUnit::Comparisons => "decided comparisons",
            SampleUnit::JudgedCases => "decided cases (judged both ways)",
        }
    }
}

/// One measured figure, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// None: not measured (see `missing`).
    pub value: Option<f64>,
    /// Two-sided 90 % interval; None for exact figures or when too few observations exist.
    pub interval: Option<(f64, f64)>,
    pub uncertainty: Uncertainty,
    /// Observations the figure is computed from (effective cases for weighted proportions).
    pub n: f64,
    pub unit: SampleUnit,
    /// Load condition of the figure (None: the whole run).
    pub concurrency: Option<u32>,
    /// Why the figure is missing.
    pub missing: Option<String>,
}

impl Measurement {
    pub(crate) fn missing(why: impl Into<String>, uncertainty: Uncertainty, concurrency: Option<u32>) -> Measurement {
        Measurement {
            value: None,
            interval: None,
            uncertainty,
            n: 0.0,
            unit: SampleUnit::Requests,
            concurrency,
            missing: Some(why.into()),
        }
    }

    /// `@c=4 · n=20 requests`, `n=20 cases`; a weighted sample's effective size is said as such
    /// (`n≈4.5 cases (effective, weighted)`), never as if half a case had been run.
    pub fn conditions(&self) -> String {
        let n = if (self.n - self.n.round()).abs() < 1e-9 {
            format!("n={} {}", self.n.round() as i64, self.unit.as_str())
        } else {
            format!("n≈{:.1} {} (effective, weighted)", self.n, self.unit.as_str())
        };
        match self.concurrency {
            Some(c) => format!("@c={c} · {n}"),
            None => n,
        }
    }
}

/// One candidate's records prepared once for every rule.
#[derive(Default)]
pub struct CandidateRecords<'a> {
    pub candidate_id: i64,
    /// Measured attempts (warm-ups excluded), retries included.
    pub attempts: Vec<&'a RequestRecord>,
    /// The last attempt of every measured request.
    pub finals: Vec<&'a RequestRecord>,
    /// When the run was resumed (wall clock µs): aggregates are taken per segment.
    pub resumes: Vec<i64>,
    /// Each level's figures once computed: every latency and throughput rule of a level reads
    /// them, and each computation is a pass over all final attempts and their chunk times.
    levels: RefCell<BTreeMap<u32, Option<LevelFigures>>>,
}

impl<'a> CandidateRecords<'a> {
    pub fn new(candidate_id: i64, records: &'a [RequestRecord]) -> CandidateRecords<'a> {
        let attempts: Vec<&RequestRecord> = records
            .iter()
            .filter(|r| r.candidate_id == candidate_id && !r.is_warmup)
            .collect();
        let finals = last_attempts(attempts.iter().copied(), |r| {
            (r.case_id.as_ref(), r.repetition, r.phase.as_str(), r.concurrency)
        });
        CandidateRecords {
            candidate_id,
            attempts,
            finals,
            resumes: Vec::new(),
            levels: RefCell::default(),
        }
    }

    /// The run was resumed at these instants (see `calibers::resumes_of`).
    pub fn with_resumes(mut self, resumes: &[i64]) -> Self {
        self.resumes = resumes.to_vec();
        self.levels.get_mut().clear();
        self
    }

    /// The level figures at concurrency `c` (the one level computation the run page, its
    /// charts, exports and `measure` use too).
    pub fn level_at(&self, c: u32) -> Option<LevelFigures> {
        self.levels
            .borrow_mut()
            .entry(c)
            .or_insert_with(|| figures_at_concurrency(self.finals.iter().copied(), c, &self.resumes))
            .clone()
    }

    /// These records' level figures, fed them as they were read ([`LevelsFold`]):
    /// [`CandidateRecords::level_at`] then reads them, not the records' chunk times (which the
    /// reader may have let go). Fails when the attempts fed were not these records' final ones.
    pub fn with_levels(mut self, fed: FedLevels) -> Result<Self, NotFinalAttempts> {
        let (mut successes, mut failures) = (0, 0);
        for r in self.finals.iter().filter(|r| ConcurrencyLevels::takes(r)) {
            *if r.succeeded() { &mut successes } else { &mut failures } += 1;
        }
        // Every success and every final failure was fed, and each final attempt is one of them:
        // as many of each means the very same attempts.
        if (successes, failures) != (fed.successes, fed.failures) {
            return Err(NotFinalAttempts);
        }
        let mut figures = fed.figures;
        let known: BTreeMap<u32, Option<LevelFigures>> = self
            .concurrencies()
            .into_iter()
            .map(|c| (c, figures.remove(&c)))
            .collect();
        *self.levels.get_mut() = known;
        Ok(self)
    }

    /// Final attempts at concurrency `c`.
    pub fn finals_at(&self, c: u32) -> Vec<&'a RequestRecord> {
        self.finals.iter().copied().filter(|r| r.concurrency == c).collect()
    }

    /// Every concurrency level measured, ascending.
    pub fn concurrencies(&self) -> Vec<u32> {
        // A set, not every final attempt's level sorted: a handful held, not one per request.
        let levels: std::collections::BTreeSet<u32> = self.finals.iter().map(|r| r.concurrency).collect();
        levels.into_iter().collect()
    }

    /// Per-case outcome: share of the case's final attempts that passed (failures count as
    /// wrong), for cases with at least one graded attempt.
    pub fn case_outcomes(&self) -> BTreeMap<&'a str, f64> {
        let mut per_case: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for r in &self.finals {
            let verdict = if r.succeeded() {
                case_passed(&r.grades)
            } else {
                Some(false)
            };
            if let Some(pass) = verdict {
                let e = per_case.entry(r.case_id.as_ref()).or_default();
                e.1 += 1.0;
                if pass {
                    e.0 += 1.0;
                }
            }
        }
        per_case.into_iter().map(|(k, (p, n))| (k, p / n)).collect()
    }

    /// Cases right on every graded attempt (for paired comparisons and cost per correct answer).
    pub fn correct_cases(&self) -> CaseResults {
        CaseResults::new(self.case_outcomes().into_iter().map(|(k, share)| (k, share >= 1.0)))
    }

    /// Final attempts that were graded as passing.
    pub fn correct_requests(&self) -> usize {
        self.finals
            .iter()
            .filter(|r| r.succeeded() && case_passed(&r.grades) == Some(true))
            .count()
    }
}

/// Steady-window aggregate tok/s at concurrency `c`: the level's figure.
pub fn aggregate_tok_s(data: &CandidateRecords<'_>, c: u32) -> Option<f64> {
    data.level_at(c)?.aggregate_tok_s
}

fn window_s(finals: &[&RequestRecord]) -> Option<f64> {
    let start = finals.iter().map(|r| r.sent_at_us).min()?;
    let end = finals.iter().map(|r| r.sent_at_us + r.last_heard_us()).max()?;
    (end > start).then(|| (end - start) as f64 / 1e6)
}

/// Time a request occupied a slot, in seconds (for the throughput bootstrap).
fn busy_s(r: &RequestRecord) -> f64 {
    r.last_heard_us() as f64 / 1e6
}

/// A windowed rate (tokens or completions per second) with a bootstrap interval.
///
/// Resampling requests cannot resample a time window, so the interval bootstraps the ratio
/// Σ amount / Σ busy time and scales it by the run's measured effective concurrency
/// (Σ busy / window), which reproduces the point value on the original sample.
fn windowed_rate(
    finals: &[&RequestRecord],
    amount: impl Fn(&RequestRecord) -> f64,
) -> (Option<f64>, Option<(f64, f64)>) {
    let Some(window) = window_s(finals) else {
        return (None, None);
    };
    // Held as pairs, 16 bytes a request: the bootstrap draws each request ~200 times at
    // random, and the pairs are read faster than the records they came from.
    let pairs: Vec<(f64, f64)> = finals.iter().map(|r| (amount(r), busy_s(r))).collect();
    let total: f64 = pairs.iter().map(|p| p.0).sum();
    let busy: f64 = pairs.iter().map(|p| p.1).sum();
    let value = total / window;
    if busy <= 0.0 {
        return (Some(value), None);
    }
    let effective_concurrency = busy / window;
    let interval = bootstrap_items(&pairs, |resample| {
        let (a, b) = resample.fold((0.0, 0.0), |acc, p| (acc.0 + p.0, acc.1 + p.1));
        if b > 0.0 {
            a / b * effective_concurrency
        } else {
            f64::NAN
        }
    });
    (Some(value), interval)
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

/// Per-request values of a latency or per-stream metric over successful requests.
fn per_request(base: &str, r: &RequestRecord) -> Option<f64> {
    // A conversation's ramp turns are in no speed figure (`conversation::RAMP_RULE`).
    if !r.succeeded() || r.in_ramp() {
        return None;
    }
    let tokens = r.output_tokens.map(f64::from);
    match base {
        b if b.starts_with("ttft_") => r.ttft_us().map(ms),
        b if b.starts_with("ttfa_") => r.first_content_us.get().map(ms),
        b if b.starts_with("e2e_p") => r.end_us.get().map(ms),
        b if b.starts_with("tpot_") => RequestFigures::of(r)?.tpot_ms,
        "decode_tok_s_p50" => RequestFigures::of(r)?.decode_tok_s,
        "e2e_tok_s_p50" => {
            let (t, end) = (tokens?, r.end_us.get()?);
            (end > 0).then(|| t / (end as f64 / 1e6))
        }
        _ => None,
    }
}

/// A latency or per-stream percentile of a level, as the run page shows it.
fn level_percentile(level: &LevelFigures, base: &str, q: f64) -> Option<f64> {
    let distribution = match base {
        b if b.starts_with("ttft_") => &level.ttft_ms,
        b if b.starts_with("ttfa_") => &level.ttfa_ms,
        b if b.starts_with("e2e_p") => &level.e2e_ms,
        b if b.starts_with("tpot_") => &level.tpot_ms,
        "decode_tok_s_p50" => &level.decode_tok_s_per_stream,
        "e2e_tok_s_p50" => &level.e2e_tok_s_per_stream,
        _ => return None,
    };
    let d = distribution.as_ref()?;
    Some(match q {
        q if q >= 0.99 => d.p99,
        q if q >= 0.95 => d.p95,
        q if q >= 0.9 => d.p90,
        _ => d.p50,
    })
}

/// The percentile a latency key names (`ttft_p95_ms` → 0.95); per-stream rates use the median.
fn quantile_of(base: &str) -> f64 {
    for (tag, q) in [("_p50", 0.5), ("_p90", 0.9), ("_p95", 0.95), ("_p99", 0.99)] {
        if base.contains(tag) {
            return q;
        }
    }
    0.5
}

pub(crate) fn proportion(successes: f64, n: f64, unit: SampleUnit, concurrency: Option<u32>) -> Measurement {
    Measurement {
        value: (n > 0.0).then(|| successes / n),
        interval: (n > 0.0).then(|| wilson(successes / n, n)).flatten(),
        uncertainty: Uncertainty::Proportion,
        n,
        unit,
        concurrency,
        missing: (n <= 0.0).then(|| "nothing to count".to_string()),
    }
}

fn sample_statistic(
    values: Vec<f64>,
    concurrency: Option<u32>,
    unit: SampleUnit,
    statistic: impl Fn(&mut [f64]) -> f64,
) -> Measurement {
    let value = Some(statistic(&mut values.clone())).filter(|v| v.is_finite());
    Measurement {
        value,
        interval: value.and_then(|_| bootstrap(&values, &statistic)),
        uncertainty: Uncertainty::Bootstrap,
        n: values.len() as f64,
        unit,
        concurrency,
        missing: None,
    }
}

/// What a candidate has beyond its run records: cost figures, and its latest endpoint probes
/// and readiness checklist (from its Operability page).
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras<'a> {
    pub cost: Option<&'a CostSummary>,
    pub probes: Option<&'a ProbeReport>,
    pub checklist: Option<&'a ChecklistAnswers>,
    /// GPU energy per output token by concurrency, from the run's telemetry.
    pub joules_per_output_token: Option<&'a [(u32, f64)]>,
    /// Capacity @ SLO and the cost there, from a find-capacity run.
    pub capacity: Option<&'a crate::capacity::CapacityEvidence>,
    /// The SLO `slo_attainment` judges requests against (the run's).
    pub slo: Option<&'a crate::run::Slo>,
}

/// Measures `key` for one candidate. `run_concurrency` is the load a rule without `@c=N` is
/// judged at; `weights` are the eval set's case weights.
pub fn measure(
    key: &MetricKey,
    data: &CandidateRecords<'_>,
    run_concurrency: u32,
    weights: &HashMap<String, f64>,
    extras: &Extras<'_>,
) -> Measurement {
    let cost = extras.cost;
    let def = key.def();
    if let Some(why) = def.not_measured_yet {
        return Measurement::missing(format!("not measured yet: {why}"), def.uncertainty, None);
    }
    if super::preference::is_preference_metric(def.base) {
        // Not from one candidate's records: the scorecard reads the run's comparisons.
        return Measurement::missing(
            "measured from the run's blind comparisons against the incumbent",
            def.uncertainty,
            None,
        );
    }
    if matches!(
        def.base,
        "capacity_at_slo"
            | "capacity_at_slo_users"
            | "cost_per_1k_answers_at_capacity"
            | "cost_per_1k_correct_at_capacity"
    ) {
        // From the run's capacity searches, not from one level's records.
        return capacity_figure(def.base, extras.capacity);
    }
    let c = def.per_load.then(|| key.concurrency.unwrap_or(run_concurrency));
    // Borrowed when they are all of the candidate's (one level): not a copy of each pointer.
    let finals: std::borrow::Cow<'_, [&RequestRecord]> = match c {
        Some(c) if data.finals.iter().any(|r| r.concurrency != c) => data.finals_at(c).into(),
        _ => data.finals.as_slice().into(),
    };
    if finals.is_empty() && def.uncertainty != Uncertainty::Exact && def.dimension != Dimension::Operability {
        let why = match c {
            Some(c) if !data.finals.is_empty() => format!("not measured at c={c}"),
            _ => "no measured requests yet".to_string(),
        };
        return Measurement::missing(why, def.uncertainty, c);
    }
    let mut m = match key.base {
        "aggregate_tok_s" => aggregate_measurement(data, &finals, c),
        "request_throughput" => {
            let (value, interval) = windowed_rate(&finals, |r| if r.succeeded() { 1.0 } else { 0.0 });
            Measurement {
                value,
                interval,
                uncertainty: Uncertainty::Bootstrap,
                n: finals.len() as f64,
                unit: SampleUnit::Requests,
                concurrency: c,
                missing: None,
            }
        }
        "prefix_cache_hit_rate" => prefix_cache_hit_rate(&finals, c),
        "warm_ttft_p95_ms" => warm_ttft_p95(data, &finals, c),
        base if base.ends_with("_ms") || base.ends_with("_tok_s_p50") => latency_percentile(data, base, &finals, c),
        "e2e_cv" => e2e_cv(&finals, c),
        "accuracy" | "pass_rate" => case_share(key, data, weights),
        "grader_score" => grader_score(key, &finals),
        "tool_call_accuracy" | "tool_argument_f1" | "malformed_call_rate" | "abstention_error_rate" => {
            tool_figure(key.base, &finals, c)
        }
        "turn_ttft_p95" | "conversation_pass_rate" | "last_turn_accuracy" => conversation_figure(key, &finals, c),
        "schema_valid_rate" => crate::tool_calls::structured::schema_valid_rate(&finals, c),
        "slo_attainment" => match extras.slo.filter(|s| s.is_set()) {
            None => Measurement::missing(
                "the run set no SLO limit (TTFT, TTFA, TPOT or E2E)",
                Uncertainty::Proportion,
                c,
            ),
            Some(slo) => {
                // Failed requests count as misses (docs/capacity.md, "Counting rules"); a
                // conversation's ramp turns are not counted (`conversation::RAMP_RULE`).
                let counted: Vec<&&RequestRecord> = finals.iter().filter(|r| !r.in_ramp()).collect();
                let met = counted
                    .iter()
                    .filter(|r| crate::calibers::RequestFigures::of(r).is_some_and(|f| f.meets(slo)))
                    .count();
                proportion(met as f64, counted.len() as f64, SampleUnit::Requests, c)
            }
        },
        "failure_rate" => {
            let class: Option<ErrorClass> = key.error_class();
            let failed = finals
                .iter()
                .filter(|r| match (class, r.error_class) {
                    (_, None) => false,
                    (None, Some(_)) => true,
                    (Some(want), Some(got)) => want == got,
                })
                .count();
            proportion(failed as f64, finals.len() as f64, SampleUnit::Requests, c)
        }
        "retry_share" => {
            let retried = finals.iter().filter(|r| r.attempt > 0).count();
            proportion(retried as f64, finals.len() as f64, SampleUnit::Requests, c)
        }
        "rate_limited_share" => {
            let attempts: Vec<&&RequestRecord> = data.attempts.iter().filter(|r| Some(r.concurrency) == c).collect();
            let limited = attempts
                .iter()
                .filter(|r| r.error_class == Some(ErrorClass::RateLimited) || r.http_status == Some(429))
                .count();
            proportion(limited as f64, attempts.len() as f64, SampleUnit::Attempts, c)
        }
        "usage_reported_share" => {
            let ok: Vec<&&RequestRecord> = finals.iter().filter(|r| r.succeeded()).collect();
            let usage = ok
                .iter()
                .filter(|r| r.output_tokens_source == Some(TokenSource::Usage))
                .count();
            let mut m = proportion(usage as f64, ok.len() as f64, SampleUnit::Requests, None);
            if ok.is_empty() {
                m.missing = Some("no successful request".into());
            }
            m
        }
        "soak_tok_s_loss" => soak_loss(data),
        "operability_score" | "probes_passed_share" | "checklist_share" | "probe" | "checklist" => {
            operability(key, extras)
        }
        "cost_per_1k_cases" | "cost_per_correct" => cost_figure(key, cost),
        "joules_per_output_token" => energy_figure(extras.joules_per_output_token, c),
        other => Measurement::missing(format!("{other} has no measurement"), def.uncertainty, c),
    };
    if m.value.is_none() && m.missing.is_none() {
        m.missing = Some("no measured value".into());
    }
    if m.value.is_some() {
        m.missing = None;
    }
    m
}

/// `aggregate_tok_s` at load `c`: the level's steady-window figure, with the request
/// bootstrap's interval of the whole span rescaled to it.
fn aggregate_measurement(data: &CandidateRecords<'_>, finals: &[&RequestRecord], c: Option<u32>) -> Measurement {
    // The value is the level's steady-window figure (median over repetitions). Its
    // interval is the request bootstrap of the whole span, rescaled to that value: the
    // same relative uncertainty around the figure every page shows.
    let level = c.and_then(|c| data.level_at(c));
    let value = level
        .as_ref()
        .and_then(|l| l.aggregate_tok_s)
        .filter(|_| finals.iter().any(|r| r.succeeded()));
    let (span_value, interval) = windowed_rate(finals, |r| f64::from(r.output_tokens.unwrap_or(0)));
    let interval = match (value, span_value, interval) {
        (Some(v), Some(span), Some((lo, hi))) if span > 0.0 => Some((lo * v / span, hi * v / span)),
        _ => None,
    };
    Measurement {
        value,
        interval,
        uncertainty: Uncertainty::Bootstrap,
        n: finals.len() as f64,
        unit: SampleUnit::Requests,
        concurrency: c,
        missing: None,
    }
}

/// A per-request latency or rate percentile (`ttft_ms_p50`, `decode_tok_s_p50`, …) at load `c`.
fn latency_percentile(
    data: &CandidateRecords<'_>,
    base: &str,
    finals: &[&RequestRecord],
    c: Option<u32>,
) -> Measurement {
    let values: Vec<f64> = finals.iter().filter_map(|r| per_request(base, r)).collect();
    let q = quantile_of(base);
    let mut m = sample_statistic(values, c, SampleUnit::Requests, move |v| quantile(v, q));
    // The value is the level's percentile (the one level computation every page shows);
    // the bootstrap of the requests' own quantile gives its interval.
    if let Some(level) = c.and_then(|c| data.level_at(c)) {
        m.value = level_percentile(&level, base, q);
    }
    if m.value.is_none() {
        m.missing = Some(match base {
            b if b.starts_with("ttf") => {
                "no successful streamed request (streaming off or every request failed)".into()
            }
            _ => "no successful request with enough tokens".into(),
        });
    }
    m
}

/// The prompt-cache token hit rate at load `c` (`prompt_cache::COUNTING_RULE`), with a
/// bootstrap over requests of the ratio of sums.
fn prefix_cache_hit_rate(finals: &[&RequestRecord], c: Option<u32>) -> Measurement {
    use crate::prompt_cache::RequestCache;
    let caches: Vec<RequestCache> = finals
        .iter()
        .filter(|r| r.succeeded())
        .filter_map(|r| RequestCache::of(r))
        .collect();
    let ratio = |it: &mut dyn Iterator<Item = &RequestCache>| {
        let (read, whole) = it.fold((0u64, 0u64), |(r, w), c| {
            (r + u64::from(c.read), w + u64::from(c.whole))
        });
        if whole == 0 {
            f64::NAN
        } else {
            read as f64 / whole as f64
        }
    };
    let value = Some(ratio(&mut caches.iter())).filter(|v| v.is_finite());
    Measurement {
        value,
        interval: value.and_then(|_| bootstrap_items(&caches, ratio)),
        uncertainty: Uncertainty::Bootstrap,
        n: caches.len() as f64,
        unit: SampleUnit::Requests,
        concurrency: c,
        missing: value.is_none().then(|| crate::prompt_cache::NOT_REPORTED.to_string()),
    }
}

/// TTFT p95 of the warm requests (some prompt tokens read from the cache) at load `c`: the
/// level's figure, the bootstrap of the requests' own quantile for its interval.
fn warm_ttft_p95(data: &CandidateRecords<'_>, finals: &[&RequestRecord], c: Option<u32>) -> Measurement {
    use crate::prompt_cache::RequestCache;
    let values: Vec<f64> = finals
        .iter()
        .filter(|r| r.succeeded() && !r.in_ramp() && RequestCache::of(r).is_some_and(|c| c.warm()))
        .filter_map(|r| RequestFigures::of(r).map(|f| f.ttft_ms))
        .collect();
    let mut m = sample_statistic(values, c, SampleUnit::Requests, |v| quantile(v, 0.95));
    if let Some(level) = c.and_then(|c| data.level_at(c)) {
        m.value = level.prompt_cache.ttft_warm_ms.map(|d| d.p95);
    }
    if m.value.is_none() {
        m.missing = Some(
            "no warm request: none read prompt tokens from the server's cache (or its usage has no cache field)".into(),
        );
    }
    m
}

/// The coefficient of variation of successful requests' end-to-end times at load `c`.
fn e2e_cv(finals: &[&RequestRecord], c: Option<u32>) -> Measurement {
    let values: Vec<f64> = finals
        .iter()
        .filter(|r| r.succeeded())
        .filter_map(|r| r.end_us.get().map(ms))
        .collect();
    sample_statistic(values, c, SampleUnit::Requests, |v| {
        let n = v.len();
        if n < 2 {
            return f64::NAN;
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        if mean > 0.0 { var.sqrt() / mean } else { f64::NAN }
    })
}

/// `accuracy` (weighted by the eval set's case weights) or `pass_rate` (unweighted) over cases.
fn case_share(key: &MetricKey, data: &CandidateRecords<'_>, weights: &HashMap<String, f64>) -> Measurement {
    let outcomes = data.case_outcomes();
    let weighted = key.base == "accuracy";
    let w = |case: &str| {
        if weighted {
            weights.get(case).copied().unwrap_or(1.0)
        } else {
            1.0
        }
    };
    let sum_w: f64 = outcomes.keys().map(|k| w(k)).sum();
    let sum_w2: f64 = outcomes.keys().map(|k| w(k).powi(2)).sum();
    let passed: f64 = outcomes.iter().map(|(k, share)| w(k) * share).sum();
    if sum_w <= 0.0 {
        Measurement::missing("no graded case yet", Uncertainty::Proportion, None)
    } else {
        // Repetitions of a case are not independent samples of the task, and weights
        // shrink the information a sample holds: the interval uses Kish's effective
        // number of cases (Σw)² / Σw², which is the case count when weights are equal.
        let n_eff = sum_w * sum_w / sum_w2;
        proportion(passed / sum_w * n_eff, n_eff, SampleUnit::Cases, None)
    }
}

/// The mean score of the grader `key` names (a failed request scores 0).
fn grader_score(key: &MetricKey, finals: &[&RequestRecord]) -> Measurement {
    let name = key.param.as_deref().unwrap_or_default();
    let values: Vec<f64> = finals
        .iter()
        .filter_map(|r| {
            if !r.succeeded() {
                return Some(0.0);
            }
            r.grades.iter().find(|g| &*g.grader == name).map(|g| g.score)
        })
        .collect();
    let mut m = sample_statistic(values, None, SampleUnit::Requests, |v| {
        v.iter().sum::<f64>() / v.len() as f64
    });
    if m.value.is_none() || !finals.iter().any(|r| r.grades.iter().any(|g| &*g.grader == name)) {
        m.value = None;
        m.interval = None;
        m.missing = Some(format!("no grade from a grader named {name:?}"));
    }
    m
}

/// A tool-case figure at load `c`, over the answers carrying a `tool-calls` grade.
pub(crate) fn tool_figure(base: &str, finals: &[&RequestRecord], c: Option<u32>) -> Measurement {
    use crate::tool_calls::ToolCallsDetail;
    let graded: Vec<(bool, ToolCallsDetail)> = finals
        .iter()
        .flat_map(|r| r.grades.iter())
        .filter_map(|g| ToolCallsDetail::from_grade(g).map(|d| (g.passed, d)))
        .collect();
    let n = graded.len() as f64;
    let count = |f: &dyn Fn(&(bool, ToolCallsDetail)) -> bool| graded.iter().filter(|x| f(x)).count() as f64;
    let mut m = match base {
        "tool_call_accuracy" => proportion(count(&|(passed, _)| *passed), n, SampleUnit::Requests, c),
        "malformed_call_rate" => proportion(count(&|(_, d)| d.malformed), n, SampleUnit::Requests, c),
        "abstention_error_rate" => proportion(count(&|(_, d)| d.abstention.is_some()), n, SampleUnit::Requests, c),
        _ => {
            let values = graded.iter().map(|(_, d)| d.argument_f1).collect();
            sample_statistic(values, c, SampleUnit::Requests, |v| {
                v.iter().sum::<f64>() / v.len() as f64
            })
        }
    };
    if graded.is_empty() {
        m.value = None;
        m.interval = None;
        m.missing = Some("no graded tool-case answer (the eval set has no tool cases, or none succeeded)".into());
    }
    m
}

/// A conversation figure at load `c` (`domain::conversation`), from the turn records.
fn conversation_figure(key: &MetricKey, finals: &[&RequestRecord], c: Option<u32>) -> Measurement {
    let turns: Vec<&RequestRecord> = finals.iter().copied().filter(|r| r.turn.is_some()).collect();
    let none = |mut m: Measurement, why: &str| {
        m.value = None;
        m.interval = None;
        m.missing = Some(why.to_string());
        m
    };
    if turns.is_empty() {
        let m = proportion(0.0, 0.0, SampleUnit::Requests, c);
        return none(
            m,
            "no conversation turn measured (the eval set has no conversation cases)",
        );
    }
    match key.base {
        "turn_ttft_p95" => {
            let k = key.param.as_deref().and_then(crate::conversation::turn_param);
            let values: Vec<f64> = turns
                .iter()
                .filter(|r| r.turn.as_ref().map(|t| t.turn) == k && !r.in_ramp())
                .filter_map(|r| crate::calibers::RequestFigures::of(r).map(|f| f.ttft_ms))
                .collect();
            let empty = values.is_empty();
            let m = sample_statistic(values, c, SampleUnit::Requests, |v| quantile(v, 0.95));
            if empty {
                none(m, "no successful streamed request at that turn")
            } else {
                m
            }
        }
        base => {
            let f = crate::conversation::figures(turns.iter().copied(), 0.95);
            let rate = if base == "conversation_pass_rate" {
                f.conversations
            } else {
                f.last_turn
            };
            let m = proportion(rate.passed as f64, rate.graded as f64, SampleUnit::Requests, c);
            if rate.graded == 0 {
                none(m, "no graded conversation turn")
            } else {
                m
            }
        }
    }
}

/// `cost_per_1k_cases` or `cost_per_correct`, from the candidate's cost summary.
fn cost_figure(key: &MetricKey, cost: Option<&CostSummary>) -> Measurement {
    let (value, missing) = match cost {
        None => (None, Some("no prices stated for this candidate".to_string())),
        Some(s) if key.base == "cost_per_1k_cases" => (s.per_1k_cases, None),
        Some(s) => (
            s.per_correct,
            (s.correct == 0).then(|| "no correct answer to divide by".to_string()),
        ),
    };
    Measurement {
        value,
        interval: None,
        uncertainty: Uncertainty::Exact,
        n: cost.map(|s| s.answers as f64).unwrap_or(0.0),
        unit: SampleUnit::Requests,
        concurrency: None,
        missing: missing.or_else(|| value.is_none().then(|| "no measured requests yet".to_string())),
    }
}

/// `capacity_at_slo` (req/s, its interval the search's: the highest load confidently meeting
/// the target to the lowest above it confidently missing, an open end 0 or unbounded) and the
/// cost at capacity (exact at the estimate).
fn capacity_figure(base: &str, evidence: Option<&crate::capacity::CapacityEvidence>) -> Measurement {
    let missing = |why: &str, uncertainty| Measurement::missing(why, uncertainty, None);
    let Some(e) = evidence else {
        return missing(
            "measured by a find-capacity run (load shape \"capacity\") only",
            Uncertainty::Exact,
        );
    };
    use crate::capacity::LoadAxis;
    // A figure is only compared with a rule in its own unit: req/s for a search over request
    // rate, users for one over concurrency.
    match (base, e.axis) {
        ("capacity_at_slo", LoadAxis::Concurrency) => {
            return missing(
                "the search was over concurrency, so its capacity is in users, not req/s: judge it with capacity @ SLO (users), capacity_at_slo_users",
                Uncertainty::Exact,
            );
        }
        ("capacity_at_slo_users", LoadAxis::Rate) => {
            return missing(
                "the search was over request rate, so its capacity is in req/s, not users: judge it with capacity @ SLO, capacity_at_slo",
                Uncertainty::Exact,
            );
        }
        ("capacity_at_slo" | "capacity_at_slo_users", _) => {}
        (_, LoadAxis::Concurrency) => {
            return missing(
                "the cost at capacity needs a capacity in req/s (answers per hour): search over request rate",
                Uncertainty::Exact,
            );
        }
        _ => {}
    }
    let Some(outcome) = &e.outcome else {
        return missing("the capacity search did not end", Uncertainty::Exact);
    };
    let n = e.requests as f64;
    if matches!(base, "capacity_at_slo" | "capacity_at_slo_users") {
        let Some(capacity) = outcome.capacity else {
            return missing(&outcome.describe(e.axis), Uncertainty::Bootstrap);
        };
        return Measurement {
            value: Some(capacity),
            interval: Some((outcome.lower.unwrap_or(0.0), outcome.upper.unwrap_or(f64::INFINITY))),
            uncertainty: Uncertainty::Bootstrap,
            n,
            unit: SampleUnit::Requests,
            concurrency: None,
            missing: None,
        };
    }
    let value = match base {
        "cost_per_1k_answers_at_capacity" => e.cost.map(|c| c.per_1k_answers),
        _ => e.cost.and_then(|c| c.per_1k_correct),
    };
    Measurement {
        value,
        interval: None,
        uncertainty: Uncertainty::Exact,
        n,
        unit: SampleUnit::Requests,
        concurrency: None,
        missing: value.is_none().then(|| match e.cost {
            None => "no GPU count and price per GPU-hour stated, or no capacity found".to_string(),
            Some(_) => "no correct answer to divide by".to_string(),
        }),
    }
}

/// GPU energy per output token at load `c`, from the run's telemetry.
fn energy_figure(by_level: Option<&[(u32, f64)]>, c: Option<u32>) -> Measurement {
    let value = by_level.and_then(|l| l.iter().find(|(at, _)| Some(*at) == c).map(|(_, j)| *j));
    Measurement {
        value,
        interval: None,
        uncertainty: Uncertainty::Exact,
        n: 0.0,
        unit: SampleUnit::Requests,
        concurrency: c,
        missing: value.is_none().then(|| match (by_level, c) {
            (None, _) => "no GPU telemetry in this run (declare the candidate's GPU metrics URL)".to_string(),
            (Some(_), Some(c)) => format!("no GPU energy measured at c={c}"),
            (Some(_), None) => "no GPU energy measured".to_string(),
        }),
    }
}

/// Probe and checklist figures, from the candidate's latest probe run and current checklist.
fn operability(key: &MetricKey, extras: &Extras<'_>) -> Measurement {
    let value = operability_metric(&key.to_key(), extras.probes, extras.checklist);
    let missing = match (key.base, extras.probes, extras.checklist) {
        _ if value.is_some() => None,
        ("probe" | "probes_passed_share", None, _) => {
            Some("no probe run yet (run the probes on the candidate's Operability page)".to_string())
        }
        ("probe", Some(_), _) => Some("the probe does not apply to this endpoint".to_string()),
        ("checklist" | "checklist_share", _, None) => {
            Some("the readiness checklist is not filled in (candidate's Operability page)".to_string())
        }
        ("checklist", _, Some(_)) => Some("the item is marked not applicable".to_string()),
        _ => Some("no probe run and no checklist yet (candidate's Operability page)".to_string()),
    };
    Measurement {
        value,
        interval: None,
        uncertainty: Uncertainty::Exact,
        n: 1.0,
        unit: SampleUnit::Requests,
        concurrency: None,
        missing,
    }
}

/// Throughput loss over the run's soak: the least-squares trend of per-window tok/s, from the
/// first window to the last, as a share of the first (positive = throughput fell).
fn soak_loss(data: &CandidateRecords<'_>) -> Measurement {
    let soak: Vec<&RequestRecord> = data.finals.iter().copied().filter(|r| r.phase == Phase::Soak).collect();
    let missing = |why: &str| Measurement::missing(why, Uncertainty::Bootstrap, None);
    if soak.is_empty() {
        return missing("this run has no soak phase (start one with the soak preset)");
    }
    let options = StabilityOptions::default();
    let Some(analysis) = soak_analysis(&soak, &options) else {
        return missing("the soak is too short to cut into windows");
    };
    let mid_min = |w: &crate::stability::soak::SoakWindow| (w.start_s + w.end_s) / 2.0 / 60.0;
    let (Some(first), Some(last), Some(fit)) = (
        analysis.windows.first(),
        analysis.windows.last(),
        analysis.tok_s.fit.as_ref(),
    ) else {
        return missing("the soak has too few windows for a trend");
    };
    let (x0, x1) = (mid_min(first), mid_min(last));
    let start = fit.intercept + fit.slope * x0;
    if start <= 0.0 {
        return missing("no output tokens at the start of the soak");
    }
    let loss = |slope: f64| -slope * (x1 - x0) / start;
    let interval = fit.slope_interval.map(|ci| {
        let (a, b) = (loss(ci.hi), loss(ci.lo));
        (a.min(b), a.max(b))
    });
    Measurement {
        value: Some(loss(fit.slope)),
        interval,
        uncertainty: Uncertainty::Bootstrap,
        n: analysis.requests as f64,
        unit: SampleUnit::Requests,
        concurrency: soak.first().map(|r| r.concurrency),
        missing: None,
    }
}

/// Too few observations for an interval on a bootstrap metric.
pub fn too_few(m: &Measurement) -> bool {
    m.uncertainty == Uncertainty::Bootstrap && m.value.is_some() && m.interval.is_none() && m.n < MIN_BOOTSTRAP_N as f64
}
