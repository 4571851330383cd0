//! Stability, computed from one candidate's raw request records: how often and how it fails
//! (by class, with Wilson intervals), how much repetitions of the same load disagree (CV of
//! aggregate tok/s and of p95 latency), whether repeated cases give the same answer (identical
//! outputs, grade agreement, flip rate, pass^k), and whether a soak degrades over time (per-window
//! tok/s and p95 latency, least-squares trend with a t-interval, drift, error bursts).
//!
//! Every figure here is recomputable from stored records; nothing is measured twice. Fractions
//! are stored as fractions (0.25 = 25 %), as the threshold catalog's `Percent` unit expects.
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::format;
use super::grading::case_passed;
use super::run::{ErrorClass, Phase, RequestRecord, split_repetition};
use super::stats::{Interval, normal_quantile, quantile_sorted, wilson};

/// The failure key of a successful request that stopped at its max_tokens (`finish_reason`
/// "length"): not an error to the engine, but an answer cut short.
pub const TRUNCATED: &str = "truncated";

/// Knobs of the analysis; `Default` is what the scorecard and pages use.
#[derive(Debug, Clone, PartialEq)]
pub struct StabilityOptions {
    /// Two-sided coverage of every interval (0.90, like the scorecard's).
    pub confidence: f64,
    /// Windows a soak is cut into.
    pub soak_windows: usize,
    /// Fewest successful completions for a window's p95 latency.
    pub min_window_requests: usize,
    /// Smallest relative drift (first → last window) called degradation, however clean the trend.
    pub degrade_min_drift: f64,
    /// A window is an error burst when its error rate is at least this many times the overall.
    pub burst_factor: f64,
}

impl Default for StabilityOptions {
    fn default() -> Self {
        StabilityOptions {
            confidence: 0.90,
            soak_windows: 10,
            min_window_requests: 3,
            degrade_min_drift: 0.10,
            burst_factor: 2.0,
        }
    }
}

/// A count out of a total, as a rate with its Wilson interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rate {
    /// `failure_rate`, an error class (`first_token_timeout`), a group (`timeout`) or `truncated`.
    pub key: String,
    pub label: String,
    pub count: u64,
    pub n: u64,
    pub rate: f64,
    pub interval: Option<Interval>,
}

impl Rate {
    fn new(key: impl Into<String>, label: impl Into<String>, count: u64, n: u64, confidence: f64) -> Rate {
        Rate {
            key: key.into(),
            label: label.into(),
            count,
            n,
            rate: if n > 0 { count as f64 / n as f64 } else { 0.0 },
            interval: wilson(count, n, confidence),
        }
    }
}

/// Failures of the final attempts (after retries) of measured requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureSummary {
    /// Requests that ended in an error.
    pub overall: Rate,
    /// Errors plus answers truncated at max_tokens.
    pub with_truncation: Rate,
    /// Every error class seen, and `truncated`, most frequent first.
    pub by_class: Vec<Rate>,
    /// The classes the issue tracker speaks of: timeouts, 429, 5xx, stream cuts, malformed
    /// output, truncation, context length, other client errors, connection failures, other.
    /// Every group is listed, seen or not, so a zero is visible.
    pub by_group: Vec<Rate>,
}

/// The broad group an error class belongs to, with its label.
pub fn failure_group(class: ErrorClass) -> (&'static str, &'static str) {
    use ErrorClass::*;
    match class {
        ConnectTimeout | FirstTokenTimeout | TotalTimeout => ("timeout", "timeouts"),
        RateLimited => ("rate_limited", "rate-limited (429)"),
        HttpServerError => ("server_error", "server errors (5xx)"),
        StreamCut => ("stream_cut", "stream cuts"),
        MalformedChunk | NonJsonResponse | EmptyOutput => ("malformed", "malformed or empty output"),
        ContextLengthExceeded => ("context_length", "context length exceeded"),
        HttpClientError => ("client_error", "other client errors (4xx)"),
        ConnectRefused | Dns | Tls => ("connection", "connection failures"),
        Other => ("other", "other"),
    }
}

const GROUPS: [(&str, &str); 10] = [
    ("timeout", "timeouts"),
    ("rate_limited", "rate-limited (429)"),
    ("server_error", "server errors (5xx)"),
    ("stream_cut", "stream cuts"),
    ("malformed", "malformed or empty output"),
    (TRUNCATED, "truncated at max_tokens"),
    ("context_length", "context length exceeded"),
    ("client_error", "other client errors (4xx)"),
    ("connection", "connection failures"),
    ("other", "other"),
];

fn truncated(r: &RequestRecord) -> bool {
    r.succeeded() && r.finish_reason.as_deref() == Some("length")
}

/// Failure rates over `finals` (one record per measured request).
pub fn failure_summary(finals: &[&RequestRecord], confidence: f64) -> FailureSummary {
    let n = finals.len() as u64;
    let failed = finals.iter().filter(|r| !r.succeeded()).count() as u64;
    let cut_short = finals.iter().filter(|r| truncated(r)).count() as u64;
    let mut classes: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut groups: HashMap<&'static str, u64> = HashMap::new();
    for r in finals {
        if let Some(c) = r.error_class {
            *classes.entry(c.as_str()).or_default() += 1;
            *groups.entry(failure_group(c).0).or_default() += 1;
        }
    }
    if cut_short > 0 {
        classes.insert(TRUNCATED, cut_short);
    }
    groups.insert(TRUNCATED, cut_short);
    let mut by_class: Vec<Rate> = classes
        .into_iter()
        .map(|(key, count)| Rate::new(key, key.replace('_', " "), count, n, confidence))
        .collect();
    by_class.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    FailureSummary {
        overall: Rate::new("failure_rate", "failed requests", failed, n, confidence),
        with_truncation: Rate::new(
            "failure_rate_with_truncation",
            "failed or truncated",
            failed + cut_short,
            n,
            confidence,
        ),
        by_class,
        by_group: GROUPS
            .iter()
            .map(|(key, label)| Rate::new(*key, *label, groups.get(key).copied().unwrap_or(0), n, confidence))
            .collect(),
    }
}

/// Coefficient of variation (sample standard deviation / mean); None below two values or for a
/// zero mean.
pub fn cv(values: &[f64]) -> Option<f64> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean.abs() > f64::EPSILON).then(|| var.sqrt() / mean)
}

/// One repetition of one load level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepetitionFigure {
    pub repetition: u32,
    pub requests: usize,
    /// Output tokens of the repetition / (last end − first send).
    pub tok_s: Option<f64>,
    /// p95 E2E latency of its successful requests.
    pub p95_e2e_ms: Option<f64>,
}

/// How much repetitions of the same load disagree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepetitionSpread {
    pub concurrency: u32,
    pub repetitions: Vec<RepetitionFigure>,
    /// CV of aggregate tok/s across repetitions (None below two repetitions).
    pub tok_s_cv: Option<f64>,
    /// CV of p95 E2E latency across repetitions.
    pub p95_latency_cv: Option<f64>,
}

fn p95_ms(records: &[&RequestRecord]) -> Option<f64> {
    let mut v: Vec<f64> = records
        .iter()
        .filter(|r| r.succeeded())
        .filter_map(|r| r.end_us)
        .map(|us| us as f64 / 1000.0)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(quantile_sorted(&v, 0.95))
}

fn completion_us(r: &RequestRecord) -> i64 {
    r.sent_at_us + r.end_us.or(r.last_token_us).or(r.headers_us).unwrap_or(0)
}

fn tok_s(records: &[&RequestRecord]) -> Option<f64> {
    let start = records.iter().map(|r| r.sent_at_us).min()?;
    let end = records.iter().map(|r| completion_us(r)).max()?;
    let tokens: u64 = records
        .iter()
        .filter(|r| r.succeeded())
        .filter_map(|r| r.output_tokens)
        .map(u64::from)
        .sum();
    (end > start && records.iter().any(|r| r.succeeded())).then(|| tokens as f64 / ((end - start) as f64 / 1e6))
}

/// Spread across repetitions, per load level (a level with one repetition has no CV).
pub fn repetition_spread(finals: &[&RequestRecord]) -> Vec<RepetitionSpread> {
    let mut groups: BTreeMap<(u32, u32, u32), Vec<&RequestRecord>> = BTreeMap::new();
    for r in finals {
        let (level, repetition, _cycle) = split_repetition(r.repetition);
        groups.entry((r.concurrency, level, repetition)).or_default().push(r);
    }
    let mut levels: BTreeMap<(u32, u32), Vec<RepetitionFigure>> = BTreeMap::new();
    for ((concurrency, level, repetition), records) in groups {
        levels.entry((concurrency, level)).or_default().push(RepetitionFigure {
            repetition,
            requests: records.len(),
            tok_s: tok_s(&records),
            p95_e2e_ms: p95_ms(&records),
        });
    }
    levels
        .into_iter()
        .map(|((concurrency, _), repetitions)| {
            let tok: Vec<f64> = repetitions.iter().filter_map(|r| r.tok_s).collect();
            let p95: Vec<f64> = repetitions.iter().filter_map(|r| r.p95_e2e_ms).collect();
            RepetitionSpread {
                concurrency,
                tok_s_cv: cv(&tok),
                p95_latency_cv: cv(&p95),
                repetitions,
            }
        })
        .collect()
}

/// Whether the same case, asked k times at the run's temperature, gets the same answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Consistency {
    /// Cases asked at least twice.
    pub cases: usize,
    /// The fewest times such a case was asked (the k of pass^k).
    pub k: usize,
    /// Share of cases (with ≥ 2 successful answers) whose answers are all identical.
    pub identical_output: Option<Rate>,
    /// Share of pairs of repetitions of a case that got the same verdict (a failed request is a
    /// fail), over graded cases.
    pub grade_agreement: Option<f64>,
    /// Share of graded cases that passed in some repetitions and failed in others.
    pub flip_rate: Option<Rate>,
    /// Cases that flipped, by id.
    pub flipping_cases: Vec<String>,
    /// Mean per-repetition pass rate over graded cases.
    pub pass_at_1: Option<f64>,
    /// Probability that k repetitions of a case all pass: mean over cases of C(c, k) / C(n, k)
    /// (c passes of n), the unbiased estimator.
    pub pass_hat_k: Option<f64>,
}

/// C(n, k) / C(m, k) for k ≤ n ≤ m, without overflow.
fn binomial_ratio(n: usize, m: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    (0..k).map(|i| (n - i) as f64 / (m - i) as f64).product()
}

/// Repeat consistency over `finals`; None when no case was asked twice.
pub fn consistency(finals: &[&RequestRecord], confidence: f64) -> Option<Consistency> {
    let mut by_case: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for r in finals {
        by_case.entry(r.case_id.as_str()).or_default().push(r);
    }
    by_case.retain(|_, v| v.len() >= 2);
    if by_case.is_empty() {
        return None;
    }
    let k = by_case.values().map(Vec::len).min().unwrap_or(2);
    let (mut same_cases, mut output_cases) = (0u64, 0u64);
    let (mut agree_pairs, mut pairs) = (0u64, 0u64);
    let (mut flipped, mut graded_cases) = (0u64, 0u64);
    let mut flipping_cases = Vec::new();
    let (mut pass_share_sum, mut pass_k_sum) = (0.0, 0.0);
    for (case, records) in &by_case {
        let outputs: Vec<&str> = records
            .iter()
            .filter(|r| r.succeeded())
            .map(|r| r.output.trim())
            .collect();
        if outputs.len() >= 2 {
            output_cases += 1;
            if outputs.iter().all(|o| *o == outputs[0]) {
                same_cases += 1;
            }
        }
        let verdicts: Vec<bool> = records
            .iter()
            .filter_map(|r| {
                if r.succeeded() {
                    case_passed(&r.grades)
                } else {
                    Some(false)
                }
            })
            .collect();
        // A case counts as graded only if every repetition has a verdict.
        if verdicts.len() < 2 || verdicts.len() != records.len() {
            continue;
        }
        graded_cases += 1;
        let n = verdicts.len();
        let c = verdicts.iter().filter(|v| **v).count();
        agree_pairs += (c * c.saturating_sub(1) / 2 + (n - c) * (n - c).saturating_sub(1) / 2) as u64;
        pairs += (n * (n - 1) / 2) as u64;
        if c > 0 && c < n {
            flipped += 1;
            flipping_cases.push(case.to_string());
        }
        pass_share_sum += c as f64 / n as f64;
        pass_k_sum += binomial_ratio(c, n, k);
    }
    let graded = graded_cases > 0;
    Some(Consistency {
        cases: by_case.len(),
        k,
        identical_output: (output_cases > 0).then(|| {
            Rate::new(
                "identical_output_rate",
                "identical answers",
                same_cases,
                output_cases,
                confidence,
            )
        }),
        grade_agreement: (pairs > 0).then(|| agree_pairs as f64 / pairs as f64),
        flip_rate: graded.then(|| Rate::new("flip_rate", "cases that flip", flipped, graded_cases, confidence)),
        flipping_cases,
        pass_at_1: graded.then(|| pass_share_sum / graded_cases as f64),
        pass_hat_k: graded.then(|| pass_k_sum / graded_cases as f64),
    })
}

/// The `p` quantile of Student's t with `df` degrees of freedom: exact for 1 and 2, else the
/// Cornish–Fisher expansion (Abramowitz & Stegun 26.7.5; within 0.1 % from df = 3 at 97.5 %).
pub fn t_quantile(p: f64, df: usize) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    match df {
        0 => f64::NAN,
        1 => (std::f64::consts::PI * (p - 0.5)).tan(),
        2 => (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt(),
        _ => {
            let z = normal_quantile(p);
            let v = df as f64;
            let (z3, z5, z7, z9) = (z.powi(3), z.powi(5), z.powi(7), z.powi(9));
            let g1 = (z3 + z) / 4.0;
            let g2 = (5.0 * z5 + 16.0 * z3 + 3.0 * z) / 96.0;
            let g3 = (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / 384.0;
            let g4 = (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / 92160.0;
            z + g1 / v + g2 / v.powi(2) + g3 / v.powi(3) + g4 / v.powi(4)
        }
    }
}

/// A least-squares line through (x, y) points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinearFit {
    pub slope: f64,
    pub intercept: f64,
    /// t-interval of the slope (needs ≥ 3 points).
    pub slope_interval: Option<Interval>,
    /// Standard deviation of the residuals (n − 2 denominator).
    pub residual_sd: Option<f64>,
}

/// Ordinary least squares; None below two points or when every x is the same.
pub fn linear_fit(points: &[(f64, f64)], confidence: f64) -> Option<LinearFit> {
    let n = points.len();
    if n < 2 {
        return None;
    }
    let nf = n as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let (slope_interval, residual_sd) = if n >= 3 {
        let ssr: f64 = points.iter().map(|p| (p.1 - intercept - slope * p.0).powi(2)).sum();
        let s2 = ssr / (nf - 2.0);
        let half = t_quantile(0.5 + confidence / 2.0, n - 2) * (s2 / sxx).sqrt();
        (
            Some(Interval {
                lo: slope - half,
                hi: slope + half,
                confidence,
            }),
            Some(s2.sqrt()),
        )
    } else {
        (None, None)
    };
    Some(LinearFit {
        slope,
        intercept,
        slope_interval,
        residual_sd,
    })
}

/// The trend of one soak figure over its windows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    /// Change per minute (units of the figure per minute), with its t-interval.
    pub fit: Option<LinearFit>,
    /// (last window − first window) / first window.
    pub drift: Option<f64>,
    /// Window-to-window noise: residual standard deviation around the trend / mean.
    pub noise: Option<f64>,
    /// Windows the trend is computed from.
    pub windows: usize,
}

impl Trend {
    fn of(points: &[(f64, f64)], confidence: f64) -> Trend {
        let fit = linear_fit(points, confidence);
        let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len().max(1) as f64;
        let drift = match (points.first(), points.last()) {
            (Some(a), Some(b)) if points.len() >= 2 && a.1.abs() > f64::EPSILON => Some((b.1 - a.1) / a.1),
            _ => None,
        };
        let noise = fit
            .as_ref()
            .and_then(|f| f.residual_sd)
            .filter(|_| mean.abs() > f64::EPSILON)
            .map(|sd| sd / mean.abs());
        Trend {
            fit,
            drift,
            noise,
            windows: points.len(),
        }
    }

    /// Whether the figure moved in direction `sign` (+1 up, −1 down) beyond noise: the slope's
    /// interval excludes zero on that side, and the drift exceeds both `min_drift` and twice the
    /// noise of a difference of two windows (√2 × noise).
    fn moved(&self, sign: f64, min_drift: f64) -> bool {
        let (Some(fit), Some(drift)) = (&self.fit, self.drift) else {
            return false;
        };
        let Some(ci) = fit.slope_interval else {
            return false;
        };
        let excludes_zero = if sign > 0.0 { ci.lo > 0.0 } else { ci.hi < 0.0 };
        let noise_bound = 2.0 * std::f64::consts::SQRT_2 * self.noise.unwrap_or(0.0);
        excludes_zero && sign * drift > min_drift.max(noise_bound)
    }
}

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

/// Everything the scorecard's stability section shows for one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StabilityReport {
    /// Final attempts of measured requests (warm-ups and probes excluded, soak included).
    pub measured_requests: usize,
    pub failures: FailureSummary,
    /// The quality and throughput phases, per load level.
    pub spread: Vec<RepetitionSpread>,
    pub consistency: Option<Consistency>,
    /// Records of the soak phase, when the run had one.
    pub soak: Option<SoakAnalysis>,
}

/// The final attempt of every measured request of `candidate_id` (warm-ups and probes left out),
/// in send order.
pub fn final_attempts(records: &[RequestRecord], candidate_id: i64) -> Vec<&RequestRecord> {
    let mut last: HashMap<(&str, Phase, u32, u32), &RequestRecord> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| r.candidate_id == candidate_id && !r.is_warmup && !matches!(r.phase, Phase::Warmup | Phase::Probe))
    {
        let key = (r.case_id.as_str(), r.phase, r.repetition, r.concurrency);
        match last.get(&key) {
            Some(prev) if prev.attempt >= r.attempt => {}
            _ => {
                last.insert(key, r);
            }
        }
    }
    let mut finals: Vec<&RequestRecord> = last.into_values().collect();
    finals.sort_by_key(|r| (r.sent_at_us, r.attempt));
    finals
}

/// The stability report of one candidate from a run's records (any candidate's records may be
/// passed; only `candidate_id`'s are used).
pub fn stability_report(records: &[RequestRecord], candidate_id: i64, options: &StabilityOptions) -> StabilityReport {
    let finals = final_attempts(records, candidate_id);
    let soak: Vec<&RequestRecord> = finals.iter().copied().filter(|r| r.phase == Phase::Soak).collect();
    // Smoke requests are a rollout check, not repetitions of the measured load.
    let other: Vec<&RequestRecord> = finals
        .iter()
        .copied()
        .filter(|r| matches!(r.phase, Phase::Quality | Phase::Throughput))
        .collect();
    StabilityReport {
        measured_requests: finals.len(),
        failures: failure_summary(&finals, options.confidence),
        spread: repetition_spread(&other),
        consistency: consistency(&other, options.confidence),
        soak: soak_analysis(&soak, options),
    }
}

impl StabilityReport {
    /// The load level with the most repetitions (ties: the most requests), whose CVs stand for
    /// the run.
    pub fn main_spread(&self) -> Option<&RepetitionSpread> {
        self.spread.iter().max_by_key(|s| {
            (
                s.repetitions.len(),
                s.repetitions.iter().map(|r| r.requests).sum::<usize>(),
            )
        })
    }

    /// One figure by its metric key, for thresholds and exports:
    /// `failure_rate`, `failure_rate:<error class | group | truncated>`,
    /// `failure_rate_with_truncation`, `tok_s_cv`, `p95_latency_cv`, `identical_output_rate`,
    /// `grade_agreement`, `flip_rate`, `pass_at_1`, `pass_hat_k`, `soak_tok_s_drift`,
    /// `soak_p95_drift`, `soak_tok_s_slope`, `soak_p95_slope`, `soak_error_bursts`,
    /// `soak_degrading` (1 or 0). None when not measured.
    pub fn metric(&self, key: &str) -> Option<f64> {
        if let Some(class) = key.strip_prefix("failure_rate:") {
            let n = self.failures.overall.n;
            return (n > 0).then(|| {
                self.failures
                    .by_class
                    .iter()
                    .chain(&self.failures.by_group)
                    .find(|r| r.key == class)
                    .map_or(0.0, |r| r.rate)
            });
        }
        let consistency = self.consistency.as_ref();
        let soak = self.soak.as_ref();
        match key {
            "failure_rate" => (self.failures.overall.n > 0).then_some(self.failures.overall.rate),
            "failure_rate_with_truncation" => {
                (self.failures.overall.n > 0).then_some(self.failures.with_truncation.rate)
            }
            "tok_s_cv" => self.main_spread().and_then(|s| s.tok_s_cv),
            "p95_latency_cv" => self.main_spread().and_then(|s| s.p95_latency_cv),
            "identical_output_rate" => consistency.and_then(|c| c.identical_output.as_ref()).map(|r| r.rate),
            "grade_agreement" => consistency.and_then(|c| c.grade_agreement),
            "flip_rate" => consistency.and_then(|c| c.flip_rate.as_ref()).map(|r| r.rate),
            "pass_at_1" => consistency.and_then(|c| c.pass_at_1),
            "pass_hat_k" => consistency.and_then(|c| c.pass_hat_k),
            "soak_tok_s_drift" => soak.and_then(|s| s.tok_s.drift),
            "soak_p95_drift" => soak.and_then(|s| s.p95_latency.drift),
            "soak_tok_s_slope" => soak.and_then(|s| s.tok_s.fit.as_ref()).map(|f| f.slope),
            "soak_p95_slope" => soak.and_then(|s| s.p95_latency.fit.as_ref()).map(|f| f.slope),
            "soak_error_bursts" => soak.map(|s| s.error_bursts as f64),
            "soak_degrading" => soak.map(|s| if s.degrading { 1.0 } else { 0.0 }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::grading::Grade;
    use crate::domain::run::{TokenSource, join_repetition};

    /// A successful record sent at `sent_s`, taking `e2e_ms`, with `tokens` out.
    fn rec(case: &str, repetition: u32, sent_s: f64, e2e_ms: f64, tokens: u32) -> RequestRecord {
        let end = (e2e_ms * 1000.0) as i64;
        RequestRecord {
            run_id: 1,
            candidate_id: 7,
            case_id: case.into(),
            phase: Phase::Quality,
            repetition,
            attempt: 0,
            concurrency: 1,
            is_warmup: false,
            sent_at_us: (sent_s * 1e6) as i64,
            client_queue_us: 0,
            connect_us: None,
            connection_reused: Some(true),
            headers_us: Some(end / 10),
            first_chunk_us: Some(end / 5),
            first_reasoning_us: None,
            first_content_us: Some(end / 5),
            last_token_us: Some(end),
            end_us: Some(end),
            chunks: vec![],
            http_status: Some(200),
            finish_reason: Some("stop".into()),
            input_tokens: Some(10),
            output_tokens: Some(tokens),
            output_tokens_source: Some(TokenSource::Usage),
            reasoning_tokens: None,
            canonical_tokens: None,
            output_chars: 0,
            output: "answer".into(),
            reasoning: None,
            error_class: None,
            error_detail: None,
            grades: vec![],
        }
    }

    fn failed(mut r: RequestRecord, class: ErrorClass) -> RequestRecord {
        r.error_class = Some(class);
        r.output_tokens = None;
        r
    }

    fn graded(mut r: RequestRecord, passed: bool, output: &str) -> RequestRecord {
        r.output = output.into();
        r.grades = vec![Grade {
            grader: "exact".into(),
            score: if passed { 1.0 } else { 0.0 },
            passed,
            reason: String::new(),
            detail: None,
            weight: 1.0,
            required: true,
        }];
        r
    }

    #[test]
    fn failure_rates_by_class_and_group_with_wilson_intervals() {
        let mut records: Vec<RequestRecord> = (0..16).map(|i| rec(&format!("c{i}"), 0, i as f64, 100.0, 10)).collect();
        records.push(failed(rec("t1", 0, 20.0, 100.0, 0), ErrorClass::FirstTokenTimeout));
        records.push(failed(rec("t2", 0, 21.0, 100.0, 0), ErrorClass::TotalTimeout));
        records.push(failed(rec("s1", 0, 22.0, 100.0, 0), ErrorClass::HttpServerError));
        let mut cut = rec("len", 0, 23.0, 100.0, 16);
        cut.finish_reason = Some("length".into());
        records.push(cut);
        // A retried request counts once, by its final attempt.
        let mut first_try = failed(rec("c0", 0, 0.0, 50.0, 0), ErrorClass::RateLimited);
        first_try.attempt = 0;
        records[0].attempt = 1;
        records.push(first_try);
        let report = stability_report(&records, 7, &StabilityOptions::default());
        let f = &report.failures;
        assert_eq!((f.overall.count, f.overall.n), (3, 20));
        assert!((f.overall.rate - 0.15).abs() < 1e-12);
        // Wilson 90 % for 3/20 (z = 1.6449, z² = 2.7057): centre (0.15 + z²/40) / (1 + z²/20)
        // = 0.1917, half-width z·sqrt(0.15·0.85/20 + z²/1600) / (1 + z²/20) = 0.1301.
        let ci = f.overall.interval.unwrap();
        assert!((ci.lo - 0.0616).abs() < 1e-3 && (ci.hi - 0.3218).abs() < 1e-3, "{ci:?}");
        assert_eq!(f.with_truncation.count, 4);
        let group = |k: &str| f.by_group.iter().find(|r| r.key == k).unwrap().count;
        assert_eq!((group("timeout"), group("server_error"), group(TRUNCATED)), (2, 1, 1));
        assert_eq!(group("rate_limited"), 0, "the retried 429 was not the final attempt");
        assert_eq!(f.by_group.len(), GROUPS.len(), "every group is listed, zero or not");
        assert_eq!(report.metric("failure_rate:first_token_timeout"), Some(0.05));
        assert_eq!(report.metric("failure_rate:timeout"), Some(0.1));
        assert_eq!(report.metric("failure_rate:truncated"), Some(0.05));
        assert_eq!(report.metric("failure_rate:stream_cut"), Some(0.0));
        assert!(
            stability_report(&[], 7, &StabilityOptions::default())
                .metric("failure_rate")
                .is_none()
        );
    }

    #[test]
    fn cv_of_throughput_and_p95_across_repetitions() {
        // Two repetitions of two requests each, one after the other.
        // Rep 0: sent 0 s and 0 s, 1 s each, 100 tokens each → 200 tok/s; p95 of [1000, 1000] = 1000.
        // Rep 1: sent 10 s, both 2 s, 100 tokens each → 100 tok/s; p95 = 2000.
        let records = vec![
            rec("a", 0, 0.0, 1000.0, 100),
            rec("b", 0, 0.0, 1000.0, 100),
            rec("a", 1, 10.0, 2000.0, 100),
            rec("b", 1, 10.0, 2000.0, 100),
        ];
        let report = stability_report(&records, 7, &StabilityOptions::default());
        let spread = report.main_spread().unwrap();
        assert_eq!(spread.repetitions.len(), 2);
        assert!((spread.repetitions[0].tok_s.unwrap() - 200.0).abs() < 1e-9);
        assert!((spread.repetitions[1].tok_s.unwrap() - 100.0).abs() < 1e-9);
        // mean 150, sample sd sqrt(2 × 50²) = 70.71 → CV 0.4714; p95: mean 1500, sd 707.1 → 0.4714.
        assert!((spread.tok_s_cv.unwrap() - 0.471_404_5).abs() < 1e-6);
        assert!((report.metric("p95_latency_cv").unwrap() - 0.471_404_5).abs() < 1e-6);
        // Cycles of one repetition (load-level runs) stay in that repetition.
        let cycled = vec![
            rec("a", join_repetition(0, 0, 0), 0.0, 1000.0, 10),
            rec("a", join_repetition(0, 0, 1), 1.0, 1000.0, 10),
        ];
        let r = stability_report(&cycled, 7, &StabilityOptions::default());
        assert_eq!(r.main_spread().unwrap().repetitions.len(), 1);
        assert_eq!(r.metric("tok_s_cv"), None, "one repetition has no spread");
    }

    #[test]
    fn self_consistency_flip_rate_and_pass_hat_k() {
        // Three cases, three repetitions each.
        // a: pass pass pass, same output.  b: pass fail pass (flips), outputs differ.
        // c: fail, fail, and a failed request (a fail), outputs "x","x".
        let mut records = Vec::new();
        for (rep, (a, b, c)) in [(true, true, false), (true, false, false), (true, true, false)]
            .into_iter()
            .enumerate()
        {
            let rep = rep as u32;
            records.push(graded(rec("a", rep, rep as f64, 100.0, 5), a, "yes"));
            records.push(graded(rec("b", rep, rep as f64, 100.0, 5), b, &format!("b{rep}")));
            if rep == 2 {
                records.push(failed(rec("c", rep, rep as f64, 100.0, 5), ErrorClass::StreamCut));
            } else {
                records.push(graded(rec("c", rep, rep as f64, 100.0, 5), c, "x"));
            }
        }
        let c = stability_report(&records, 7, &StabilityOptions::default())
            .consistency
            .unwrap();
        assert_eq!((c.cases, c.k), (3, 3));
        // Identical: a (yes×3) and c (x×2 successful) are identical; b is not → 2/3.
        let identical = c.identical_output.unwrap();
        assert_eq!((identical.count, identical.n), (2, 3));
        // Flip: only b → 1/3.
        let flips = c.flip_rate.unwrap();
        assert_eq!((flips.count, flips.n), (1, 3));
        assert_eq!(c.flipping_cases, vec!["b".to_string()]);
        // Pairs: a 3/3 agree, b (2 pass, 1 fail) 1/3 agree, c 3/3 → 7/9.
        assert!((c.grade_agreement.unwrap() - 7.0 / 9.0).abs() < 1e-12);
        // pass@1 = (1 + 2/3 + 0) / 3 = 5/9; pass^3 = (1 + 0 + 0) / 3.
        assert!((c.pass_at_1.unwrap() - 5.0 / 9.0).abs() < 1e-12);
        assert!((c.pass_hat_k.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // Unbiased pass^k: 3 passes of 4 with k = 2 → C(3,2)/C(4,2) = 3/6.
        assert!((binomial_ratio(3, 4, 2) - 0.5).abs() < 1e-12);
        assert!(consistency(&[], 0.9).is_none());
    }

    #[test]
    fn student_t_quantiles_match_tables() {
        for (p, df, want) in [
            (0.975, 1, 12.706),
            (0.975, 2, 4.303),
            (0.975, 3, 3.182),
            (0.975, 10, 2.228),
            (0.95, 8, 1.860),
            (0.95, 30, 1.697),
        ] {
            let got = t_quantile(p, df);
            assert!((got - want).abs() / want < 2e-3, "t({p}, {df}) = {got}, want {want}");
        }
    }

    #[test]
    fn least_squares_slope_and_interval() {
        // y = 2x + 1 exactly: slope 2, zero-width interval.
        let exact: Vec<(f64, f64)> = (0..5).map(|x| (x as f64, 2.0 * x as f64 + 1.0)).collect();
        let f = linear_fit(&exact, 0.9).unwrap();
        assert!((f.slope - 2.0).abs() < 1e-12 && (f.intercept - 1.0).abs() < 1e-12);
        let ci = f.slope_interval.unwrap();
        assert!(ci.width() < 1e-9);
        // (0,0) (1,1) (2,1) (3,3): mx 1.5, my 1.25, sxx 5, sxy 4.5 → slope 0.9, intercept −0.1;
        // residuals 0.1, 0.2, −0.7, 0.4 → SSR 0.7, s² 0.35, se sqrt(0.35/5) = 0.2646;
        // t(0.95, 2) = 2.92 → half-width 0.7725.
        let f = linear_fit(&[(0.0, 0.0), (1.0, 1.0), (2.0, 1.0), (3.0, 3.0)], 0.9).unwrap();
        assert!((f.slope - 0.9).abs() < 1e-12);
        let ci = f.slope_interval.unwrap();
        assert!((ci.hi - ci.lo - 2.0 * 0.7725).abs() < 2e-3, "{ci:?}");
        assert!(linear_fit(&[(1.0, 1.0), (1.0, 2.0)], 0.9).is_none());
    }

    /// A soak at concurrency 1 lasting `n` requests back to back, request i taking `e2e(i)` ms.
    fn soak(n: usize, e2e: impl Fn(usize) -> f64) -> Vec<RequestRecord> {
        let mut t = 0.0;
        (0..n)
            .map(|i| {
                let ms = e2e(i);
                let mut r = rec(&format!("c{}", i % 5), i as u32, t, ms, 20);
                r.phase = Phase::Soak;
                t += ms / 1000.0;
                r
            })
            .collect()
    }

    #[test]
    fn a_stable_soak_is_not_flagged() {
        // ±5 % deterministic wobble around 200 ms, no trend.
        let wobble = [1.0, 1.05, 0.95, 1.02, 0.98, 1.04, 0.96, 1.01, 0.99, 1.03];
        let records = soak(200, |i| {
            200.0 * wobble[i % wobble.len()] * wobble[(i / 7) % wobble.len()]
        });
        let s = stability_report(&records, 7, &StabilityOptions::default())
            .soak
            .unwrap();
        assert_eq!(s.windows.len(), 10);
        assert!(!s.degrading, "{}", s.verdict);
        assert!(s.p95_latency.drift.unwrap().abs() < 0.10);
        assert_eq!(s.error_bursts, 0);
    }

    #[test]
    fn a_restart_pause_is_left_out_of_the_soak_windows() {
        // The same stable soak, its second half sent after 10 minutes with nothing in flight.
        let wobble = [1.0, 1.05, 0.95, 1.02, 0.98];
        let mut records = soak(200, |i| 200.0 * wobble[i % wobble.len()]);
        let unbroken = stability_report(&records, 7, &StabilityOptions::default())
            .soak
            .unwrap();
        for r in &mut records[100..] {
            r.sent_at_us += 600_000_000;
        }
        let s = stability_report(&records, 7, &StabilityOptions::default())
            .soak
            .unwrap();
        assert!((s.paused_s - 600.0).abs() < 1.0, "{}", s.paused_s);
        assert!((s.duration_s - unbroken.duration_s).abs() < 1e-6, "load time only");
        assert!(
            s.windows.iter().all(|w| w.requests > 0),
            "no empty window for the pause"
        );
        assert!(!s.degrading, "{}", s.verdict);
        assert!(s.verdict.contains("600 s with nothing in flight"), "{}", s.verdict);
        assert_eq!(unbroken.paused_s, 0.0);
        assert!(!unbroken.verdict.contains("in flight"));
    }

    #[test]
    fn a_soak_whose_latency_climbs_is_flagged() {
        // Latency grows linearly from 200 ms to 400 ms over the soak (with the same wobble).
        let wobble = [1.0, 1.05, 0.95, 1.02, 0.98];
        let records = soak(200, |i| (200.0 + i as f64) * wobble[i % wobble.len()]);
        let report = stability_report(&records, 7, &StabilityOptions::default());
        let s = report.soak.as_ref().unwrap();
        assert!(s.degrading, "{}", s.verdict);
        assert!(s.verdict.starts_with("steadily degrading"));
        assert!(s.p95_latency.drift.unwrap() > 0.5, "{:?}", s.p95_latency.drift);
        assert!(s.tok_s.drift.unwrap() < -0.3, "{:?}", s.tok_s.drift);
        assert!(s.p95_latency.fit.as_ref().unwrap().slope_interval.unwrap().lo > 0.0);
        assert_eq!(report.metric("soak_degrading"), Some(1.0));
        assert!(report.metric("soak_tok_s_drift").unwrap() < 0.0);
    }

    #[test]
    fn a_small_clean_trend_is_not_degradation() {
        // +5 % over the soak with no noise: the slope is "significant" but below the 10 % floor.
        let records = soak(200, |i| 200.0 + i as f64 * 0.05);
        let s = stability_report(&records, 7, &StabilityOptions::default())
            .soak
            .unwrap();
        assert!(!s.degrading, "{}", s.verdict);
    }

    #[test]
    fn error_bursts_are_windows_far_above_the_overall_rate() {
        let mut records = soak(200, |_| 100.0);
        // Errors: 10 in a row (inside one window of 20 requests) and 2 scattered.
        for r in records.iter_mut().skip(100).take(10) {
            r.error_class = Some(ErrorClass::HttpServerError);
        }
        records[10].error_class = Some(ErrorClass::HttpServerError);
        records[180].error_class = Some(ErrorClass::HttpServerError);
        let s = stability_report(&records, 7, &StabilityOptions::default())
            .soak
            .unwrap();
        assert_eq!(
            s.error_bursts,
            1,
            "{:?}",
            s.windows.iter().map(|w| w.failed).collect::<Vec<_>>()
        );
        assert!(s.windows.iter().find(|w| w.burst).unwrap().failed >= 9);
    }

    #[test]
    fn too_short_a_soak_is_not_analysed() {
        let records = soak(5, |_| 100.0);
        assert!(
            stability_report(&records, 7, &StabilityOptions::default())
                .soak
                .is_none()
        );
    }
}
