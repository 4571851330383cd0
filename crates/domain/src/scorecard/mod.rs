//! The go/no-go scorecard: every rule of a threshold profile assessed for every candidate of a
//! run, from raw records, with honest uncertainty.
//!
//! A rule is **pass** when the whole interval of the measured value lies on the passing side of
//! the threshold, **fail** when it lies wholly on the failing side, **inconclusive** when it
//! straddles the threshold (or too few observations exist for an interval), and **not
//! measured** when there is no value. A candidate is **GO** only when every rule passes,
//! **NO-GO** when any rule fails, and **INCONCLUSIVE** otherwise. Intervals are two-sided 90 %
//! (one-sided 95 % bounds): Wilson for proportions, bootstrap over requests for latency and
//! throughput; money spent is counted exactly and compared as is.
use std::collections::HashMap;

use serde::Serialize;

use super::candidate::Candidate;
use super::cost::{self, CostSummary};
use super::format;
use super::paired::{self, PairedOutcome};
use super::pipeline::PipelineSpec;
use super::review::pairwise::Preference;
use super::run::RequestRecord;
use super::thresholds::key::MetricKey;
use super::thresholds::units::{Dimension, Uncertainty, Unit};
use super::thresholds::{Comparator, ThresholdRule};

pub mod claims;
pub mod intervals;
pub mod judge_cost;
pub mod measurement;
pub mod pareto;
pub mod preference;
pub mod record;
pub mod summary;

pub use claims::ClaimCheck;
pub use judge_cost::{JudgeCost, JudgeInput, judge_costs};
pub use measurement::{CandidateRecords, Extras, FedLevels, LevelsFold, Measurement, NotFinalAttempts, SampleUnit};
pub use pareto::ParetoPoint;
pub use record::{NewScorecard, RecordedVerdict, ScorecardListItem, ScorecardRecord};
pub use summary::{CandidateSummary, SummaryContext, summarise, summarise_data};

/// Most extra observations the "would settle it" estimate will name.
const SETTLE_CAP: f64 = 10_000_000.0;

/// The state of one rule for one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleState {
    Pass,
    Fail,
    Inconclusive,
    NotMeasured,
}

impl RuleState {
    pub fn as_str(&self) -> &'static str {
        match self {
            RuleState::Pass => "pass",
            RuleState::Fail => "fail",
            RuleState::Inconclusive => "inconclusive",
            RuleState::NotMeasured => "not measured",
        }
    }
    /// CSS-friendly name.
    pub fn class(&self) -> &'static str {
        match self {
            RuleState::NotMeasured => "not-measured",
            other => other.as_str(),
        }
    }
}

/// A candidate's overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub enum Verdict {
    #[serde(rename = "GO")]
    Go,
    #[serde(rename = "NO-GO")]
    NoGo,
    #[serde(rename = "INCONCLUSIVE")]
    Inconclusive,
}

impl Verdict {
    /// Better verdicts rank higher: GO above INCONCLUSIVE above NO-GO (how compare says a
    /// verdict moved against its baseline's).
    pub fn rank(self) -> u8 {
        match self {
            Verdict::Go => 2,
            Verdict::Inconclusive => 1,
            Verdict::NoGo => 0,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Go => "GO",
            Verdict::NoGo => "NO-GO",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }
    pub fn class(&self) -> &'static str {
        match self {
            Verdict::Go => "go",
            Verdict::NoGo => "no-go",
            Verdict::Inconclusive => "inconclusive",
        }
    }
    /// GO only when every rule passes; NO-GO when any fails; otherwise INCONCLUSIVE.
    pub fn of(states: &[RuleState]) -> Verdict {
        if states.contains(&RuleState::Fail) {
            Verdict::NoGo
        } else if !states.is_empty() && states.iter().all(|s| *s == RuleState::Pass) {
            Verdict::Go
        } else {
            Verdict::Inconclusive
        }
    }
}

/// How many more observations would likely settle an inconclusive rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Settle {
    /// About `more` more (so `total` in all), if the measured value holds.
    More { more: u64, total: u64, unit: SampleUnit },
    /// The value sits (almost) on the threshold: no sample size settles it.
    OnTheThreshold,
}

impl Settle {
    pub fn describe(&self) -> String {
        match self {
            Settle::More { more, total, unit } => format!(
                "about {} more {} ({} in all) would likely settle it, if the value holds",
                format::thousands(*more),
                unit.noun(*more),
                format::thousands(*total)
            ),
            Settle::OnTheThreshold => "the value sits on the threshold: more data will not settle it".to_string(),
        }
    }
}

/// One rule assessed for one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub state: RuleState,
    /// Distance from the threshold, positive on the passing side, in the metric's stored unit.
    pub margin: Option<f64>,
    pub settle: Option<Settle>,
    /// One line in words, e.g. `accuracy 91.2 % < 95 %`.
    pub reason: String,
}

/// The comparator that reads as the failing side: `≥` fails as `<`.
fn negated(c: Comparator) -> &'static str {
    match c {
        Comparator::AtLeast => "<",
        Comparator::Above => "≤",
        Comparator::AtMost => ">",
        Comparator::Below => "≥",
    }
}

fn interval_text(unit: Unit, (lo, hi): (f64, f64)) -> String {
    format!("{} to {}", unit.format(lo), unit.format(hi))
}

/// Assesses one rule against one measurement (see the module comment for the states).
pub fn assess(rule: &ThresholdRule, key: &MetricKey, m: &Measurement) -> Assessment {
    let def = key.def();
    let unit = def.unit;
    let label = key.label();
    let threshold = unit.format(rule.value);
    let cmp = rule.comparator;
    let Some(value) = m.value else {
        let why = m.missing.clone().unwrap_or_else(|| "no value".into());
        let reason = match why.strip_prefix("not measured at ") {
            Some(rest) => format!("{label} not measured at {rest}"),
            None => format!("{label} not measured: {why}"),
        };
        return Assessment {
            state: RuleState::NotMeasured,
            margin: None,
            settle: None,
            reason,
        };
    };
    let margin = if cmp.wants_high() {
        value - rule.value
    } else {
        rule.value - value
    };
    let shown = unit.format(value);
    let n_text = m.conditions();
    let Some((lo, hi)) = m.interval else {
        if m.uncertainty != Uncertainty::Exact {
            // A sample too small for an interval decides nothing.
            return Assessment {
                state: RuleState::Inconclusive,
                margin: Some(margin),
                settle: Some(Settle::More {
                    more: (intervals::MIN_BOOTSTRAP_N as f64 - m.n).max(1.0) as u64,
                    total: intervals::MIN_BOOTSTRAP_N as u64,
                    unit: m.unit,
                }),
                reason: format!(
                    "{label} {shown} vs {} {threshold}: only {n_text}, too few for an interval",
                    cmp.symbol()
                ),
            };
        }
        let pass = cmp.holds(value, rule.value);
        return Assessment {
            state: if pass { RuleState::Pass } else { RuleState::Fail },
            margin: Some(margin),
            settle: None,
            reason: format!(
                "{label} {shown} {} {threshold}",
                if pass { cmp.symbol() } else { negated(cmp) }
            ),
        };
    };
    let (lo_holds, hi_holds) = (cmp.holds(lo, rule.value), cmp.holds(hi, rule.value));
    let range = interval_text(unit, (lo, hi));
    if lo_holds && hi_holds {
        Assessment {
            state: RuleState::Pass,
            margin: Some(margin),
            settle: None,
            reason: format!(
                "{label} {shown} {} {threshold} (interval {range}, {n_text})",
                cmp.symbol()
            ),
        }
    } else if !lo_holds && !hi_holds {
        Assessment {
            state: RuleState::Fail,
            margin: Some(margin),
            settle: None,
            reason: format!(
                "{label} {shown} {} {threshold} (interval {range}, {n_text})",
                negated(cmp)
            ),
        }
    } else {
        let settle = settle_estimate(m, value, rule.value);
        Assessment {
            state: RuleState::Inconclusive,
            margin: Some(margin),
            reason: format!(
                "{label} {shown} vs {} {threshold}: the interval {range} ({n_text}) straddles the threshold; {}",
                cmp.symbol(),
                settle.describe()
            ),
            settle: Some(settle),
        }
    }
}

/// How many observations in all would likely move the interval off the threshold, assuming the
/// measured value holds: for proportions by searching the Wilson interval at larger n; for
/// bootstrap figures by the 1/√n shrinking of the interval.
pub fn settle_estimate(m: &Measurement, value: f64, threshold: f64) -> Settle {
    let n = m.n.max(1.0);
    let distance = (value - threshold).abs();
    if distance <= f64::EPSILON * threshold.abs().max(1.0) {
        return Settle::OnTheThreshold;
    }
    let needed = match m.uncertainty {
        Uncertainty::Proportion | Uncertainty::ClopperPearson => {
            // Successes at a larger n are rounded toward the threshold: never optimistic.
            let exact = m.uncertainty == Uncertainty::ClopperPearson;
            let excludes = |big_n: f64| {
                let k = value * big_n;
                let k = if value > threshold { k.floor() } else { k.ceil() };
                let interval = if exact {
                    super::review::pairwise::clopper_pearson(k as u64, big_n as u64, intervals::CONFIDENCE)
                } else {
                    super::stats::wilson(k as u64, big_n as u64, intervals::CONFIDENCE)
                };
                interval.map(|i| threshold < i.lo || threshold > i.hi).unwrap_or(false)
            };
            let mut hi = n.ceil().max(1.0);
            while !excludes(hi) {
                hi *= 2.0;
                if hi > SETTLE_CAP {
                    return Settle::OnTheThreshold;
                }
            }
            let mut lo = (hi / 2.0).floor().max(n.floor());
            // Smallest whole n in (lo, hi] whose interval excludes the threshold.
            while hi - lo > 1.0 {
                let mid = ((lo + hi) / 2.0).floor();
                if excludes(mid) { hi = mid } else { lo = mid }
            }
            hi
        }
        _ => {
            let Some((lo, hi)) = m.interval else {
                return Settle::OnTheThreshold;
            };
            let half = (hi - lo) / 2.0;
            (n * (half / distance).powi(2)).ceil()
        }
    };
    if needed > SETTLE_CAP {
        return Settle::OnTheThreshold;
    }
    let total = needed.max(n.ceil() + 1.0) as u64;
    Settle::More {
        more: total.saturating_sub(n.ceil() as u64).max(1),
        total,
        unit: m.unit,
    }
}

// ---------------------------------------------------------------- the whole scorecard

/// A candidate's column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    pub candidate_id: i64,
    pub name: String,
    pub incumbent: bool,
    pub verdict: Verdict,
    /// One line per rule that is not a pass (fails first), or why it is GO.
    pub reasons: Vec<String>,
}

/// One rule for one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    pub measurement: Measurement,
    pub assessment: Assessment,
    /// Value minus the incumbent's value (None for the incumbent itself or when either is missing).
    pub delta: Option<f64>,
    /// The best value of the row (only marked when at least two candidates were measured).
    pub best: bool,
}

/// One rule: a row of the scorecard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub rule: ThresholdRule,
    /// None when the stored metric is not in the catalog (the rule is then not measured).
    #[serde(skip)]
    pub key: Option<MetricKey>,
    pub label: String,
    pub caliber: String,
    pub dimension: Option<Dimension>,
    #[serde(skip)]
    pub unit: Option<Unit>,
    pub higher_is_better: bool,
    pub cells: Vec<Cell>,
}

impl Row {
    /// The row of a rule whose metric is in the catalog: label, caliber and unit from its definition.
    fn of_catalogued(rule: &ThresholdRule, key: MetricKey, cells: Vec<Cell>) -> Row {
        let def = key.def();
        Row {
            rule: rule.clone(),
            label: key.label(),
            caliber: def.caliber.to_string(),
            dimension: Some(def.dimension),
            unit: Some(def.unit),
            higher_is_better: def.higher_is_better,
            key: Some(key),
            cells,
        }
    }

    /// The threshold in words: `≥ 95 %`.
    pub fn threshold_text(&self) -> String {
        match self.unit {
            Some(u) => format!("{} {}", self.rule.comparator.symbol(), u.format(self.rule.value)),
            None => format!(
                "{} {} {}",
                self.rule.comparator.symbol(),
                self.rule.value,
                self.rule.unit
            ),
        }
    }
    pub fn format(&self, v: f64) -> String {
        self.unit.map(|u| u.format(v)).unwrap_or_else(|| v.to_string())
    }
}

/// A paired accuracy comparison between two columns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedRow {
    pub a: usize,
    pub b: usize,
    pub outcome: PairedOutcome,
    pub text: String,
}

/// The pipeline impact of one candidate against the baseline column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelineImpact {
    /// Model stage time per item: mean E2E latency of successful requests, seconds.
    pub model_seconds: f64,
    /// Baseline model time / this model's time.
    pub model_factor: f64,
    /// End-to-end pipeline speed-up (Amdahl).
    pub pipeline_factor: f64,
}

/// Everything a scorecard needs, from the run's records (`build` summarises them first).
pub struct ScorecardInput<'a> {
    /// The run's configured concurrency: rules without `@c=N` are assessed at it.
    pub run_concurrency: u32,
    /// The run's candidates, in the run's order.
    pub candidates: &'a [Candidate],
    pub records: &'a [RequestRecord],
    /// Case weights from the eval set (missing cases weigh 1).
    pub weights: &'a HashMap<String, f64>,
    pub rules: &'a [ThresholdRule],
    pub incumbent: Option<i64>,
    pub pipeline: &'a PipelineSpec,
    /// Per candidate (run order), its latest probe report and current checklist; may be empty.
    pub operability: &'a [CandidateOperability],
    /// Who judged the run's `llm-judge` calls, to price them (None: judge cost not shown).
    pub judge: Option<JudgeInput<'a>>,
    /// When the run was resumed (wall clock µs, `calibers::resumes_of`): aggregates per segment.
    pub resumes: &'a [i64],
    /// The run's blind comparisons, for the win-rate rules (may be empty when none asks).
    pub preferences: &'a [Preference],
}

/// Whether a metric is judged against an SLO: its figure depends on which SLO counted the
/// requests (attainment, capacity @ SLO and the cost there).
pub fn judged_by_slo(base: &str) -> bool {
    matches!(
        base,
        "slo_attainment"
            | "capacity_at_slo"
            | "capacity_at_slo_users"
            | "cost_per_1k_answers_at_capacity"
            | "cost_per_1k_correct_at_capacity"
    )
}

/// Everything a scorecard needs, with the run's records reduced to one summary per candidate.
pub struct SummaryInput<'a> {
    /// The run's configured concurrency: rules without `@c=N` are assessed at it.
    pub run_concurrency: u32,
    /// The run's candidates, in the run's order.
    pub candidates: &'a [Candidate],
    /// One per candidate, in the same order (`summary::summarise`).
    pub summaries: &'a [CandidateSummary],
    pub rules: &'a [ThresholdRule],
    pub incumbent: Option<i64>,
    pub pipeline: &'a PipelineSpec,
    /// Per candidate (run order), its latest probe report and current checklist; may be empty.
    pub operability: &'a [CandidateOperability],
    /// Who judged the run's `llm-judge` calls, to price them (None: judge cost not shown).
    pub judge: Option<JudgePricing<'a>>,
    /// The run's blind comparisons, for the win-rate rules (may be empty when none asks).
    pub preferences: &'a [Preference],
    /// Why the SLO-based rules ([`judged_by_slo`]) are not measured: the profile judging has an
    /// SLO other than the one the run counted its requests against (None: they are measured).
    pub slo_mismatch: Option<String>,
}

/// Where a judge's prices are found: the run's judge settings and every candidate.
#[derive(Clone, Copy)]
pub struct JudgePricing<'a> {
    pub config: Option<&'a super::run::JudgeConfig>,
    pub all_candidates: &'a [Candidate],
}

/// A candidate's operability evidence from outside the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CandidateOperability {
    pub probes: Option<super::operability::ProbeReport>,
    pub checklist: Option<super::operability::ChecklistAnswers>,
    /// GPU energy per output token by concurrency, from the run's telemetry (empty: none).
    pub joules_per_output_token: Vec<(u32, f64)>,
    /// Its capacity @ SLO and cost there, from a find-capacity run (None: another run).
    pub capacity: Option<super::capacity::CapacityEvidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scorecard {
    pub run_concurrency: u32,
    pub columns: Vec<Column>,
    /// Rules grouped by dimension (throughput, quality, stability, operability, then rules not
    /// in the catalog), in profile order within each.
    pub rows: Vec<Row>,
    pub costs: Vec<Option<CostSummary>>,
    /// Per candidate, what the judge calls for its outputs cost at the judges' prices: apart
    /// from `costs`, which holds the candidate's own measured attempts only.
    pub judge_costs: Vec<Option<JudgeCost>>,
    pub claims: Vec<Option<ClaimCheck>>,
    pub paired: Vec<PairedRow>,
    /// Index of the column other columns' pipeline impact is measured against.
    pub pipeline_baseline: Option<usize>,
    pub pipeline: Vec<Option<PipelineImpact>>,
    pub pareto: Vec<ParetoPoint>,
    /// Which Pareto axes were used, and which were left out and why.
    pub pareto_axes: Vec<String>,
    pub pareto_left_out: Vec<String>,
}

impl Scorecard {
    /// Rows of one dimension, in profile order.
    pub fn rows_of(&self, dimension: Dimension) -> Vec<&Row> {
        self.rows.iter().filter(|r| r.dimension == Some(dimension)).collect()
    }
    /// Rows whose metric is not in the catalog.
    pub fn unknown_rows(&self) -> Vec<&Row> {
        self.rows.iter().filter(|r| r.dimension.is_none()).collect()
    }
    pub fn incumbent_index(&self) -> Option<usize> {
        self.columns.iter().position(|c| c.incumbent)
    }
}

/// Builds the scorecard from the run's records: summarises each candidate's, then
/// [`build_from`].
pub fn build(input: &ScorecardInput<'_>) -> Scorecard {
    let cx = SummaryContext {
        slo: Default::default(),
        run_concurrency: input.run_concurrency,
        weights: input.weights,
        resumes: input.resumes,
        file: input.judge.as_ref().map(|j| j.file),
    };
    let summaries: Vec<CandidateSummary> = input
        .candidates
        .iter()
        .map(|c| summarise(c.id, input.records, &cx))
        .collect();
    build_from(&SummaryInput {
        run_concurrency: input.run_concurrency,
        candidates: input.candidates,
        summaries: &summaries,
        rules: input.rules,
        incumbent: input.incumbent,
        pipeline: input.pipeline,
        operability: input.operability,
        judge: input.judge.as_ref().map(|j| JudgePricing {
            config: j.config,
            all_candidates: j.all_candidates,
        }),
        preferences: input.preferences,
        slo_mismatch: None,
    })
}

/// Builds the scorecard from the candidates' summaries: measures every rule for every
/// candidate and assesses it.
pub fn build_from(input: &SummaryInput<'_>) -> Scorecard {
    let data = input.summaries;
    let costs: Vec<Option<CostSummary>> = input
        .candidates
        .iter()
        .zip(data)
        .map(|(c, d)| cost::summarise(&c.spec.pricing, d.tokens, d.answered))
        .collect();
    let incumbent = input
        .incumbent
        .and_then(|id| input.candidates.iter().position(|c| c.id == id));

    let mut rows: Vec<Row> = input
        .rules
        .iter()
        .map(|rule| build_row(rule, input, &costs, incumbent))
        .collect();
    // Keep the profile's order, but group by dimension for sections.
    rows.sort_by_key(|r| {
        r.dimension
            .map(|d| Dimension::ALL.iter().position(|x| *x == d).unwrap_or(0))
            .unwrap_or(Dimension::ALL.len())
    });

    let columns = input
        .candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let states: Vec<RuleState> = rows.iter().map(|r| r.cells[i].assessment.state).collect();
            // An endpoint never reached judges nothing of its model: inconclusive, saying why.
            let (verdict, reasons) = match data.get(i).and_then(|d| d.unreachable.clone()) {
                Some(why) => (Verdict::Inconclusive, vec![why]),
                None => {
                    let verdict = Verdict::of(&states);
                    (verdict, reasons(&rows, i, verdict))
                }
            };
            Column {
                candidate_id: c.id,
                name: c.spec.name.clone(),
                incumbent: incumbent == Some(i),
                verdict,
                reasons,
            }
        })
        .collect();

    let mut paired_rows = Vec::new();
    for a in 0..data.len() {
        for b in a + 1..data.len() {
            let (ca, cb) = (&data[a].correct_cases, &data[b].correct_cases);
            if ca.is_empty() || cb.is_empty() {
                continue;
            }
            let outcome = paired::compare(ca, cb);
            let text = outcome.describe(&input.candidates[a].spec.name, &input.candidates[b].spec.name);
            paired_rows.push(PairedRow { a, b, outcome, text });
        }
    }

    let (pipeline_baseline, pipeline) = pipeline_impacts(input, incumbent);
    let claims = input
        .candidates
        .iter()
        .zip(data)
        .map(|(c, d)| claims::check(c, d, input.run_concurrency))
        .collect();
    let (pareto, pareto_axes, pareto_left_out) = pareto::points(input, &costs);
    let judge_costs = match &input.judge {
        Some(j) => data
            .iter()
            .map(|d| Some(judge_cost::price(d.judge.as_ref()?, j.config, j.all_candidates)))
            .collect(),
        None => vec![None; input.candidates.len()],
    };

    Scorecard {
        run_concurrency: input.run_concurrency,
        columns,
        rows,
        costs,
        judge_costs,
        claims,
        paired: paired_rows,
        pipeline_baseline,
        pipeline,
        pareto,
        pareto_axes,
        pareto_left_out,
    }
}

fn build_row(
    rule: &ThresholdRule,
    input: &SummaryInput<'_>,
    costs: &[Option<CostSummary>],
    incumbent: Option<usize>,
) -> Row {
    let data = input.summaries;
    let key = match MetricKey::parse(&rule.metric) {
        Ok(k) => k,
        Err(why) => {
            let cells = data
                .iter()
                .map(|_| Cell {
                    measurement: Measurement {
                        value: None,
                        interval: None,
                        uncertainty: Uncertainty::Exact,
                        n: 0.0,
                        unit: SampleUnit::Requests,
                        concurrency: None,
                        missing: Some(why.clone()),
                    },
                    assessment: Assessment {
                        state: RuleState::NotMeasured,
                        margin: None,
                        settle: None,
                        reason: format!("{} not measured: {why}", rule.metric),
                    },
                    delta: None,
                    best: false,
                })
                .collect();
            return Row {
                rule: rule.clone(),
                key: None,
                label: rule.metric.clone(),
                caliber: "not in bakeoff's metric catalog".into(),
                dimension: None,
                unit: None,
                higher_is_better: rule.comparator.wants_high(),
                cells,
            };
        }
    };
    let def = key.def();
    if preference::is_preference_metric(def.base) {
        return preference_row(rule, key, input);
    }
    let measurements: Vec<Measurement> = data
        .iter()
        .zip(costs)
        .enumerate()
        .map(|(i, (d, cost))| {
            let ops = input.operability.get(i);
            let extras = Extras {
                cost: cost.as_ref(),
                probes: ops.and_then(|o| o.probes.as_ref()),
                checklist: ops.and_then(|o| o.checklist.as_ref()),
                joules_per_output_token: ops
                    .map(|o| o.joules_per_output_token.as_slice())
                    .filter(|j| !j.is_empty()),
                capacity: ops.and_then(|o| o.capacity.as_ref()),
                // Record-derived figures (`slo_attainment`) are in the summary already.
                slo: None,
            };
            match &input.slo_mismatch {
                Some(why) if judged_by_slo(def.base) => Measurement::missing(why.clone(), def.uncertainty, None),
                _ => d.measure(&key, input.run_concurrency, &extras),
            }
        })
        .collect();
    let base_value = incumbent.and_then(|i| measurements[i].value);
    let measured: Vec<f64> = measurements.iter().filter_map(|m| m.value).collect();
    let best_value = if measured.len() >= 2 {
        let pick = if def.higher_is_better { f64::max } else { f64::min };
        measured.iter().copied().reduce(pick)
    } else {
        None
    };
    let cells = measurements
        .into_iter()
        .enumerate()
        .map(|(i, m)| Cell {
            assessment: assess(rule, &key, &m),
            delta: match (incumbent, base_value, m.value) {
                (Some(inc), Some(b), Some(v)) if inc != i => Some(v - b),
                _ => None,
            },
            best: matches!((best_value, m.value), (Some(b), Some(v)) if v == b),
            measurement: m,
        })
        .collect();
    Row::of_catalogued(rule, key, cells)
}

/// A blind win-rate rule: each candidate against the incumbent, assessed like any rule, the
/// tally beside the reason; the incumbent itself passes (it is the reference).
fn preference_row(rule: &ThresholdRule, key: MetricKey, input: &SummaryInput<'_>) -> Row {
    let def = key.def();
    let cells = input
        .candidates
        .iter()
        .map(
            |c| match preference::measure(&key, c, input.candidates, input.incumbent, input.preferences) {
                preference::AgainstIncumbent::Measured { measurement, tally } => {
                    let mut assessment = assess(rule, &key, &measurement);
                    if measurement.value.is_some() {
                        let incumbent = key.param.clone().unwrap_or_else(|| {
                            input
                                .incumbent
                                .and_then(|id| input.candidates.iter().find(|c| c.id == id))
                                .map_or_else(|| "the incumbent".to_string(), |c| c.spec.name.clone())
                        });
                        assessment.reason = format!(
                            "{}; {}",
                            assessment.reason,
                            tally.describe(&incumbent, key.base == "judge_win_rate")
                        );
                    }
                    Cell {
                        measurement,
                        assessment,
                        delta: None,
                        best: false,
                    }
                }
                preference::AgainstIncumbent::IsIncumbent { name } => Cell {
                    measurement: Measurement {
                        value: None,
                        interval: None,
                        uncertainty: def.uncertainty,
                        n: 0.0,
                        unit: SampleUnit::Comparisons,
                        concurrency: None,
                        missing: Some("the incumbent itself".to_string()),
                    },
                    assessment: Assessment {
                        state: RuleState::Pass,
                        margin: None,
                        settle: None,
                        reason: format!("{}: {name} is the incumbent this rule compares with", key.label()),
                    },
                    delta: None,
                    best: false,
                },
            },
        )
        .collect();
    Row::of_catalogued(rule, key, cells)
}

/// A verdict's one-line reasons: failing rules first, then inconclusive, then not measured; for
/// a GO, that every rule passes and the closest call.
fn reasons(rows: &[Row], i: usize, verdict: Verdict) -> Vec<String> {
    if rows.is_empty() {
        return vec!["the profile has no rules, so nothing can be decided".into()];
    }
    let mut out = Vec::new();
    for state in [RuleState::Fail, RuleState::Inconclusive, RuleState::NotMeasured] {
        for r in rows {
            if r.cells[i].assessment.state == state {
                out.push(r.cells[i].assessment.reason.clone());
            }
        }
    }
    if verdict == Verdict::Go {
        out.push(format!(
            "all {} rule{} pass with their whole interval on the passing side",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" }
        ));
        for r in rows {
            out.push(r.cells[i].assessment.reason.clone());
        }
    }
    out
}

/// Model time per item (mean E2E of successful requests at the run's load), baseline and the
/// Amdahl speed-up of every other candidate's pipeline.
fn pipeline_impacts(
    input: &SummaryInput<'_>,
    incumbent: Option<usize>,
) -> (Option<usize>, Vec<Option<PipelineImpact>>) {
    let times: Vec<Option<f64>> = input
        .summaries
        .iter()
        .map(|d| d.level(input.run_concurrency).and_then(|l| l.e2e_mean_s))
        .collect();
    // Against the incumbent when there is one, else against the slowest candidate.
    let baseline = incumbent.filter(|&i| times[i].is_some()).or_else(|| {
        times
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i)
    });
    let impacts = times
        .iter()
        .map(|t| {
            let (t, base) = ((*t)?, times[baseline?]?);
            let pipeline_factor = input.pipeline.speedup(base, t)?;
            Some(PipelineImpact {
                model_seconds: t,
                model_factor: base / t,
                pipeline_factor,
            })
        })
        .collect();
    (baseline, impacts)
}

#[cfg(test)]
mod tests;
