//! Comparing archived runs: per-case improved/regressed marks against a baseline, the figures
//! of one candidate in one run (kept with their intervals), and regressions over time flagged
//! only when a change exceeds the measured noise — the new value's 95 % interval lies wholly on
//! the worse side of the previous one — never by a fixed percentage.
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::calibers::RequestFigures;
use super::grading::case_passed;
use super::load::Load;
use super::metrics::summarise_candidate_knowing;
use super::run::{Phase, RequestRecord, RunConfig};
use super::scorecard::measurement::CandidateRecords;
use super::stats::{Interval, median_ci, quantile, wilson, z_for};

/// Confidence of every interval here.
pub const CONFIDENCE: f64 = 0.95;

/// How one case went for one candidate in one run: final attempts passed out of final
/// attempts (a failed request counts as not passed; ungraded attempts are left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseOutcome {
    pub passed: u32,
    pub graded: u32,
}

impl CaseOutcome {
    pub fn rate(&self) -> Option<f64> {
        (self.graded > 0).then(|| f64::from(self.passed) / f64::from(self.graded))
    }
}

/// One attempt as the comparison needs it (a `store::RecordFact` maps onto this).
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptOutcome<'a> {
    pub case_id: &'a str,
    pub phase: Phase,
    pub repetition: u32,
    pub attempt: u32,
    pub failed: bool,
    /// Whether every grade passed; None when ungraded.
    pub passed: Option<bool>,
}

/// Per-case outcomes from one candidate's measured attempts: only the last attempt of each
/// (case, phase, repetition) counts, as everywhere else.
pub fn case_outcomes<'a>(attempts: impl IntoIterator<Item = AttemptOutcome<'a>>) -> HashMap<String, CaseOutcome> {
    let mut last: HashMap<(&str, Phase, u32), AttemptOutcome<'a>> = HashMap::new();
    for a in attempts {
        match last.get(&(a.case_id, a.phase, a.repetition)) {
            Some(prev) if prev.attempt >= a.attempt => {}
            _ => {
                last.insert((a.case_id, a.phase, a.repetition), a);
            }
        }
    }
    let mut out: HashMap<String, CaseOutcome> = HashMap::new();
    for a in last.into_values() {
        let verdict = if a.failed { Some(false) } else { a.passed };
        if let Some(pass) = verdict {
            let o = out.entry(a.case_id.to_string()).or_default();
            o.graded += 1;
            o.passed += u32::from(pass);
        }
    }
    out
}

/// A case against the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Improved,
    Regressed,
    Same,
    /// Graded on one side only (not sent, ungraded, or another eval-set version).
    NotComparable,
}

impl Mark {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mark::Improved => "improved",
            Mark::Regressed => "regressed",
            Mark::Same => "same",
            Mark::NotComparable => "not comparable",
        }
    }
}

/// A case's pass rate against the baseline's.
pub fn mark(baseline: Option<&CaseOutcome>, other: Option<&CaseOutcome>) -> Mark {
    match (baseline.and_then(CaseOutcome::rate), other.and_then(CaseOutcome::rate)) {
        (Some(b), Some(o)) if (o - b).abs() < 1e-12 => Mark::Same,
        (Some(b), Some(o)) if o > b => Mark::Improved,
        (Some(_), Some(_)) => Mark::Regressed,
        _ => Mark::NotComparable,
    }
}

/// One candidate's key figures in one run, each with its 95 % interval where it has one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub candidate_id: i64,
    pub requests: usize,
    pub failures: usize,
    pub accuracy: Option<f64>,
    /// Wilson interval of the (unweighted) pass rate over graded final attempts.
    pub accuracy_ci: Option<Interval>,
    pub graded: usize,
    pub failure_rate: Option<f64>,
    pub failure_ci: Option<Interval>,
    pub ttft_p50_ms: Option<f64>,
    /// Bootstrap interval of the median.
    pub ttft_ci: Option<Interval>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_ci: Option<Interval>,
    pub decode_p50_tok_s: Option<f64>,
    pub decode_ci: Option<Interval>,
    /// Steady-window aggregate when the run measured one load level (else per level only).
    pub aggregate_tok_s: Option<f64>,
    pub concurrency: Option<u32>,
    /// Aggregate tok/s of every closed-loop level, from the one level computation
    /// (`calibers::figures_at_concurrency`), ascending by concurrency.
    #[serde(default)]
    pub levels: Vec<LevelAggregate>,
    /// Successful final attempts by where their output-token count came from (the caliber of
    /// every tok/s figure: `usage`, `server-tokenizer`, `tokenizer`, `chunks`).
    #[serde(default)]
    pub token_sources: BTreeMap<String, u64>,
    /// Most segments a level was measured in: more than one when the run was resumed (every
    /// aggregate is then per segment, the downtime left out), as on the run page.
    #[serde(default = "one")]
    pub segments: u32,
    /// Seconds of downtime left out of the aggregates.
    #[serde(default)]
    pub downtime_s: f64,
}

fn one() -> u32 {
    1
}

/// The figures of one load level of a run: its latencies with their intervals (p50 from the
/// one level computation, the run page's) and its aggregates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelAggregate {
    pub concurrency: u32,
    /// Steady window (ramp-up and drain left out).
    pub steady_tok_s: Option<f64>,
    /// Whole run (first send → last token).
    pub whole_run_tok_s: Option<f64>,
    #[serde(default)]
    pub ttft_p50_ms: Option<f64>,
    #[serde(default)]
    pub ttft_ci: Option<Interval>,
    #[serde(default)]
    pub e2e_p50_ms: Option<f64>,
    #[serde(default)]
    pub e2e_ci: Option<Interval>,
    #[serde(default)]
    pub decode_p50_tok_s: Option<f64>,
    #[serde(default)]
    pub decode_ci: Option<Interval>,
    /// Segments this level was measured in (see [`Figures::segments`]).
    #[serde(default = "one")]
    pub segments: u32,
    #[serde(default)]
    pub downtime_s: f64,
}

/// The figures of `candidate_id` from a run's records (warm-ups excluded, final attempts), the
/// run resumed at `resumes` (`calibers::resumes_of`): aggregates per segment, as the run page
/// and the scorecard take them.
pub fn figures(
    candidate_id: i64,
    records: &[RequestRecord],
    case_weight: impl Fn(&str) -> f64,
    resumes: &[i64],
) -> Figures {
    // Per level, the final attempts the scorecard and run page read (a request is one case,
    // repetition and level: keyed without the level, a sweep kept one level's record per case).
    let per_level = CandidateRecords::new(candidate_id, records).with_resumes(resumes);
    figures_of(&per_level, records, case_weight)
}

/// `figures` from a candidate's records prepared already (`CandidateRecords`, resumed), whose
/// level figures, once computed, are shared with whatever else reads them.
pub fn figures_of(
    per_level: &CandidateRecords<'_>,
    records: &[RequestRecord],
    case_weight: impl Fn(&str) -> f64,
) -> Figures {
    let (candidate_id, resumes) = (per_level.candidate_id, per_level.resumes.as_slice());
    let level_at = |c: u32| per_level.level_at(c);
    let s = summarise_candidate_knowing(candidate_id, records, case_weight, resumes, Some(&level_at));
    // The same final attempts the summary used, for the intervals.
    let measured = records
        .iter()
        .filter(|r| r.candidate_id == candidate_id && !r.is_warmup);
    let finals = crate::run::last_attempts(measured, |r| (r.case_id.as_ref(), r.phase.as_str(), r.repetition));
    let levels: Vec<LevelAggregate> = per_level
        .concurrencies()
        .into_iter()
        .filter(|&c| c > 0)
        .filter_map(|c| {
            let l = per_level.level_at(c)?;
            let mut at = per_level.finals_at(c);
            at.retain(|r| r.succeeded());
            let [ttft_ci, e2e_ci, decode_ci] = latency_intervals(&at);
            Some(LevelAggregate {
                concurrency: c,
                steady_tok_s: l.aggregate_tok_s,
                whole_run_tok_s: l.whole_run_tok_s,
                ttft_p50_ms: l.ttft_ms.as_ref().map(|d| d.p50),
                ttft_ci,
                e2e_p50_ms: l.e2e_ms.as_ref().map(|d| d.p50),
                e2e_ci,
                decode_p50_tok_s: l.decode_tok_s_per_stream.as_ref().map(|d| d.p50),
                decode_ci,
                segments: l.segments,
                downtime_s: l.downtime_s,
            })
        })
        .collect();
    let (mut passed, mut graded) = (0u64, 0u64);
    for r in &finals {
        let verdict = if r.succeeded() {
            case_passed(&r.grades)
        } else {
            Some(false)
        };
        if let Some(p) = verdict {
            graded += 1;
            passed += u64::from(p);
        }
    }
    // A run's headline latencies are those of its level (a sweep's first), from the one level
    // computation; only an open loop, which has no closed-loop level, pools its requests.
    // The pooled intervals are bootstraps over every request: taken only when no level heads.
    let pooled = || {
        let ok: Vec<&RequestRecord> = finals.iter().copied().filter(|r| r.succeeded()).collect();
        let [ttft_ci, e2e_ci, decode_ci] = latency_intervals(&ok);
        LevelAggregate {
            concurrency: s.concurrency.unwrap_or(0),
            steady_tok_s: s.aggregate_tok_s,
            whole_run_tok_s: s.whole_run_tok_s,
            ttft_p50_ms: s.ttft_ms.as_ref().map(|d| d.p50),
            ttft_ci,
            e2e_p50_ms: s.e2e_ms.as_ref().map(|d| d.p50),
            e2e_ci,
            decode_p50_tok_s: s.decode_tok_s_per_stream.as_ref().map(|d| d.p50),
            decode_ci,
            segments: 1,
            downtime_s: 0.0,
        }
    };
    let headline = levels
        .iter()
        .find(|l| Some(l.concurrency) == s.concurrency)
        .cloned()
        .unwrap_or_else(pooled);
    let resumed = levels.iter().max_by_key(|l| l.segments);
    Figures {
        segments: resumed.map_or(1, |l| l.segments),
        downtime_s: resumed.map_or(0.0, |l| l.downtime_s),
        candidate_id,
        requests: s.requests,
        failures: s.failures,
        accuracy: s.accuracy,
        accuracy_ci: wilson(passed, graded, CONFIDENCE),
        graded: s.graded,
        failure_rate: s.failure_rate,
        failure_ci: wilson(s.failures as u64, s.requests as u64, CONFIDENCE),
        ttft_p50_ms: headline.ttft_p50_ms,
        ttft_ci: headline.ttft_ci,
        e2e_p50_ms: headline.e2e_p50_ms,
        e2e_ci: headline.e2e_ci,
        decode_p50_tok_s: headline.decode_p50_tok_s,
        decode_ci: headline.decode_ci,
        aggregate_tok_s: s.aggregate_tok_s.filter(|_| s.failures < s.requests),
        concurrency: s.concurrency,
        levels,
        token_sources: s
            .token_sources
            .iter()
            .map(|(source, n)| (source.as_str().to_string(), *n as u64))
            .collect(),
    }
}

/// TTFT and E2E (ms) and decode tok/s samples of successful requests, for their intervals.
/// Intervals of the median TTFT (ms), E2E (ms) and decode rate of `ok`: each sample is taken,
/// used and let go before the next (a candidate's 500,000 requests: 4 MB held, not 12).
fn latency_intervals(ok: &[&RequestRecord]) -> [Option<Interval>; 3] {
    let ms = |us: i64| us as f64 / 1000.0;
    [
        median_interval(ok.iter().filter_map(|r| r.ttft_us()).map(ms).collect()),
        median_interval(ok.iter().filter_map(|r| r.end_us.get()).map(ms).collect()),
        median_interval(ok.iter().filter_map(|r| RequestFigures::of(r)?.decode_tok_s).collect()),
    ]
}

/// What a column's figures were measured under. Figures are compared (▲/▼) only between
/// columns whose conditions match — like with like — and the page says what was not compared
/// and why. See docs/measurement.md "Comparing runs".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// Where output tokens were counted (the caliber of every tok/s): `usage`,
    /// `server-tokenizer`, `tokenizer`, `chunks`, as found in the measured records.
    pub caliber: Vec<String>,
    /// The load levels measured (`c=4`; a sweep `c=1`, `c=2`…; an open loop `2 req/s`).
    pub levels: Vec<String>,
    /// The eval-set version's content hash (it fixes the prompts).
    pub evalset_version: String,
    /// Only the first N cases.
    pub case_limit: Option<u32>,
    /// The run's max_tokens override (None: each case's or the candidate's own).
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub stream: bool,
    /// Threshold profiles that judged the run (`default v3`): shown; no mark on the compare page
    /// depends on them (it shows figures and cases, not verdicts).
    pub profiles: Vec<String>,
    /// How tool cases were sent. Shown (and marked where it differs), never a reason not to
    /// compare: comparing a model's native tool API with its prompt mode is what a team wants
    /// to see side by side.
    #[serde(default)]
    pub tool_mode: crate::tool_calls::RunToolMode,
}

/// Which figures a difference in conditions keeps from being compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Accuracy and per-case marks: graded answers depend on the prompts, max_tokens and
    /// temperature, not on load, streaming or how tokens were counted.
    Quality,
    /// Latency, tok/s and failure rate: depend on every condition but the profile.
    Speed,
    /// Per-case marks: matched by case id, even across eval-set versions (the page warns), so
    /// only how answers were generated must agree.
    Cases,
}

impl Conditions {
    /// The conditions of one column: the run's configuration, its eval-set version, the
    /// figures measured (their levels and token sources) and the profiles that judged it.
    pub fn of(config: &RunConfig, evalset_version: &str, figures: &Figures, profiles: Vec<String>) -> Conditions {
        let mut levels: Vec<String> = figures.levels.iter().map(|l| format!("c={}", l.concurrency)).collect();
        if levels.is_empty() {
            levels = config.load.loads(config.concurrency).iter().map(Load::label).collect();
        }
        Conditions {
            caliber: figures.token_sources.keys().cloned().collect(),
            levels,
            evalset_version: evalset_version.to_string(),
            case_limit: config.case_limit,
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            stream: config.stream,
            profiles,
            tool_mode: config.tool_mode,
        }
    }

    /// "c=4", or "sweep: c=1, c=2, c=4".
    pub fn load_text(&self) -> String {
        match self.levels.as_slice() {
            [one] => one.clone(),
            many => format!("{} levels: {}", many.len(), many.join(", ")),
        }
    }

    /// Each condition as (name, text), in the order the page shows them.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "caliber",
                if self.caliber.is_empty() {
                    "no output tokens".to_string()
                } else {
                    format!("tokens: {}", self.caliber.join(" + "))
                },
            ),
            ("load", self.load_text()),
            (
                "prompts",
                match self.case_limit {
                    Some(n) => format!("first {n} cases"),
                    None => "every case".to_string(),
                },
            ),
            (
                "max tokens",
                self.max_tokens.map_or("each case's own".to_string(), |n| n.to_string()),
            ),
            (
                "temperature",
                self.temperature
                    .map_or("each case's own".to_string(), |t| format!("{t}")),
            ),
            ("streaming", if self.stream { "on" } else { "off" }.to_string()),
            (
                "tool calls",
                match self.tool_mode {
                    crate::tool_calls::RunToolMode::Native => "native API",
                    crate::tool_calls::RunToolMode::Prompt => "prompt mode",
                    crate::tool_calls::RunToolMode::Both => "both modes (… (prompt mode) columns)",
                }
                .to_string(),
            ),
            ("eval-set version", self.evalset_version.clone()),
            (
                "profile version",
                if self.profiles.is_empty() {
                    "not judged".to_string()
                } else {
                    self.profiles.join(", ")
                },
            ),
        ]
    }

    /// The conditions (load levels aside, which are matched level by level) that differ from
    /// `base` and keep figures of `scope` from being compared: "streaming: on vs off".
    pub fn differences(&self, base: &Conditions, scope: Scope) -> Vec<String> {
        let relevant: &[&str] = match scope {
            Scope::Quality => &["prompts", "max tokens", "temperature", "eval-set version"],
            Scope::Cases => &["max tokens", "temperature"],
            Scope::Speed => &[
                "caliber",
                "prompts",
                "max tokens",
                "temperature",
                "streaming",
                "eval-set version",
            ],
        };
        base.rows()
            .into_iter()
            .zip(self.rows())
            .filter(|((name, a), (_, b))| relevant.contains(name) && a != b)
            .map(|((name, a), (_, b))| format!("{name}: {a} vs {b}"))
            .collect()
    }

    /// Everything but the profile: runs with the same key were measured alike, and a trend
    /// line may go through them. Also the series' label on the history page.
    pub fn series_key(&self) -> String {
        self.rows()
            .into_iter()
            .filter(|(name, _)| *name != "profile version")
            .map(|(name, text)| format!("{name} {text}"))
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// Samples up to this size get a bootstrap interval of the median; larger ones the
/// distribution-free order-statistic interval (the bootstrap's cost grows with n × resamples).
pub const BOOTSTRAP_MAX_SAMPLE: usize = 2_000;

/// 95 % interval of the median of `sample` (None when empty). Takes the sample to reorder it
/// in place: a big sample is neither copied nor sorted.
pub fn median_interval(mut sample: Vec<f64>) -> Option<Interval> {
    if sample.len() <= BOOTSTRAP_MAX_SAMPLE {
        return median_ci(&sample, CONFIDENCE);
    }
    // Ranks n/2 ± z·√n/2 of the sorted sample bound the median with the stated coverage
    // (normal approximation to the binomial; exact enough at these sizes); each is selected.
    sample.retain(|v| v.is_finite());
    if sample.is_empty() {
        return None;
    }
    let n = sample.len() as f64;
    let half = z_for(CONFIDENCE) * n.sqrt() / 2.0;
    let lo = ((n / 2.0 - half).floor().max(0.0) / (n - 1.0).max(1.0)).min(1.0);
    let hi = ((n / 2.0 + half).ceil().min(n - 1.0) / (n - 1.0).max(1.0)).min(1.0);
    Some(Interval {
        lo: quantile(&mut sample, lo),
        hi: quantile(&mut sample, hi),
        confidence: CONFIDENCE,
    })
}

/// Which way is better for a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// Whether moving from `previous` to `current` is a regression beyond the measured noise: the
/// current interval lies entirely on the worse side of the previous one (they do not overlap).
/// Without both intervals nothing is flagged: a change that cannot be told from noise is not
/// a regression.
pub fn regressed_beyond_noise(previous: Option<&Interval>, current: Option<&Interval>, better: Better) -> bool {
    match (previous, current) {
        (Some(p), Some(c)) => match better {
            Better::Higher => c.hi < p.lo,
            Better::Lower => c.lo > p.hi,
        },
        _ => false,
    }
}

/// The same test the other way round: an improvement beyond the noise.
pub fn improved_beyond_noise(previous: Option<&Interval>, current: Option<&Interval>, better: Better) -> bool {
    let flipped = match better {
        Better::Higher => Better::Lower,
        Better::Lower => Better::Higher,
    };
    regressed_beyond_noise(previous, current, flipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn att(case: &str, rep: u32, attempt: u32, failed: bool, passed: Option<bool>) -> AttemptOutcome<'_> {
        AttemptOutcome {
            case_id: case,
            phase: Phase::Quality,
            repetition: rep,
            attempt,
            failed,
            passed,
        }
    }

    #[test]
    fn outcomes_count_final_attempts_and_failures_as_not_passed() {
        let o = case_outcomes([
            att("a", 0, 0, false, Some(true)),
            att("a", 1, 0, false, Some(false)),
            att("b", 0, 0, true, None),
            att("b", 0, 1, false, Some(true)), // the retry counts
            att("c", 0, 0, true, None),
            att("d", 0, 0, false, None), // ungraded
        ]);
        assert_eq!(o["a"], CaseOutcome { passed: 1, graded: 2 });
        assert_eq!(o["b"], CaseOutcome { passed: 1, graded: 1 });
        assert_eq!(o["c"], CaseOutcome { passed: 0, graded: 1 });
        assert!(!o.contains_key("d"));
    }

    #[test]
    fn marks_compare_pass_rates_against_the_baseline() {
        let full = CaseOutcome { passed: 3, graded: 3 };
        let some = CaseOutcome { passed: 1, graded: 3 };
        let none = CaseOutcome { passed: 0, graded: 0 };
        assert_eq!(mark(Some(&some), Some(&full)), Mark::Improved);
        assert_eq!(mark(Some(&full), Some(&some)), Mark::Regressed);
        assert_eq!(
            mark(Some(&full), Some(&CaseOutcome { passed: 2, graded: 2 })),
            Mark::Same
        );
        assert_eq!(mark(Some(&full), None), Mark::NotComparable);
        assert_eq!(mark(Some(&none), Some(&full)), Mark::NotComparable);
    }

    #[test]
    fn regressions_are_flagged_only_beyond_the_noise() {
        let i = |lo, hi| {
            Some(Interval {
                lo,
                hi,
                confidence: CONFIDENCE,
            })
        };
        // Accuracy 0.90 [0.85, 0.94] → 0.80 [0.74, 0.84]: worse beyond noise.
        assert!(regressed_beyond_noise(
            i(0.85, 0.94).as_ref(),
            i(0.74, 0.84).as_ref(),
            Better::Higher
        ));
        // → 0.86 [0.80, 0.90]: within noise, even though 4 points lower.
        assert!(!regressed_beyond_noise(
            i(0.85, 0.94).as_ref(),
            i(0.80, 0.90).as_ref(),
            Better::Higher
        ));
        // TTFT (lower is better) 200 ms [190, 210] → 260 [250, 270]: regression.
        assert!(regressed_beyond_noise(
            i(190.0, 210.0).as_ref(),
            i(250.0, 270.0).as_ref(),
            Better::Lower
        ));
        assert!(improved_beyond_noise(
            i(250.0, 270.0).as_ref(),
            i(190.0, 210.0).as_ref(),
            Better::Lower
        ));
        assert!(!regressed_beyond_noise(None, i(0.0, 1.0).as_ref(), Better::Higher));
    }

    #[test]
    fn large_samples_get_an_order_statistic_interval_around_the_median() {
        let sample: Vec<f64> = (0..10_001).map(f64::from).collect();
        let i = median_interval(sample.clone()).unwrap();
        assert!(i.lo < 5000.0 && i.hi > 5000.0, "{i:?}");
        // ±1.96·√n/2 ≈ ±98 ranks.
        assert!((i.hi - i.lo - 196.0).abs() < 4.0, "{i:?}");
        // The order statistics are selected, not read off a sorted copy: the order given and
        // values that are no number change nothing.
        let mut shuffled: Vec<f64> = (0..10_001).map(|k| f64::from((k * 7_919) % 10_001)).collect();
        shuffled.extend([f64::NAN, f64::INFINITY]);
        assert_eq!(median_interval(shuffled), Some(i));
        assert!(median_interval(Vec::new()).is_none());
    }

    #[test]
    fn figures_carry_intervals_from_final_attempts() {
        use crate::run::TokenSource;
        let rec = |case: &str, rep: u32, ttft_ms: i64, pass: bool| RequestRecord {
            candidate_id: 5,
            repetition: rep,
            sent_at_us: 1_000_000 * i64::from(rep),
            first_chunk_us: Some(ttft_ms * 1000).into(),
            first_content_us: Some(ttft_ms * 1000).into(),
            last_token_us: Some(ttft_ms * 1000 + 100_000).into(),
            end_us: Some(ttft_ms * 1000 + 100_000).into(),
            input_tokens: Some(5),
            output_tokens: Some(11),
            output_tokens_source: Some(TokenSource::Usage),
            output_chars: 40,
            ..RequestRecord::test_quality(case).with_output("x").graded_exact(pass)
        };
        let records: Vec<RequestRecord> = (0..20)
            .map(|i| rec(&format!("c{i}"), 0, 100 + i64::from(i), i % 4 != 0))
            .collect();
        let f = figures(5, &records, |_| 1.0, &[]);
        assert_eq!((f.requests, f.graded), (20, 20));
        assert_eq!(f.accuracy, Some(0.75));
        let ci = f.accuracy_ci.unwrap();
        assert!(ci.lo < 0.75 && ci.hi > 0.75);
        let t = f.ttft_ci.unwrap();
        assert!(t.lo <= f.ttft_p50_ms.unwrap() && f.ttft_p50_ms.unwrap() <= t.hi);
        assert!((f.decode_p50_tok_s.unwrap() - 100.0).abs() < 1e-9, "10 tokens in 0.1 s");
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<Figures>(&json).unwrap(), f, "cached as JSON");
    }
}
