//! Exports of a scorecard: JSON (complete, schema `bakeoff.scorecard/1`, with the metric
//! definitions and the decision rule), CSV (one line per rule × candidate) and Markdown (for a
//! design doc). Candidates are exported without credentials: no key, no key variable. When the
//! harness flagged the run's speed figures unreliable, every format says so with its reasons
//! (JSON `harness` and each speed row's `warning`, CSV a `harness` line and the speed rows'
//! reason, Markdown a banner and the speed section). An LLM judge grading the run whose
//! calibration against human labels flags it is named with why in every format too (JSON
//! `judge_flags`, CSV a `judge` line each, Markdown a banner), as on the page.
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use serde::Serialize;

use super::parse_query;
use super::view::CardView;
use crate::app::scorecard::{RunScorecard, assemble};
use crate::domain::calibers::HarnessReport;
use crate::domain::candidate::{ClaimedFigure, Conditions, Pricing};
use crate::domain::neutralize::{csv_cell, markdown_text};
use crate::domain::review::calibration::JudgeFlag;
use crate::domain::run::ClockCounts;
use crate::domain::scorecard::intervals::CONFIDENCE;
use crate::domain::scorecard::{ClaimCheck, PairedRow, ParetoPoint, PipelineImpact, Row};
use crate::domain::thresholds::ThresholdRule;
use crate::domain::thresholds::catalog::CATALOG;
use crate::domain::thresholds::units::Dimension;
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::views::download;

/// The JSON export's schema identifier; bump the number on an incompatible change.
pub const SCHEMA: &str = "bakeoff.scorecard/1";
/// The CSV header, one line per rule × candidate.
pub const CSV_HEADER: &str = "dimension,metric,label,candidate,value,unit,interval_low,interval_high,n,sample_unit,conditions,comparator,threshold,state,margin,delta_vs_incumbent,reason";

/// How verdicts are decided, in words (in every export).
pub const DECISION_RULE: &str = "A rule passes when the whole two-sided 90 % interval of the measured value (a one-sided \
95 % bound) lies on the passing side of the threshold, fails when it lies wholly on the failing side, is inconclusive \
when it straddles the threshold or too few observations exist, and is not measured when there is no value. Intervals: \
Wilson for proportions (cases for accuracy, requests for failure rates), percentile bootstrap over requests for latency \
and throughput, exact (Clopper–Pearson) for blind win rates against the incumbent; money spent is counted exactly. A candidate is GO only when every rule passes, NO-GO when any rule \
fails, INCONCLUSIVE otherwise.";

#[derive(Serialize)]
struct MetricDefinition {
    key: &'static str,
    label: &'static str,
    dimension: &'static str,
    unit: &'static str,
    higher_is_better: bool,
    uncertainty: &'static str,
    caliber: &'static str,
    not_measured_yet: Option<&'static str>,
}

#[derive(Serialize)]
struct ExportCandidate<'a> {
    id: i64,
    name: &'a str,
    provider: &'static str,
    model: &'a str,
    conditions: &'a Conditions,
    pricing: &'a Pricing,
    claimed: Option<&'a ClaimedFigure>,
    /// Which clock timed its measured requests (`kernel stamp`, `user space`, `mixed: …`).
    timed_by: String,
    clocks: ClockCounts,
}

#[derive(Serialize)]
struct ExportVerdict<'a> {
    candidate_id: i64,
    candidate: &'a str,
    incumbent: bool,
    verdict: &'static str,
    reasons: &'a [String],
}

#[derive(Serialize)]
struct ExportCell<'a> {
    candidate_id: i64,
    value: Option<f64>,
    interval: Option<[f64; 2]>,
    n: f64,
    sample_unit: &'static str,
    concurrency: Option<u32>,
    state: &'static str,
    margin: Option<f64>,
    delta_vs_incumbent: Option<f64>,
    best: bool,
    reason: &'a str,
    missing: Option<&'a str>,
    /// Speed figures only: the clock that timed the requests the figure is built from.
    timed_by: Option<String>,
}

#[derive(Serialize)]
struct ExportRow<'a> {
    dimension: Option<&'static str>,
    rule: &'a ThresholdRule,
    label: &'a str,
    caliber: &'a str,
    /// Why this row's figures must not be trusted (speed rows of a flagged run); else null.
    warning: Option<&'a str>,
    cells: Vec<ExportCell<'a>>,
}

/// How far the harness could be trusted in this run (null in the export when the run has no
/// harness report, e.g. it ran before reports were kept).
#[derive(Serialize)]
struct ExportHarness<'a> {
    speed_figures_reliable: bool,
    /// Why the speed figures were flagged (empty when reliable).
    reasons: &'a [String],
    /// Which rules the flag concerns.
    affects: &'static str,
    report: &'a HarnessReport,
}

#[derive(Serialize)]
struct ExportCost {
    candidate_id: i64,
    total_usd: Option<f64>,
    per_1k_cases_usd: Option<f64>,
    /// Per 1,000 requests sent: retries are requests too (the page shows both).
    per_1k_requests_usd: Option<f64>,
    per_correct_usd: Option<f64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    attempts: Option<usize>,
    /// The llm-judge calls made for this candidate's outputs, at the judges' prices (not in
    /// `total_usd`).
    judge: Option<crate::domain::scorecard::JudgeCost>,
}

#[derive(Serialize)]
struct Export<'a> {
    schema: &'static str,
    bakeoff_version: &'static str,
    generated_at: String,
    decision_rule: &'static str,
    confidence: f64,
    run: serde_json::Value,
    harness: Option<ExportHarness<'a>>,
    /// The LLM judges grading this run that are flagged by their calibration (empty: none).
    judge_flags: &'a [JudgeFlag],
    profile: serde_json::Value,
    candidates: Vec<ExportCandidate<'a>>,
    verdicts: Vec<ExportVerdict<'a>>,
    rows: Vec<ExportRow<'a>>,
    costs: Vec<ExportCost>,
    claims: Vec<Option<&'a ClaimCheck>>,
    paired_comparisons: &'a [PairedRow],
    pipeline: serde_json::Value,
    pipeline_impact: &'a [Option<PipelineImpact>],
    pareto: &'a [ParetoPoint],
    metric_definitions: Vec<MetricDefinition>,
    measurement_definitions: Vec<serde_json::Value>,
    /// The throughput-vs-concurrency chart's data: every candidate's aggregate at every level
    /// measured, from the one level computation, and its knee when the run was a sweep.
    load_levels: Vec<serde_json::Value>,
}

/// The chart's series as export rows.
fn load_levels(j: &RunScorecard) -> Vec<serde_json::Value> {
    crate::app::pages::charts::throughput_series(j)
        .iter()
        .map(|s| {
            let levels: Vec<serde_json::Value> = s
                .points
                .iter()
                .map(|&(c, v)| {
                    let whole = s.whole_run.iter().find(|w| w.0 == c).map(|w| w.1);
                    serde_json::json!({
                        "concurrency": c as u32,
                        "aggregate_tok_s_steady_window": v,
                        "aggregate_tok_s_whole_run": whole,
                        "knee": s.knee.as_ref().is_some_and(|k| f64::from(k.concurrency) == c),
                    })
                })
                .collect();
            serde_json::json!({
                "candidate_id": s.candidate_id,
                "candidate": s.name,
                "levels": levels,
                "knee": s.knee,
                "segments": s.segments,
                "downtime_s": s.downtime_s,
            })
        })
        .collect()
}

/// What the flag concerns, in words.
const SPEED_RULES: &str = "the throughput and latency rules (dimension throughput)";

/// The harness's reasons when it flagged this run's speed figures unreliable.
fn speed_flag(j: &RunScorecard) -> Option<&[String]> {
    j.harness
        .as_ref()
        .filter(|h| h.unreliable)
        .map(|h| h.reasons.as_slice())
}

/// Whether a row's figures are speed figures (the ones the harness can spoil).
fn is_speed(row: &Row) -> bool {
    row.dimension == Some(Dimension::Throughput)
}

fn export_row<'a>(row: &'a Row, j: &'a RunScorecard, warning: Option<&'a str>) -> ExportRow<'a> {
    ExportRow {
        dimension: row.dimension.map(|d| d.as_str()),
        rule: &row.rule,
        label: &row.label,
        caliber: &row.caliber,
        warning: warning.filter(|_| is_speed(row)),
        cells: row
            .cells
            .iter()
            .zip(&j.card.columns)
            .map(|(c, col)| ExportCell {
                candidate_id: col.candidate_id,
                value: c.measurement.value,
                interval: c.measurement.interval.map(|(a, b)| [a, b]),
                n: c.measurement.n,
                sample_unit: c.measurement.unit.as_str(),
                concurrency: c.measurement.concurrency,
                state: c.assessment.state.as_str(),
                margin: c.assessment.margin,
                delta_vs_incumbent: c.delta,
                best: c.best,
                reason: &c.assessment.reason,
                missing: c.measurement.missing.as_deref(),
                timed_by: is_speed(row).then(|| clocks_of(j, col.candidate_id).label()),
            })
            .collect(),
    }
}

/// The complete JSON document.
pub fn to_json(j: &RunScorecard) -> serde_json::Value {
    let warning = super::view::speed_warning(j);
    let export = Export {
        schema: SCHEMA,
        bakeoff_version: crate::VERSION,
        generated_at: crate::domain::Timestamp::now().display(),
        decision_rule: DECISION_RULE,
        confidence: CONFIDENCE,
        run: serde_json::json!({
            "id": j.run.id,
            "name": j.run.name,
            "status": j.run.status.as_str(),
            "config": j.run.config,
            "evalset": j.version.as_ref().map(|v| serde_json::json!({
                "name": v.header.name,
                "version_id": v.id,
                "content_hash": v.content_hash,
                "cases": v.case_count,
            })),
            "created_at": j.run.created_at.display(),
        }),
        harness: j.harness.as_ref().map(|h| ExportHarness {
            speed_figures_reliable: !h.unreliable,
            reasons: &h.reasons,
            affects: SPEED_RULES,
            report: h,
        }),
        judge_flags: &j.judge_flags,
        profile: serde_json::json!({
            "id": j.profile.id,
            "name": j.profile.name,
            "description": j.profile.description,
            "version": j.profile.version,
            "current_version": j.current_version,
            "rules": j.profile.rules,
        }),
        candidates: j
            .candidates
            .iter()
            .map(|c| ExportCandidate {
                id: c.id,
                name: &c.spec.name,
                provider: c.spec.provider.as_str(),
                model: &c.spec.model,
                conditions: &c.spec.conditions,
                pricing: &c.spec.pricing,
                claimed: c.spec.claimed.as_ref(),
                timed_by: clocks_of(j, c.id).label(),
                clocks: clocks_of(j, c.id),
            })
            .collect(),
        verdicts: j
            .card
            .columns
            .iter()
            .map(|c| ExportVerdict {
                candidate_id: c.candidate_id,
                candidate: &c.name,
                incumbent: c.incumbent,
                verdict: c.verdict.as_str(),
                reasons: &c.reasons,
            })
            .collect(),
        rows: j
            .card
            .rows
            .iter()
            .map(|r| export_row(r, j, warning.as_deref()))
            .collect(),
        costs: export_costs(j),
        claims: j.card.claims.iter().map(Option::as_ref).collect(),
        paired_comparisons: &j.card.paired,
        pipeline: serde_json::to_value(&j.pipeline).unwrap_or_default(),
        pipeline_impact: &j.card.pipeline,
        pareto: &j.card.pareto,
        metric_definitions: metric_definitions(),
        measurement_definitions: crate::web::how_we_measure::METRICS
            .iter()
            .map(|m| serde_json::json!({"name": m.name, "label": m.label, "unit": m.unit, "definition": m.definition}))
            .collect(),
        load_levels: load_levels(j),
    };
    serde_json::to_value(export).unwrap_or_default()
}

/// Each candidate's cost (and its judge's), as the JSON states it.
fn export_costs(j: &RunScorecard) -> Vec<ExportCost> {
    j.card
        .costs
        .iter()
        .zip(&j.card.columns)
        .zip(&j.card.judge_costs)
        .map(|((c, col), judge)| ExportCost {
            judge: judge.clone(),
            candidate_id: col.candidate_id,
            total_usd: c.as_ref().map(|c| c.total_usd),
            per_1k_cases_usd: c.as_ref().and_then(|c| c.per_1k_cases),
            per_1k_requests_usd: c.as_ref().and_then(|c| c.per_1k_requests),
            per_correct_usd: c.as_ref().and_then(|c| c.per_correct),
            input_tokens: c.as_ref().map(|c| c.totals.input_tokens),
            output_tokens: c.as_ref().map(|c| c.totals.output_tokens),
            attempts: c.as_ref().map(|c| c.totals.attempts),
        })
        .collect()
}

/// Every metric a rule can name, with its unit, direction and uncertainty.
fn metric_definitions() -> Vec<MetricDefinition> {
    CATALOG
        .iter()
        .map(|d| MetricDefinition {
            key: d.base,
            label: d.label,
            dimension: d.dimension.as_str(),
            unit: d.unit.symbol(),
            higher_is_better: d.higher_is_better,
            uncertainty: match d.uncertainty {
                crate::domain::thresholds::units::Uncertainty::Proportion => "wilson",
                crate::domain::thresholds::units::Uncertainty::Bootstrap => "bootstrap",
                crate::domain::thresholds::units::Uncertainty::Exact => "exact",
                crate::domain::thresholds::units::Uncertainty::ClopperPearson => "clopper_pearson",
            },
            caliber: d.caliber,
            not_measured_yet: d.not_measured_yet,
        })
        .collect()
}

/// Which clocks timed a candidate's measured requests (none recorded when it has no summary).
fn clocks_of(j: &RunScorecard, candidate_id: i64) -> ClockCounts {
    j.summaries
        .iter()
        .find(|s| s.candidate_id == candidate_id)
        .map(|s| s.clocks)
        .unwrap_or_default()
}

/// A speed figure built from requests timed on both clocks says so.
fn mixed_clock_note(j: &RunScorecard, candidate_id: i64) -> Option<String> {
    let clocks = clocks_of(j, candidate_id);
    clocks
        .mixed()
        .then(|| format!("figure from mixed clocks ({})", clocks.label()))
}

fn opt(v: Option<f64>) -> String {
    v.map(crate::domain::format::data).unwrap_or_default()
}

pub fn to_csv(j: &RunScorecard) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push_str("\r\n");
    csv_rule_lines(j, &mut out);
    csv_verdict_lines(j, &mut out);
    csv_throughput_lines(j, &mut out);
    csv_clock_lines(j, &mut out);
    csv_harness_line(j, &mut out);
    csv_judge_lines(j, &mut out);
    out
}

/// One CSV line of `fields`, each neutralised.
fn csv_line<S: AsRef<str>>(out: &mut String, fields: &[S]) {
    let line: Vec<String> = fields.iter().map(|f| csv_cell(f.as_ref())).collect();
    out.push_str(&line.join(","));
    out.push_str("\r\n");
}

/// A line per rule and candidate: the figure, its interval and conditions, the verdict.
fn csv_rule_lines(j: &RunScorecard, out: &mut String) {
    let flag = speed_flag(j).map(|reasons| format!("UNRELIABLE speed figure (harness: {})", reasons.join("; ")));
    for row in &j.card.rows {
        for (cell, col) in row.cells.iter().zip(&j.card.columns) {
            let m = &cell.measurement;
            // A spreadsheet filtered to one rule still sees that its speed figure is suspect.
            let reason = match flag.as_ref().filter(|_| is_speed(row)) {
                Some(f) => format!("{f}; {}", cell.assessment.reason),
                None => cell.assessment.reason.clone(),
            };
            let reason = match mixed_clock_note(j, col.candidate_id).filter(|_| is_speed(row)) {
                Some(note) => format!("{note}; {reason}"),
                None => reason,
            };
            let fields = [
                row.dimension.map(|d| d.as_str()).unwrap_or("").to_string(),
                row.rule.metric.clone(),
                row.label.clone(),
                col.name.clone(),
                opt(m.value),
                row.unit.map(|u| u.stored_name()).unwrap_or(&row.rule.unit).to_string(),
                opt(m.interval.map(|i| i.0)),
                opt(m.interval.map(|i| i.1)),
                m.n.to_string(),
                m.unit.as_str().to_string(),
                if m.value.is_some() {
                    m.conditions()
                } else {
                    String::new()
                },
                row.rule.comparator.as_str().to_string(),
                row.rule.value.to_string(),
                cell.assessment.state.as_str().to_string(),
                opt(cell.assessment.margin),
                opt(cell.delta),
                reason,
            ];
            csv_line(out, &fields);
        }
    }
}

/// A line per candidate: its verdict and the reasons.
fn csv_verdict_lines(j: &RunScorecard, out: &mut String) {
    for col in &j.card.columns {
        let reasons = col.reasons.join("; ");
        let fields = [
            "",
            "verdict",
            "verdict",
            &col.name,
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            col.verdict.as_str(),
            "",
            "",
            &reasons,
        ];
        csv_line(out, &fields);
    }
}

/// The throughput curve (the chart's data): per candidate and level, the steady-window
/// aggregate (with the knee) and the whole-run one.
fn csv_throughput_lines(j: &RunScorecard, out: &mut String) {
    for series in crate::app::pages::charts::throughput_series(j) {
        for &(c, v) in &series.points {
            let knee = series.knee.as_ref().filter(|k| f64::from(k.concurrency) == c);
            let whole = series.whole_run.iter().find(|w| w.0 == c).map(|w| w.1);
            let steady = (
                format!("aggregate_tok_s@c={c}"),
                format!("aggregate tok/s @c={c} (steady window)"),
                Some(v),
                knee.map_or(String::new(), |k| format!("knee ({}): {}", k.rule, k.explanation)),
            );
            let whole_run = (
                format!("whole_run_tok_s@c={c}"),
                format!("aggregate tok/s @c={c} (whole run)"),
                whole,
                String::new(),
            );
            for (metric, label, value, note) in [steady, whole_run] {
                let mut fields = vec![String::new(); 17];
                fields[0] = "load_level".into();
                fields[1] = metric;
                fields[2] = label;
                fields[3] = series.name.clone();
                fields[4] = opt(value);
                fields[5] = "tok/s".into();
                fields[10] = format!("@c={c}");
                fields[16] = note;
                csv_line(out, &fields);
            }
        }
    }
}

/// One line per candidate for the clock that timed its requests.
fn csv_clock_lines(j: &RunScorecard, out: &mut String) {
    for col in &j.card.columns {
        let clocks = clocks_of(j, col.candidate_id);
        let mut fields = vec![String::new(); 17];
        fields[0] = "clock".into();
        fields[1] = "timed_by".into();
        fields[2] = "timed by".into();
        fields[3] = col.name.clone();
        fields[13] = match (clocks.single(), clocks.mixed()) {
            (Some(c), _) => c.as_str().to_string(),
            (None, true) => "mixed".to_string(),
            (None, false) => "not-recorded".to_string(),
        };
        fields[16] = clocks.label();
        let line: Vec<String> = fields.iter().map(|f| csv_cell(f)).collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
}

/// One line for the harness, when it reported: state reliable / unreliable and why.
fn csv_harness_line(j: &RunScorecard, out: &mut String) {
    if let Some(h) = &j.harness {
        let reason = if h.unreliable {
            format!("{}; concerns {SPEED_RULES}", h.reasons.join("; "))
        } else {
            "the harness kept up: no lag or CPU bound was exceeded".to_string()
        };
        let state = if h.unreliable { "unreliable" } else { "reliable" };
        let mut fields = vec![String::new(); 17];
        fields[0] = "harness".into();
        fields[1] = "speed_figures".into();
        fields[2] = "speed figures".into();
        fields[13] = state.into();
        fields[16] = reason;
        csv_line(out, &fields);
    }
}

/// One line per flagged LLM judge: `flagged` and why.
fn csv_judge_lines(j: &RunScorecard, out: &mut String) {
    for flag in &j.judge_flags {
        let mut fields = vec![String::new(); 17];
        fields[0] = "judge".into();
        fields[1] = "judge_calibration".into();
        fields[2] = format!("LLM judge {}", flag.judge);
        fields[13] = "flagged".into();
        fields[16] = format!("{}: read its grades with care", flag.why);
        csv_line(out, &fields);
    }
}

pub fn to_markdown(j: &RunScorecard) -> String {
    let view = super::view::build(j);
    let mut out = String::new();
    markdown_verdicts(&view, &j.judge_flags, &mut out);
    markdown_clocks(j, &mut out);
    markdown_sections(&view, &mut out);
    markdown_throughput(j, &mut out);
    markdown_costs(&view, &mut out);
    markdown_comparisons(&view, &mut out);
    out.push_str(&format!("\n---\n{}\n", DECISION_RULE));
    out
}

/// The title, what judged the run, the speed warning and each candidate's verdict.
fn markdown_verdicts(view: &CardView, judge_flags: &[JudgeFlag], out: &mut String) {
    out.push_str(&format!(
        "# Scorecard: run #{} {}\n\n",
        view.run_id,
        markdown_text(&view.run_name)
    ));
    out.push_str(&format!(
        "Judged by **{}** version {} · eval set {} · {}\n\n",
        markdown_text(&view.profile_name),
        view.profile_version,
        markdown_text(&view.evalset),
        markdown_text(&view.conditions)
    ));
    if let Some(s) = &view.slo_note {
        out.push_str(&format!("{}\n\n", markdown_text(s)));
    }
    if let Some(w) = &view.speed_warning {
        out.push_str(&format!("> **UNRELIABLE speed figures.** {}\n\n", markdown_text(w)));
    }
    for flag in judge_flags {
        out.push_str(&format!(
            "> **JUDGE FLAGGED.** The LLM judge {} grading this run's eval set {}: read its grades with care.\n\n",
            markdown_text(&flag.judge),
            markdown_text(&flag.why)
        ));
    }
    out.push_str("## Verdicts\n\n| Candidate | Verdict | Reasons |\n|---|---|---|\n");
    for c in &view.columns {
        out.push_str(&format!(
            "| {}{} | **{}** | {} |\n",
            markdown_text(&c.name),
            if c.incumbent { " (incumbent)" } else { "" },
            c.verdict,
            markdown_text(&c.reasons.join("; "))
        ));
    }
}

/// Which clock timed each candidate's requests.
fn markdown_clocks(j: &RunScorecard, out: &mut String) {
    out.push_str(
        "\n## Timed by\n\nThe clock that timed each candidate's requests: the kernel's receive stamp of the segment that \
         carried each event (over https, that completed its TLS record), or user space (when bakeoff's read returned: \
         behind a proxy).\n\n| Candidate | Timed by |\n|---|---|\n",
    );
    for col in &j.card.columns {
        out.push_str(&format!(
            "| {} | {} |\n",
            markdown_text(&col.name),
            markdown_text(&clocks_of(j, col.candidate_id).label())
        ));
    }
}

/// A table per dimension: each rule's figure and state for every candidate.
fn markdown_sections(view: &CardView, out: &mut String) {
    let header: Vec<String> = view.columns.iter().map(|c| markdown_text(&c.name)).collect();
    for section in &view.sections {
        if section.rows.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "\n## {}\n\n| Rule | {} |\n|---|{}\n",
            section.title,
            header.join(" | "),
            "---|".repeat(header.len())
        ));
        if let Some(w) = &section.warning {
            // After the table would be lost in long tables; a row of its own keeps it with them.
            out.push_str(&format!(
                "| **UNRELIABLE**: {} | {} |\n",
                markdown_text(w),
                vec![""; header.len()].join(" | ")
            ));
        }
        for r in &section.rows {
            let cells: Vec<String> = r
                .cells
                .iter()
                .map(|c| {
                    let mut t = format!("{} — **{}**", markdown_text(&c.value), markdown_text(c.state));
                    if let Some(d) = &c.delta {
                        t.push_str(&format!(" ({})", markdown_text(d)));
                    }
                    t
                })
                .collect();
            out.push_str(&format!(
                "| {} {} | {} |\n",
                markdown_text(&r.label),
                markdown_text(&r.threshold),
                cells.join(" | ")
            ));
        }
    }
}

/// The throughput by load level (the chart's data), with the knee.
fn markdown_throughput(j: &RunScorecard, out: &mut String) {
    let series = crate::app::pages::charts::throughput_series(j);
    if series.iter().any(|s| !s.points.is_empty()) {
        out.push_str(
            "\n## Throughput by load level\n\n| Candidate | Load | Aggregate tok/s (steady window) | Aggregate tok/s (whole run) | Knee |\n|---|---|---|---|---|\n",
        );
        for s in &series {
            for &(c, v) in &s.points {
                let whole = s.whole_run.iter().find(|w| w.0 == c).map(|w| w.1);
                let knee = s.knee.as_ref().filter(|k| f64::from(k.concurrency) == c);
                out.push_str(&format!(
                    "| {} | c={c} | {} tok/s | {} | {} |\n",
                    markdown_text(&s.name),
                    crate::domain::format::significant(v),
                    whole.map_or("—".to_string(), |w| format!(
                        "{} tok/s",
                        crate::domain::format::significant(w)
                    )),
                    knee.map_or(String::new(), |k| markdown_text(&format!(
                        "knee ({}): {}",
                        k.rule, k.explanation
                    )))
                ));
            }
        }
    }
}

/// What each candidate cost, and its judge.
fn markdown_costs(view: &CardView, out: &mut String) {
    out.push_str(
        "\n## Cost\n\n| Candidate | Run cost | Per 1,000 cases | Per 1,000 requests | Per correct answer |\n|---|---|---|---|---|\n",
    );
    for c in &view.costs {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            markdown_text(&c.candidate),
            c.total,
            c.per_1k,
            c.per_1k_requests,
            c.per_correct
        ));
    }
    for c in &view.costs {
        if let Some(judge) = &c.judge {
            out.push_str(&format!(
                "\n{}: {}\n",
                markdown_text(&c.candidate),
                markdown_text(judge)
            ));
        }
    }
}

/// Claims against measurements, paired comparisons, the pipeline's impact and the Pareto front.
fn markdown_comparisons(view: &CardView, out: &mut String) {
    if !view.claims.is_empty() {
        out.push_str("\n## Claimed vs measured\n\n");
        for c in &view.claims {
            out.push_str(&format!(
                "- **{}**: claimed {}; measured {} — {}.{}\n",
                markdown_text(&c.candidate),
                markdown_text(&c.claimed),
                markdown_text(&c.measured),
                markdown_text(&c.summary),
                if c.differences.is_empty() {
                    String::new()
                } else {
                    format!(" Differences: {}.", markdown_text(&c.differences.join("; ")))
                }
            ));
        }
    }
    if !view.paired.is_empty() {
        out.push_str("\n## Paired accuracy comparisons\n\n");
        for p in &view.paired {
            out.push_str(&format!("- {}\n", markdown_text(p)));
        }
    }
    if view.pipeline_stated {
        out.push_str("\n## Pipeline impact (Amdahl)\n\n");
        for p in &view.pipeline {
            out.push_str(&format!(
                "- {}: {} — {}\n",
                markdown_text(&p.candidate),
                p.model_time,
                markdown_text(&p.text)
            ));
        }
    }
    out.push_str(&format!("\n## Pareto ({})\n\n", markdown_text(&view.pareto_axes)));
    for p in &view.pareto {
        out.push_str(&format!(
            "- {}: accuracy {}, {}, {} per 1,000 cases — {}\n",
            markdown_text(&p.candidate),
            p.quality,
            p.speed,
            p.cost,
            markdown_text(&p.status)
        ));
    }
}

pub(crate) async fn load(state: &AppState, raw: &str, query: Option<String>) -> Result<RunScorecard, WebError> {
    let id = parse_id(raw, "run")?;
    let q = parse_query(query.as_deref())?;
    Ok(assemble(&state.store, &state.views.summaries, id, &q).await?)
}

pub async fn json(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, WebError> {
    let j = load(&state, &raw, query).await?;
    let body = serde_json::to_string_pretty(&to_json(&j))
        .map_err(|e| WebError::Internal(format!("serialising scorecard of run {}: {e}", j.run.id)))?;
    Ok(download(
        body,
        "application/json",
        format!("scorecard-run{}-v{}.json", j.run.id, j.profile.version),
    ))
}

pub async fn csv(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, WebError> {
    let j = load(&state, &raw, query).await?;
    Ok(download(
        to_csv(&j),
        "text/csv; charset=utf-8",
        format!("scorecard-run{}-v{}.csv", j.run.id, j.profile.version),
    ))
}

pub async fn markdown(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, WebError> {
    let j = load(&state, &raw, query).await?;
    Ok(download(
        to_markdown(&j),
        "text/markdown; charset=utf-8",
        format!("scorecard-run{}-v{}.md", j.run.id, j.profile.version),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_header_has_one_name_per_field() {
        assert_eq!(CSV_HEADER.split(',').count(), 17);
    }
}
