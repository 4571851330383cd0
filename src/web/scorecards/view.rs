//! The scorecard as the page shows it: every figure formatted with its unit, caliber and
//! conditions, so templates only print strings.
use crate::app::pages::charts;
use crate::app::scorecard::RunScorecard;
use crate::domain::format;
use crate::domain::scorecard::{Cell, Row, RuleState, Scorecard, Settle, Verdict};
use crate::domain::thresholds::units::Dimension;
use crate::web::views::{NOT_MEASURED, short_hash};

/// A candidate's column head.
#[derive(Debug, Clone)]
pub struct ColumnView {
    pub id: i64,
    pub name: String,
    pub model: String,
    pub verdict: &'static str,
    pub verdict_class: &'static str,
    pub reasons: Vec<String>,
    pub incumbent: bool,
    /// The candidate's colour (`domain::palette`: the same as on the run page and compare).
    pub colour: &'static str,
}

#[derive(Debug, Clone)]
pub struct CellView {
    pub value: String,
    pub interval: Option<String>,
    pub conditions: String,
    pub state: &'static str,
    pub state_class: &'static str,
    pub margin: Option<String>,
    /// `+3.5 pp vs incumbent`, with a better/worse class.
    pub delta: Option<String>,
    pub delta_class: &'static str,
    pub best: bool,
    pub note: Option<String>,
}

#[derive(Debug, Clone)]
pub struct RowView {
    pub label: String,
    pub caliber: String,
    pub threshold: String,
    pub rationale: String,
    pub cells: Vec<CellView>,
}

#[derive(Debug, Clone)]
pub struct SectionView {
    pub key: &'static str,
    pub title: &'static str,
    pub rows: Vec<RowView>,
    pub empty_note: &'static str,
    /// Why this section's figures must not be trusted (the harness flagged the run's speed).
    pub warning: Option<String>,
}

#[derive(Debug, Clone)]
pub struct CostView {
    pub candidate: String,
    pub total: String,
    pub per_1k: String,
    /// Per 1,000 requests sent (retries counted), beside the per-case figure.
    pub per_1k_requests: String,
    pub per_correct: String,
    pub tokens: String,
    pub note: Option<String>,
    /// The judge calls for this candidate's outputs, in words (not part of the figures beside).
    pub judge: Option<String>,
}

/// `llm-judge` calls made for a candidate's outputs, in words with their cost.
fn judge_cost_text(j: &crate::domain::scorecard::JudgeCost) -> String {
    let usd = match j.usd {
        Some(v) => format!("{} at the judge's prices", format::usd(v)),
        None => "cost unknown: a judge states no prices".to_string(),
    };
    let failed = if j.failed > 0 {
        format!(", {} failed", j.failed)
    } else {
        String::new()
    };
    format!(
        "Judge cost (llm-judge by {}): {usd}; {} calls{failed}, {} in / {} out tokens — not included in this candidate's cost",
        if j.judges.is_empty() {
            "an unknown candidate".to_string()
        } else {
            j.judges.join(", ")
        },
        j.calls,
        j.input_tokens,
        j.output_tokens
    )
}

#[derive(Debug, Clone)]
pub struct ClaimView {
    pub candidate: String,
    pub claimed: String,
    pub measured: String,
    pub summary: String,
    pub differences: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct PipelineRowView {
    pub candidate: String,
    pub model_time: String,
    pub text: String,
    pub baseline: bool,
}

#[derive(Debug, Clone)]
pub struct ParetoView {
    pub candidate: String,
    pub quality: String,
    pub speed: String,
    pub cost: String,
    pub status: String,
    pub dominated: bool,
}

/// Everything the scorecard templates print.
#[derive(Debug, Clone)]
pub struct CardView {
    pub run_id: i64,
    pub run_name: String,
    pub run_status: &'static str,
    pub evalset: String,
    pub conditions: String,
    /// Which SLO judged the SLO-based rules (`app::scorecard::judging_slo_of`).
    pub slo_note: Option<String>,
    pub run_concurrency: u32,
    pub profile_id: i64,
    pub profile_name: String,
    pub profile_version: u32,
    pub current_version: u32,
    pub columns: Vec<ColumnView>,
    pub sections: Vec<SectionView>,
    pub unknown_rows: Vec<RowView>,
    pub costs: Vec<CostView>,
    pub claims: Vec<ClaimView>,
    pub paired: Vec<String>,
    pub pipeline_stated: bool,
    pub pipeline: Vec<PipelineRowView>,
    pub pareto: Vec<ParetoView>,
    pub pareto_axes: String,
    pub pareto_left_out: Vec<String>,
    pub charts: Vec<charts::Chart>,
    pub query: String,
    pub has_incumbent: bool,
    /// Set when the harness flagged the run's speed figures (shown above the verdicts too,
    /// since a verdict may rest on a speed rule).
    pub speed_warning: Option<String>,
}

impl CardView {
    /// The name of the candidate in column `i` (a rule cell's label when the table becomes
    /// cards on a narrow screen); "" past the last.
    pub fn column_name(&self, i: impl std::borrow::Borrow<usize>) -> &str {
        self.columns.get(*i.borrow()).map_or("", |c| c.name.as_str())
    }
}

fn state_text(state: RuleState) -> &'static str {
    state.as_str()
}

fn cell_view(row: &Row, cell: &Cell) -> CellView {
    let m = &cell.measurement;
    let j = &cell.assessment;
    let value = m
        .value
        .map(|v| row.format(v))
        .unwrap_or_else(|| NOT_MEASURED.to_string());
    let interval = m
        .interval
        .filter(|_| m.value.is_some())
        .map(|(lo, hi)| format!("90 % interval {} to {}", row.format(lo), row.format(hi)));
    let margin = j.margin.map(|mg| {
        let text = row
            .unit
            .map(|u| u.format_delta(mg))
            .unwrap_or_else(|| format!("{mg:+}"));
        if mg >= 0.0 {
            format!("margin {text}")
        } else {
            format!("short by {}", text.trim_start_matches(['−', '+']))
        }
    });
    let (delta, delta_class) = match (cell.delta, row.unit) {
        (Some(d), Some(u)) => {
            let better = if row.higher_is_better { d > 0.0 } else { d < 0.0 };
            let class = if d == 0.0 {
                "same"
            } else if better {
                "better"
            } else {
                "worse"
            };
            (Some(format!("{} vs incumbent", u.format_delta(d))), class)
        }
        _ => (None, "same"),
    };
    let note = match (j.state, &j.settle) {
        (RuleState::Inconclusive, Some(s)) => Some(match s {
            Settle::More { .. } => s.describe(),
            Settle::OnTheThreshold => s.describe(),
        }),
        (RuleState::NotMeasured, _) => m.missing.clone(),
        _ => None,
    };
    CellView {
        value,
        interval,
        conditions: if m.value.is_some() {
            m.conditions()
        } else {
            String::new()
        },
        state: state_text(j.state),
        state_class: j.state.class(),
        margin,
        delta,
        delta_class,
        best: cell.best,
        note,
    }
}

fn row_view(row: &Row) -> RowView {
    RowView {
        label: row.label.clone(),
        caliber: row.caliber.clone(),
        threshold: row.threshold_text(),
        rationale: row.rule.rationale.clone(),
        cells: row.cells.iter().map(|c| cell_view(row, c)).collect(),
    }
}

/// The harness's reasons when it flagged the run's speed figures unreliable.
pub fn speed_warning(j: &RunScorecard) -> Option<String> {
    let h = j.harness.as_ref().filter(|h| h.unreliable)?;
    Some(format!(
        "The harness flagged this run's speed figures: {}. Latency and throughput verdicts below may be wrong.",
        h.reasons.join("; ")
    ))
}

fn verdict_class(v: Verdict) -> &'static str {
    v.class()
}

pub fn build(j: &RunScorecard) -> CardView {
    let card: &Scorecard = &j.card;
    let names: Vec<String> = card.columns.iter().map(|c| c.name.clone()).collect();
    CardView {
        run_id: j.run.id,
        run_name: j.run.name.clone(),
        run_status: j.run.status.as_str(),
        evalset: j
            .version
            .as_ref()
            .map(|v| format!("{} (version {})", v.header.name, short_hash(&v.content_hash)))
            .unwrap_or_else(|| format!("eval set version #{}", j.run.evalset_version_id)),
        conditions: conditions(j),
        slo_note: j.slo_note.clone(),
        run_concurrency: card.run_concurrency,
        profile_id: j.profile.id,
        profile_name: j.profile.name.clone(),
        profile_version: j.profile.version,
        current_version: j.current_version,
        columns: column_views(j),
        sections: section_views(j),
        unknown_rows: card.unknown_rows().into_iter().map(row_view).collect(),
        costs: cost_views(j),
        claims: claim_views(j),
        paired: card.paired.iter().map(|p| p.text.clone()).collect(),
        pipeline_stated: !j.pipeline.is_empty(),
        pipeline: pipeline_views(card, &names),
        pareto: pareto_views(card, &names),
        pareto_axes: card.pareto_axes.join(" · "),
        pareto_left_out: card.pareto_left_out.clone(),
        charts: charts::all(j),
        query: super::query_string(j),
        has_incumbent: j.incumbent.is_some(),
        speed_warning: speed_warning(j),
    }
}

/// The candidates as columns, each with its verdict.
fn column_views(j: &RunScorecard) -> Vec<ColumnView> {
    let colours = crate::domain::palette::CandidateColours::of(j.candidates.iter().map(|c| c.id));
    j.card
        .columns
        .iter()
        .map(|c| {
            let model = j
                .candidates
                .iter()
                .find(|x| x.id == c.candidate_id)
                .map(|x| x.spec.model.clone())
                .unwrap_or_default();
            ColumnView {
                id: c.candidate_id,
                name: c.name.clone(),
                model,
                verdict: c.verdict.as_str(),
                verdict_class: verdict_class(c.verdict),
                reasons: c.reasons.clone(),
                incumbent: c.incumbent,
                colour: colours.hex(c.candidate_id),
            }
        })
        .collect()
}

/// One section per dimension, each with its rows (or a note saying the profile has none).
fn section_views(j: &RunScorecard) -> Vec<SectionView> {
    let card: &Scorecard = &j.card;
    Dimension::ALL
        .iter()
        .map(|d| SectionView {
            key: d.as_str(),
            title: d.title(),
            rows: card.rows_of(*d).into_iter().map(row_view).collect(),
            empty_note: match d {
                Dimension::Stability => {
                    "No stability rule in this profile (failure rate, retries, latency spread, soak drift)."
                }
                Dimension::Operability => "No operability rule in this profile (rate limits, usage reporting, cost).",
                _ => "No rule of this dimension in this profile.",
            },
            warning: (*d == Dimension::Throughput).then(|| speed_warning(j)).flatten(),
        })
        .collect()
}

/// What each candidate cost (and its judge, when one graded), or why it is not known.
fn cost_views(j: &RunScorecard) -> Vec<CostView> {
    let card: &Scorecard = &j.card;
    card.costs
        .iter()
        .zip(&j.candidates)
        .zip(&card.judge_costs)
        .map(|((cost, c), judge)| (cost, c, judge.as_ref().map(judge_cost_text)))
        .map(|(cost, c, judge)| match cost {
            Some(s) => CostView {
                candidate: c.spec.name.clone(),
                total: format::usd(s.total_usd),
                per_1k: s.per_1k_cases.map(format::usd).unwrap_or_else(|| NOT_MEASURED.into()),
                per_1k_requests: s
                    .per_1k_requests
                    .map(format::usd)
                    .unwrap_or_else(|| NOT_MEASURED.into()),
                per_correct: s.per_correct.map(format::usd).unwrap_or_else(|| NOT_MEASURED.into()),
                tokens: format!(
                    "{} in / {} out over {} attempts for {} answers to {} cases",
                    s.totals.input_tokens, s.totals.output_tokens, s.totals.attempts, s.answers, s.cases
                ),
                note: (s.totals.attempts_without_usage > 0).then(|| {
                    format!(
                        "{} successful attempts reported no token usage: the cost is a lower bound",
                        s.totals.attempts_without_usage
                    )
                }),
                judge,
            },
            None => CostView {
                candidate: c.spec.name.clone(),
                total: NOT_MEASURED.into(),
                per_1k: NOT_MEASURED.into(),
                per_1k_requests: NOT_MEASURED.into(),
                per_correct: NOT_MEASURED.into(),
                tokens: String::new(),
                note: Some("no prices stated: add them on the candidate's page".into()),
                judge,
            },
        })
        .collect()
}

/// Each candidate's claimed speed beside the one measured, when a claim was stated.
fn claim_views(j: &RunScorecard) -> Vec<ClaimView> {
    let card: &Scorecard = &j.card;
    card.claims
        .iter()
        .zip(&j.candidates)
        .filter_map(|(claim, c)| {
            let claim = claim.as_ref()?;
            Some(ClaimView {
                candidate: c.spec.name.clone(),
                claimed: format!(
                    "{} tok/s, {}{}",
                    format::significant(claim.claimed_tok_s),
                    claim.claimed_caliber,
                    claim
                        .claimed_conditions
                        .as_ref()
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default()
                ),
                measured: match (claim.measured_tok_s, claim.matched_caliber) {
                    (Some(v), Some(cal)) => {
                        format!("{} tok/s, {cal} {}", format::significant(v), claim.measured_conditions)
                    }
                    (None, Some(cal)) => format!("{cal}: {NOT_MEASURED}"),
                    _ => NOT_MEASURED.to_string(),
                },
                summary: claim.summary(),
                differences: claim.differences.clone(),
            })
        })
        .collect()
}

/// Each candidate's time in the stated pipeline, against the baseline candidate's.
fn pipeline_views(card: &Scorecard, names: &[String]) -> Vec<PipelineRowView> {
    let baseline_name = card.pipeline_baseline.map(|i| names[i].clone()).unwrap_or_default();
    card.pipeline
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let p = p.as_ref()?;
            let baseline = card.pipeline_baseline == Some(i);
            Some(PipelineRowView {
                candidate: names[i].clone(),
                model_time: format!("{:.2} s per item", p.model_seconds),
                text: if baseline {
                    "baseline".to_string()
                } else {
                    format!(
                        "model {} {} than {baseline_name} → pipeline {} {}",
                        format::factor(speed(p.model_factor)),
                        if p.model_factor >= 1.0 { "faster" } else { "slower" },
                        format::factor(speed(p.pipeline_factor)),
                        if p.pipeline_factor >= 1.0 { "faster" } else { "slower" },
                    )
                },
                baseline,
            })
        })
        .collect()
}

/// Each candidate's place on the quality / speed / cost Pareto front.
fn pareto_views(card: &Scorecard, names: &[String]) -> Vec<ParetoView> {
    card.pareto
        .iter()
        .map(|p| ParetoView {
            candidate: p.name.clone(),
            quality: p
                .quality
                .map(|q| format!("{:.1} %", q * 100.0))
                .unwrap_or_else(|| NOT_MEASURED.into()),
            speed: p
                .speed
                .map(|s| format!("{} req/s", format::significant(s)))
                .unwrap_or_else(|| NOT_MEASURED.into()),
            cost: p.cost.map(format::usd).unwrap_or_else(|| NOT_MEASURED.into()),
            status: if p.dominated() {
                format!(
                    "dominated by {}",
                    p.dominated_by
                        .iter()
                        .map(|&k| names[k].as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                "on the Pareto front".to_string()
            },
            dominated: p.dominated(),
        })
        .collect()
}

/// The conditions the card's figures were measured under, in words.
fn conditions(j: &RunScorecard) -> String {
    let c = &j.run.config;
    let conditions = format!(
        "c={} (rules without @c are judged here) · streaming {} · {} repetition{} · {} warm-up{} excluded",
        c.concurrency,
        if c.stream { "on" } else { "off" },
        c.repetitions,
        if c.repetitions == 1 { "" } else { "s" },
        c.warmup_requests,
        if c.warmup_requests == 1 { "" } else { "s" },
    );
    // Tool cases sent in prompt mode: every tool figure is of that mode (native is the default).
    let conditions = match c.tool_mode {
        crate::domain::tool_calls::RunToolMode::Native => conditions,
        crate::domain::tool_calls::RunToolMode::Prompt => {
            format!("{conditions} · tool calls in prompt mode (tools in the system prompt)")
        }
        crate::domain::tool_calls::RunToolMode::Both => format!(
            "{conditions} · tool calls in both modes: each candidate natively, and \"… (prompt mode)\" beside it \
             (tools in the system prompt) at the same load, each with its own verdict"
        ),
    };
    // A resumed run: its aggregates are per segment, and the card says so.
    let resumed = crate::app::pages::charts::throughput_series(j)
        .into_iter()
        .filter(|s| s.segments > 1)
        .max_by(|a, b| a.downtime_s.total_cmp(&b.downtime_s));
    match resumed.and_then(|s| crate::app::pages::report::resumed_text(s.segments, s.downtime_s)) {
        Some(text) => format!("{conditions} · {text}"),
        None => conditions,
    }
}

/// A factor below 1 reads as "n× slower" with n = 1 / factor.
fn speed(f: f64) -> f64 {
    if f >= 1.0 { f } else { 1.0 / f }
}
