//! What a scorecard needs of one candidate's records, computed once: every record-derived
//! measurement the run can be judged by (each catalog metric at each load measured, each error
//! class, each grader that graded), the token totals and answers its cost is priced from, its
//! per-case outcomes, per-level figures and the usage of its judge calls.
//!
//! A summary holds *measured inputs*, never a verdict: any threshold profile (any version) is
//! assessed from it, and prices, probes and checklists, which live outside the run, are applied
//! when the scorecard is built. `scorecard::build` goes through a summary too, so a scorecard
//! built from records and one built from a stored summary are the same.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::intervals::quantile_of;
use super::measurement::{CandidateRecords, Extras, Measurement, SampleUnit, measure};
use crate::calibers::{LevelFigures, RequestFigures};
use crate::cost::{Answered, TokenTotals};
use crate::evalset::EvalSetFile;
use crate::grading::judge_name_for_attempt;
use crate::paired::CaseResults;
use crate::run::{ClockCounts, ErrorClass, Phase, RequestRecord};
use crate::thresholds::catalog::{CATALOG, Param};
use crate::thresholds::key::MetricKey;
use crate::thresholds::units::{Dimension, Uncertainty};

/// Most TTFT values a level keeps for the distribution chart: evenly spaced order statistics
/// of the sorted values (all of them when there are fewer).
pub const TTFT_POINTS: usize = 512;

/// One load level of a candidate, as the scorecard's claims, pipeline and charts read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelSummary {
    pub concurrency: u32,
    /// The level's figures (the one level computation every page shows).
    pub figures: Option<LevelFigures>,
    /// Final attempts at the level.
    pub finals: usize,
    /// Median of the successful requests' decode tok/s per stream (a claim's caliber).
    pub decode_tok_s_median: Option<f64>,
    /// Median of the successful requests' end-to-end tok/s per stream (a claim's caliber).
    pub e2e_tok_s_median: Option<f64>,
    /// Mean input and output tokens of the successful requests.
    pub input_tokens_mean: Option<f64>,
    pub output_tokens_mean: Option<f64>,
    /// Mean E2E of the successful requests, seconds (the model stage of a pipeline).
    pub e2e_mean_s: Option<f64>,
    /// TTFT of the successful requests, ms, ascending: at most [`TTFT_POINTS`] evenly spaced
    /// order statistics (the TTFT distribution chart's steps).
    pub ttft_ms: Vec<f64>,
}

/// The judge calls made for a candidate's outputs, with their tokens per judge named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeUsage {
    pub calls: usize,
    pub failed: usize,
    /// Tokens per judge name the eval set gives the call (None: it names none), in the order
    /// first met.
    pub by_judge: Vec<JudgeTokens>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeTokens {
    pub judge: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One candidate's records reduced to what its scorecard shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateSummary {
    pub candidate_id: i64,
    /// Whether the candidate has any measured request (a final attempt).
    pub measured: bool,
    /// Final attempts that failed (a grader's mean counts them as 0).
    pub failed_finals: usize,
    /// Set when no final attempt reached the endpoint (every one failed to connect): the model
    /// was not measured, so it gets no verdict of GO or NO-GO (`unreachable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    /// Every record-derived measurement the run offers, by [`slot`].
    pub measurements: BTreeMap<String, Measurement>,
    pub tokens: TokenTotals,
    pub answered: Answered,
    /// Per case: right on every graded final attempt (paired comparisons, baselines).
    pub correct_cases: CaseResults,
    /// Every load measured, ascending.
    pub levels: Vec<LevelSummary>,
    /// None without judge calls, or when the eval set was not at hand to name the judges.
    pub judge: Option<JudgeUsage>,
    /// Which clock timed the measured requests (absent in summaries stored before it was).
    #[serde(default)]
    pub clocks: ClockCounts,
}

impl CandidateSummary {
    /// The level measured at concurrency `c`.
    pub fn level(&self, c: u32) -> Option<&LevelSummary> {
        self.levels.iter().find(|l| l.concurrency == c)
    }

    /// The level figures at concurrency `c`.
    pub fn figures_at(&self, c: u32) -> Option<&LevelFigures> {
        self.level(c)?.figures.as_ref()
    }

    /// Every concurrency measured, ascending.
    pub fn concurrencies(&self) -> Vec<u32> {
        self.levels.iter().map(|l| l.concurrency).collect()
    }

    /// The measurement of `key` (a rule without `@c=N` at `run_concurrency`). Probe, checklist
    /// and cost figures come from `extras`, which live outside the run.
    pub fn measure(&self, key: &MetricKey, run_concurrency: u32, extras: &Extras<'_>) -> Measurement {
        let def = key.def();
        if !from_records(def.base) || def.not_measured_yet.is_some() {
            // Nothing of the records is read for these.
            return measure(
                key,
                &CandidateRecords::default(),
                run_concurrency,
                &HashMap::new(),
                extras,
            );
        }
        if let Some(m) = self.measurements.get(&slot(key, run_concurrency)) {
            return m.clone();
        }
        self.unmeasured(key, run_concurrency)
    }

    /// A record-derived key the run has no records for: a load it did not measure, or a grader
    /// that graded nothing. The same measurement `measure` makes from the records.
    fn unmeasured(&self, key: &MetricKey, run_concurrency: u32) -> Measurement {
        let def = key.def();
        let c = def.per_load.then(|| key.concurrency.unwrap_or(run_concurrency));
        let missing = |why: String| Measurement {
            value: None,
            interval: None,
            uncertainty: def.uncertainty,
            n: 0.0,
            unit: SampleUnit::Requests,
            concurrency: c,
            missing: Some(why),
        };
        let early = def.uncertainty != Uncertainty::Exact && def.dimension != Dimension::Operability;
        match c {
            Some(c) if early && self.measured => missing(format!("not measured at c={c}")),
            _ if early && !self.measured => missing("no measured requests yet".to_string()),
            // Shares of attempts at a load with none: nothing to count.
            Some(_) => Measurement {
                uncertainty: Uncertainty::Proportion,
                unit: SampleUnit::Attempts,
                ..missing("nothing to count".to_string())
            },
            // A grader named by no grade: its mean would count the failed requests as 0.
            None => Measurement {
                n: self.failed_finals as f64,
                ..missing(format!(
                    "no grade from a grader named {:?}",
                    key.param.as_deref().unwrap_or_default()
                ))
            },
        }
    }
}

/// Whether a metric is computed from the run's records (else from prices, probes or the
/// checklist, outside the run).
fn from_records(base: &str) -> bool {
    !matches!(
        base,
        "cost_per_1k_cases"
            | "cost_per_correct"
            | "joules_per_output_token"
            | "capacity_at_slo"
            | "capacity_at_slo_users"
            | "cost_per_1k_answers_at_capacity"
            | "cost_per_1k_correct_at_capacity"
            | "operability_score"
            | "probes_passed_share"
            | "checklist_share"
            | "probe"
            | "checklist"
            | "blind_win_rate"
            | "judge_win_rate"
    )
}

/// Where a key's measurement is kept: `base[:param][@c=N]`, the load of a per-load metric
/// always written (a rule without one is judged at the run's), an error class by its name.
pub fn slot(key: &MetricKey, run_concurrency: u32) -> String {
    let def = key.def();
    let mut s = def.base.to_string();
    let param = match key.error_class() {
        Some(class) => Some(class.as_str().to_string()),
        None => key.param.clone(),
    };
    if let Some(p) = param {
        s.push(':');
        s.push_str(&p);
    }
    if def.per_load {
        s.push_str(&format!("@c={}", key.concurrency.unwrap_or(run_concurrency)));
    }
    s
}

/// What `summarise` reads besides the records.
pub struct SummaryContext<'a> {
    /// The run's configured concurrency (rules without `@c=N` are judged at it).
    pub run_concurrency: u32,
    /// Case weights from the eval set (missing cases weigh 1).
    pub weights: &'a HashMap<String, f64>,
    /// When the run was resumed (wall clock µs): aggregates per segment.
    pub resumes: &'a [i64],
    /// The run's SLO, which `slo_attainment` counts requests against.
    pub slo: crate::run::Slo,
    /// The eval set, to name each judge call's judge (None: judge usage left out).
    pub file: Option<&'a EvalSetFile>,
}

/// Reduces one candidate's records (the run's records; others are skipped) to its summary.
pub fn summarise(candidate_id: i64, records: &[RequestRecord], cx: &SummaryContext<'_>) -> CandidateSummary {
    let data = CandidateRecords::new(candidate_id, records).with_resumes(cx.resumes);
    summarise_data(&data, records, cx)
}

/// `summarise` from the candidate's records prepared already (`CandidateRecords`, resumed as
/// `cx` says), whose level figures, once computed, are shared with whatever else reads them.
pub fn summarise_data(
    data: &CandidateRecords<'_>,
    records: &[RequestRecord],
    cx: &SummaryContext<'_>,
) -> CandidateSummary {
    let run_c = cx.run_concurrency;
    let mut loads = data.concurrencies();
    if !loads.contains(&run_c) {
        loads.push(run_c);
    }
    let graders: BTreeSet<&str> = data
        .finals
        .iter()
        .flat_map(|r| r.grades.iter().map(|g| &*g.grader))
        .collect();
    let mut measurements = BTreeMap::new();
    for def in CATALOG {
        if !from_records(def.base) || def.not_measured_yet.is_some() {
            continue;
        }
        let params: Vec<Option<String>> = match def.param {
            Param::None => vec![None],
            Param::ErrorClass => std::iter::once(None)
                .chain(ErrorClass::ALL.iter().map(|c| Some(c.as_str().to_string())))
                .collect(),
            Param::Grader => graders.iter().map(|g| Some(g.to_string())).collect(),
            // Every turn a conversation may have: a rule on a turn no record reached says why.
            Param::Turn => (1..=crate::evalset::conversation::MAX_TURNS)
                .map(|t| Some(t.to_string()))
                .collect(),
            Param::Probe | Param::ChecklistItem | Param::Incumbent => Vec::new(),
        };
        let concurrencies: Vec<Option<u32>> = if def.per_load {
            loads.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        for param in &params {
            for &concurrency in &concurrencies {
                let key = MetricKey {
                    base: def.base,
                    param: param.clone(),
                    concurrency,
                };
                let extras = Extras {
                    slo: Some(&cx.slo),
                    ..Extras::default()
                };
                let m = measure(&key, data, run_c, cx.weights, &extras);
                measurements.insert(slot(&key, run_c), m);
            }
        }
    }
    let cases: BTreeSet<&str> = data.finals.iter().map(|r| r.case_id.as_ref()).collect();
    CandidateSummary {
        candidate_id: data.candidate_id,
        measured: !data.finals.is_empty(),
        failed_finals: data.finals.iter().filter(|r| !r.succeeded()).count(),
        unreachable: unreachable(&data.finals),
        measurements,
        tokens: TokenTotals::from_records(data.attempts.iter().copied()),
        answered: Answered {
            answers: data.finals.len(),
            cases: cases.len(),
            correct: data.correct_requests(),
        },
        correct_cases: data.correct_cases(),
        levels: data
            .concurrencies()
            .into_iter()
            .map(|c| level_summary(data, c))
            .collect(),
        judge: cx.file.and_then(|file| judge_usage(data.candidate_id, records, file)),
        clocks: ClockCounts::of(data.finals.iter().copied()),
    }
}

/// "not measured: …" when every final attempt failed before reaching the endpoint (refused,
/// unknown host, TLS, connect timeout): such a run says nothing of the model — a down endpoint
/// or a wrong URL is not a NO-GO of the model behind it.
pub fn unreachable(finals: &[&RequestRecord]) -> Option<String> {
    use crate::run::ErrorClass::{ConnectRefused, ConnectTimeout, Dns, Tls};
    let mut classes: Vec<&str> = Vec::new();
    for r in finals {
        match r.error_class {
            Some(c @ (ConnectRefused | Dns | Tls | ConnectTimeout)) => {
                if !classes.contains(&c.as_str()) {
                    classes.push(c.as_str());
                }
            }
            _ => return None,
        }
    }
    (!finals.is_empty()).then(|| {
        format!(
            "not measured: the endpoint could not be reached — all {} requests failed to connect ({}); check its URL and that it is up, then run again",
            finals.len(),
            classes.join(", ")
        )
    })
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// One level's summary. Each sample is taken, reduced and let go before the next: a level of
/// 500,000 requests holds two vectors of them at once (4 MB each), not seven.
fn level_summary(data: &CandidateRecords<'_>, c: u32) -> LevelSummary {
    let mut ok = data.finals_at(c);
    let finals = ok.len();
    ok.retain(|r| r.succeeded());
    let median_of = |mut sample: Vec<f64>| quantile_of(&mut sample, 0.5);
    let decode_tok_s_median = median_of(ok.iter().filter_map(|r| RequestFigures::of(r)?.decode_tok_s).collect());
    let e2e_tok_s_median = median_of(
        ok.iter()
            .filter_map(|r| {
                let (t, end) = (f64::from(r.output_tokens?), r.end_us.get()?);
                (end > 0).then(|| t / (end as f64 / 1e6))
            })
            .collect(),
    );
    let mut ttft: Vec<f64> = ok
        .iter()
        .filter_map(|r| r.ttft_us())
        .map(|us| us as f64 / 1000.0)
        .collect();
    ttft.sort_unstable_by(|a, b| a.total_cmp(b));
    LevelSummary {
        concurrency: c,
        figures: data.level_at(c),
        finals,
        decode_tok_s_median,
        e2e_tok_s_median,
        input_tokens_mean: mean(ok.iter().filter_map(|r| r.input_tokens.map(f64::from))),
        output_tokens_mean: mean(ok.iter().filter_map(|r| r.output_tokens.map(f64::from))),
        // Summed in order and divided, as the pipeline impact always took it.
        e2e_mean_s: mean(ok.iter().filter_map(|r| r.end_us.get()).map(|us| us as f64 / 1e6)),
        ttft_ms: thin_sorted(ttft, TTFT_POINTS),
    }
}

/// At most `points` evenly spaced order statistics of ascending `values`, first and last kept.
pub fn thin_sorted(values: Vec<f64>, points: usize) -> Vec<f64> {
    if values.len() <= points || points < 2 {
        return values;
    }
    let last = values.len() - 1;
    (0..points)
        .map(|i| values[(i * last + (points - 1) / 2) / (points - 1)])
        .collect()
}

/// The judge calls made for one candidate's outputs (phase `judge`), grouped by the judge the
/// eval set names for each; None when there were none.
pub fn judge_usage(candidate_id: i64, records: &[RequestRecord], file: &EvalSetFile) -> Option<JudgeUsage> {
    let cases: HashMap<&str, &crate::evalset::EvalCase> = file.cases.iter().map(|k| (k.id.as_str(), k)).collect();
    let mut usage = JudgeUsage {
        calls: 0,
        failed: 0,
        by_judge: Vec::new(),
    };
    for r in records
        .iter()
        .filter(|r| r.phase == Phase::Judge && r.candidate_id == candidate_id)
    {
        usage.calls += 1;
        if !r.succeeded() {
            usage.failed += 1;
        }
        let judge = cases
            .get(r.case_id.as_ref())
            .and_then(|k| judge_name_for_attempt(file.graders_for(k), r.attempt))
            .map(str::to_string);
        let i = match usage.by_judge.iter().position(|t| t.judge == judge) {
            Some(i) => i,
            None => {
                usage.by_judge.push(JudgeTokens {
                    judge,
                    input_tokens: 0,
                    output_tokens: 0,
                });
                usage.by_judge.len() - 1
            }
        };
        usage.by_judge[i].input_tokens += u64::from(r.input_tokens.unwrap_or(0));
        usage.by_judge[i].output_tokens += u64::from(r.output_tokens.unwrap_or(0));
    }
    (usage.calls > 0).then_some(usage)
}

#[cfg(test)]
mod tests;
