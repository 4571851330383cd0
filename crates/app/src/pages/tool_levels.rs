//! The tool rows per load level (`domain::tool_calls::levels`), worded for the run page and the
//! scorecard: per candidate and level, tool-call accuracy, argument F1, malformed-call rate and
//! abstention errors with their 90 % intervals, and the timing of tool turns (time to the first
//! argument piece and to the complete call, p50 with its interval and p95), calibers named.
use serde::{Deserialize, Serialize};

use super::format::NOT_MEASURED;
use crate::domain::format;
use crate::domain::scorecard::Measurement;
use crate::domain::tool_calls::ToolMode;
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
pub fn tool_levels_view(mode: ToolMode, per_candidate: Vec<(String, Vec<ToolLevel>)>) -> Option<ToolLevelsView> {
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
pub fn mode_text(mode: ToolMode) -> &'static str {
    match mode {
        ToolMode::Native => "native API (tools / tool_calls, tool_use blocks)",
        ToolMode::Prompt => "prompt mode (tools described in the system prompt, calls read from the text)",
    }
}

/// The newest other ended run of the same eval-set version and candidates whose tool cases were
/// sent in the other mode: the run page and the scorecard link the two side by side
/// (`/archive/compare`). Looks at the newest [`PAIR_SEARCH`] runs.
pub async fn other_mode_run(
    store: &crate::store::DynStore,
    run: &crate::domain::run::Run,
) -> Result<Option<ModePair>, crate::store::StoreError> {
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
                && theirs == mine
        })
        .map(|other| ModePair {
            run_id: other.id,
            mode: mode_text(other.config.tool_mode).to_string(),
            compare_href: format!("/archive/compare?runs={},{}", run.id.min(other.id), run.id.max(other.id)),
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
