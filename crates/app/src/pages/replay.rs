//! A replay run's block (`LoadShape::Replay`, docs/workloads.md "Replay as a run level"), on
//! its run page and scorecard: per candidate, the workload and speed replayed, the requests
//! sent of the workload's, the send lag (sent − due) p50/p99/max, the lengths sent exactly,
//! and — past the fidelity bar — the statement that the replay level's speed figures are
//! marked "replay fell behind". Read from the stored sends (`run_replay_sends`).
use crate::domain::candidate::Candidate;
use crate::domain::run::Run;
use crate::domain::workload::replay::{REPLAY_LAG_BOUND_MS, ReplaySummary};
use crate::store::{DynStore, StoreError};

/// How the bar is stated wherever the block is shown.
pub fn fidelity_rule() -> String {
    format!(
        "Send lag is when a request was written minus when the workload's schedule (its recorded arrival ÷ the \
         speed-up, from the level's start) said it was due. When a candidate's p99 send lag is above \
         {REPLAY_LAG_BOUND_MS} ms, its replay level's speed figures are marked \"replay fell behind\": requests arrived \
         later and more bunched than recorded. Each request is sent once (never retried), with exactly its recorded \
         input length (o200k) and max_tokens its recorded output."
    )
}

/// One candidate's replay, worded.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayCandidateView {
    pub name: String,
    /// `1000 of 1000`.
    pub sent: String,
    /// `0.21 ms`, `1.30 ms`, `4.02 ms` (or "—").
    pub lag_p50: String,
    pub lag_p99: String,
    pub lag_max: String,
    /// `1000 of 1000`.
    pub lengths: String,
    /// Requests sent after a restart on a re-anchored schedule (0: none).
    pub after_restart: usize,
    /// Why the level's speed figures are marked ("replay fell behind: …"); empty: not marked.
    pub marks: Vec<String>,
}

/// A replay run's block.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayView {
    /// `prod-traffic` version #3.
    pub workload: String,
    pub workload_version: i64,
    /// `2×`.
    pub speed: String,
    /// The level's label on the per-level table (`replay 2×`).
    pub level: String,
    pub rule: String,
    pub candidates: Vec<ReplayCandidateView>,
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{v:.2} ms"))
}

/// The block of `run` (None unless it replays a workload).
pub async fn replay_view(
    store: &DynStore,
    run: &Run,
    candidates: &[Candidate],
) -> Result<Option<ReplayView>, StoreError> {
    let Some((workload_version, speed)) = run.config.load.replay() else {
        return Ok(None);
    };
    let (workload, requests) = match store.get_workload_version(workload_version).await? {
        Some(v) => (
            format!("{} version #{workload_version}", v.file.header.name),
            v.file.requests.len(),
        ),
        None => (format!("workload version #{workload_version} (no longer stored)"), 0),
    };
    let sends = store.list_replay_sends(run.id).await?;
    let candidates = run
        .candidate_ids
        .iter()
        .map(|&id| {
            let s = ReplaySummary::of(id, requests, &sends);
            ReplayCandidateView {
                name: crate::pages::run_page::candidate_name(candidates, id),
                sent: format!("{} of {}", s.sent, s.requests),
                lag_p50: ms(s.lag_ms.as_ref().map(|d| d.p50)),
                lag_p99: ms(s.lag_ms.as_ref().map(|d| d.p99)),
                lag_max: ms(s.lag_ms.as_ref().map(|d| d.max)),
                lengths: format!("{} of {}", s.lengths_exact, s.sent),
                after_restart: s.after_restart,
                marks: s.marks(),
            }
        })
        .collect();
    let level = crate::domain::load::Load::Replay { speed }.label();
    Ok(Some(ReplayView {
        workload,
        workload_version,
        speed: format!("{}×", crate::domain::format::shortest(speed)),
        level,
        rule: fidelity_rule(),
        candidates,
    }))
}

/// Marks the replay level's rows of the per-level table for each candidate whose replay fell
/// behind (its load cell says so) and states why in the table's notes.
pub fn mark_levels(levels: &mut super::report::LevelsView, replay: &ReplayView) {
    for c in &replay.candidates {
        let Some(why) = c.marks.iter().find(|m| m.starts_with("replay fell behind")) else {
            continue;
        };
        let mut marked = false;
        for row in levels
            .rows
            .iter_mut()
            .filter(|r| r.candidate == c.name && r.load == replay.level)
        {
            row.load = format!("{} — replay fell behind", row.load);
            marked = true;
        }
        if marked {
            levels.notes.push(format!("{}, {}: {why}", c.name, replay.level));
        }
    }
}
