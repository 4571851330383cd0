//! The tool rows per load level (`domain::tool_calls::levels`), worded for the run page and the
//! scorecard: per candidate and level, tool-call accuracy, argument F1, malformed-call rate and
//! abstention errors with their 90 % intervals, and the timing of tool turns (time to the first
//! argument piece and to the complete call, p50 with its interval and p95), calibers named.
use serde::{Deserialize, Serialize};

use super::format::NOT_MEASURED;
use crate::domain::format;
use crate::domain::scorecard::Measurement;
use crate::domain::tool_calls::RunToolMode;
use crate::domain::tool_calls::levels::{COMPLETE_CALIBER, FIRST_ARGUMENT_CALIBER, ToolLevel, TurnTiming};

/// The tool block of a run: None when no answer of the run carries a `tool-calls` grade.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolLevelsView {
    /// "native API" or "prompt mode (tools in the system prompt, calls read from the text)".
    pub mode: String,
    /// `native` or `prompt`, for data attributes.
    pub mode_slug: String,
    pub rows: Vec<ToolLevelRow>,
    pub first_argument_caliber: String,
    pub complete_caliber: String,
    /// The same cases and candidates in the other mode (set when the page is shown, never cached).
    #[serde(default)]
    pub other_mode: Option<ModePair>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolLevelRow {
    pub candidate: String,
    /// `c=16`, or "open loop".
    pub load: String,
    pub concurrency: u32,
    /// Graded tool-case answers (final attempts) at the level, and how many were cut mid-call.
    pub answers: usize,
    pub cut_mid_call: usize,
    pub accuracy: String,
    pub argument_f1: String,
    pub malformed: String,
    pub abstention: String,
    pub first_argument_p50: String,
    pub first_argument_p95: String,
    pub complete_p50: String,
    pub complete_p95: String,
    /// Tool turns timed (first argument, complete).
    pub timed: (usize, usize),
}

/// `92.0 % [85.1–96.2 %]`, or "—" with nothing measured.
fn share(m: &Measurement) -> String {
    match (m.value, m.interval) {
        (Some(v), Some((lo, hi))) => format!(
            "{} [{}–{}]",
            format::percent(v, 1),
            format::percent(lo, 1).trim_end_matches(" %"),
            format::percent(hi, 1)
        ),
        (Some(v), None) => format::percent(v, 1),
        _ => NOT_MEASURED.into(),
    }
}

/// `123 ms [110–130]` (p50 with its interval).
fn p50(t: &TurnTiming) -> String {
    match (t.p50_ms, t.p50_interval_ms) {
        (Some(v), Some((lo, hi))) => format!(
            "{} ms [{}–{}]",
            format::significant(v),
            format::significant(lo),
            format::significant(hi)
        ),
        (Some(v), None) => format!("{} ms", format::significant(v)),
        _ => NOT_MEASURED.into(),
    }
}

fn p95(t: &TurnTiming) -> String {
    super::format::ms(t.p95_ms)
}

/// The block of a run whose tool case answers were sent in `mode`: one row per candidate and
/// level, candidates in the run's order. None when no candidate has a graded tool answer.
pub fn tool_levels_view(mode: RunToolMode, per_candidate: Vec<(String, Vec<ToolLevel>)>) -> Option<ToolLevelsView> {
    let rows: Vec<ToolLevelRow> = per_candidate
        .into_iter()
        .flat_map(|(candidate, levels)| {
            levels.into_iter().map(move |l| ToolLevelRow {
                candidate: candidate.clone(),
                load: if l.concurrency == 0 {
                    "open loop".to_string()
                } else {
                    format!("c={}", l.concurrency)
                },
                concurrency: l.concurrency,
                answers: l.answers,
                cut_mid_call: l.cut_mid_call,
                accuracy: share(&l.accuracy),
                argument_f1: share(&l.argument_f1),
                malformed: share(&l.malformed),
                abstention: share(&l.abstention),
                first_argument_p50: p50(&l.first_argument),
                first_argument_p95: p95(&l.first_argument),
                complete_p50: p50(&l.complete),
                complete_p95: p95(&l.complete),
                timed: (l.first_argument.n, l.complete.n),
            })
        })
        .collect();
    (!rows.is_empty()).then(|| ToolLevelsView {
        mode: mode_text(mode).to_string(),
        mode_slug: mode.as_str().to_string(),
        rows,
        first_argument_caliber: FIRST_ARGUMENT_CALIBER.to_string(),
        complete_caliber: COMPLETE_CALIBER.to_string(),
        other_mode: None,
    })
}

/// How a run sent its tool cases, in words.
pub fn mode_text(mode: RunToolMode) -> &'static str {
    match mode {
        RunToolMode::Native => "native API (tools / tool_calls, tool_use blocks)",
        RunToolMode::Prompt => "prompt mode (tools described in the system prompt, calls read from the text)",
        RunToolMode::Both => {
            "both modes, side by side: each candidate through its native API, and beside it as \
             \"… (prompt mode)\" (tools described in the system prompt, calls read from the text) at the same load"
        }
    }
}

/// The newest other ended run of the same eval-set version and candidates whose tool cases were
/// sent in the other mode: the run page and the scorecard link the two side by side
/// (`/archive/compare`). Looks at the newest [`PAIR_SEARCH`] runs.
pub async fn other_mode_run(
    store: &crate::store::DynStore,
    run: &crate::domain::run::Run,
) -> Result<Option<ModePair>, crate::store::StoreError> {
    if run.config.tool_mode == RunToolMode::Both {
        return Ok(None);
    }
    let mut mine = run.candidate_ids.clone();
    mine.sort_unstable();
    let runs = store.list_runs(PAIR_SEARCH, 0).await?;
    Ok(runs
        .into_iter()
        .map(|item| item.run)
        .find(|other| {
            let mut theirs = other.candidate_ids.clone();
            theirs.sort_unstable();
            other.id != run.id
                && other.status.is_terminal()
                && other.evalset_version_id == run.evalset_version_id
                && other.config.tool_mode != run.config.tool_mode
                && other.config.tool_mode != RunToolMode::Both
                && theirs == mine
        })
        .map(|other| ModePair {
            run_id: other.id,
            mode: mode_text(other.config.tool_mode).to_string(),
            compare_href: format!(
                "/archive/compare?runs={},{}",
                run.id.min(other.id),
                run.id.max(other.id)
            ),
        }))
}

/// Runs [`other_mode_run`] looks through, newest first.
pub const PAIR_SEARCH: i64 = 200;

/// The run of the same cases and candidates in the other tool mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModePair {
    pub run_id: i64,
    pub mode: String,
    pub compare_href: String,
}

/// Structured output per candidate and load level: the schema-validity rate, and — when the run
/// sent unconstrained twins — TTFT and decode rate with and without the constraint side by side.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StructuredView {
    pub rows: Vec<StructuredRow>,
    /// Whether any row compares with unconstrained twins.
    pub with_twins: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StructuredRow {
    pub candidate: String,
    pub load: String,
    /// Answers graded against the schema.
    pub answers: usize,
    pub schema_valid: String,
    /// "—" without twins.
    pub ttft_constrained: String,
    pub ttft_unconstrained: String,
    pub ttft_difference: String,
    pub decode_constrained: String,
    pub decode_unconstrained: String,
    pub decode_difference: String,
}

/// A candidate's structured-output figures per level from its final attempts (empty when none
/// of its answers was graded against a schema).
pub fn structured_rows(candidate: &str, finals: &[&crate::domain::run::RequestRecord]) -> Vec<StructuredRow> {
    use crate::domain::tool_calls::structured::{SCHEMA_GRADER, constraint_cost, schema_valid_rate};
    let mut by_level: std::collections::BTreeMap<u32, Vec<&crate::domain::run::RequestRecord>> = Default::default();
    for r in finals.iter().filter(|r| !r.is_warmup) {
        if r.grades.iter().any(|g| &*g.grader == SCHEMA_GRADER) {
            by_level.entry(r.concurrency).or_default().push(r);
        }
    }
    let costs = constraint_cost(finals);
    let signed = |v: f64, unit: &str| {
        let sign = if v > 0.0 { "+" } else { "" };
        format!("{sign}{} {unit}", format::significant(v))
    };
    let difference = |c: &crate::domain::tool_calls::structured::Compared, unit: &str| match (c.difference, c.interval)
    {
        (Some(d), Some((lo, hi))) => format!("{} [{} – {}]", signed(d, unit), signed(lo, unit), signed(hi, unit)),
        (Some(d), None) => signed(d, unit),
        _ => NOT_MEASURED.into(),
    };
    by_level
        .into_iter()
        .map(|(level, records)| {
            let cost = costs.iter().find(|c| c.concurrency == level);
            let valid = schema_valid_rate(&records, Some(level));
            let ms = |v: Option<f64>| super::format::ms(v);
            let tok = |v: Option<f64>| super::format::tok_s(v);
            StructuredRow {
                candidate: candidate.to_string(),
                load: if level == 0 {
                    "open loop".to_string()
                } else {
                    format!("c={level}")
                },
                answers: records.len(),
                schema_valid: share(&valid),
                ttft_constrained: ms(cost.and_then(|c| c.ttft_ms.constrained)),
                ttft_unconstrained: ms(cost.and_then(|c| c.ttft_ms.unconstrained)),
                ttft_difference: cost.map_or(NOT_MEASURED.into(), |c| difference(&c.ttft_ms, "ms")),
                decode_constrained: tok(cost.and_then(|c| c.decode_tok_s.constrained)),
                decode_unconstrained: tok(cost.and_then(|c| c.decode_tok_s.unconstrained)),
                decode_difference: cost.map_or(NOT_MEASURED.into(), |c| difference(&c.decode_tok_s, "tok/s")),
            }
        })
        .collect()
}
