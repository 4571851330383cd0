//! `POST /runs/{id}/again`: "Run again" and "Run again without X" from an ended run's page —
//! a new run with the same settings (`app::runs::run_again`), then its page; and
//! `POST /runs/{id}/resume`, which resumes a paused run.
use axum::extract::{Path, State};
use axum::response::Redirect;

use crate::app::runs::{resume_paused, run_again_in};
use crate::domain::candidate::Candidate;
use crate::domain::run::{CandidateStop, Run, RunStatus};
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::views::FormBody;

/// One "run again" button on a run page.
#[derive(Debug, Clone, PartialEq)]
pub struct AgainButton {
    pub label: String,
    /// The candidate left out (None: run again with every candidate).
    pub without: Option<i64>,
    /// Run again with the tool cases sent in this mode (`native` / `prompt`).
    pub tool_mode: Option<&'static str>,
}

/// A stopped candidate as the run page lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct StopView {
    pub candidate_id: i64,
    pub candidate: String,
    pub outcome: String,
    pub at: String,
}

pub async fn again(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    body: FormBody,
) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    let without = match body.get("without").map(str::trim).filter(|s| !s.is_empty()) {
        Some(raw) => Some(parse_id(raw, "candidate")?),
        None => None,
    };
    let tool_mode = match body.get("tool_mode").map(str::trim).filter(|s| !s.is_empty()) {
        Some(raw) => Some(
            crate::domain::tool_calls::RunToolMode::parse(raw)
                .ok_or_else(|| WebError::BadRequest(format!("{raw:?} is not a tool mode (native, prompt or both)")))?,
        ),
        None => None,
    };
    let new_id = run_again_in(&state.store, &state.runner, id, without, tool_mode).await?;
    crate::web::audit::record(
        &state,
        crate::domain::audit::Action::RunStarted,
        format!("run #{new_id}"),
        match without {
            Some(c) => format!("run #{id} again without candidate #{c}"),
            None => match tool_mode {
                Some(m) => format!("run #{id} again, tool cases in {} mode", m.as_str()),
                None => format!("run #{id} again"),
            },
        },
    )
    .await?;
    Ok(Redirect::to(&format!("/runs/{new_id}")))
}

/// `POST /runs/{id}/resume`: a paused run goes on where it stopped.
pub async fn resume(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    resume_paused(&state.store, &state.runner, id).await?;
    crate::web::audit::record(
        &state,
        crate::domain::audit::Action::RunStarted,
        format!("run #{id}"),
        "resumed after a pause".to_string(),
    )
    .await?;
    Ok(Redirect::to(&format!("/runs/{id}")))
}

/// The buttons an ended run offers: none while it goes; "Run again" once it has ended (a
/// clean run too: the same measurement after a server upgrade or on another day), plus "Run
/// again without X" for each stopped candidate — or, for a failed run that stopped none, each
/// candidate in `failing` (those with failed attempts) — as long as another candidate is left.
pub fn buttons(run: &Run, stops: &[CandidateStop], failing: &[i64], candidates: &[Candidate]) -> Vec<AgainButton> {
    if !run.status.is_terminal() {
        return Vec::new();
    }
    let mut out = vec![AgainButton {
        label: "Run again".to_string(),
        without: None,
        tool_mode: None,
    }];
    if run.candidate_ids.len() < 2 {
        return out;
    }
    let culprits: Vec<i64> = if !stops.is_empty() {
        stops.iter().map(|s| s.candidate_id).collect()
    } else if run.status == RunStatus::Failed {
        failing.to_vec()
    } else {
        Vec::new()
    };
    for id in run.candidate_ids.iter().copied().filter(|id| culprits.contains(id)) {
        out.push(AgainButton {
            label: format!(
                "Run again without {}",
                crate::app::pages::run_page::candidate_name(candidates, id)
            ),
            without: Some(id),
            tool_mode: None,
        });
    }
    out
}

/// "Run again in prompt mode" (or natively) for a run whose tool cases were graded: the same
/// cases and candidates through the other mode, to compare the two side by side.
pub fn other_mode_button(run: &Run) -> Option<AgainButton> {
    use crate::domain::tool_calls::RunToolMode;
    let (label, mode) = match run.config.tool_mode {
        RunToolMode::Native => ("Run again in prompt mode", "prompt"),
        RunToolMode::Prompt => ("Run again in native mode", "native"),
        // Both modes are in this run already.
        RunToolMode::Both => return None,
    };
    run.status.is_terminal().then(|| AgainButton {
        label: label.to_string(),
        without: None,
        tool_mode: Some(mode),
    })
}
