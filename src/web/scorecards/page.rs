//! `GET /runs/{id}/scorecard` (with its forms: profile, incumbent, pipeline) and the
//! print-friendly `GET /runs/{id}/scorecard/print`.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;

use super::parse_query;
use super::view::{self, CardView};
use crate::app::scorecard::{RunScorecard, ScorecardChoice, assemble};
use crate::domain::pipeline::MAX_STAGES;
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::thresholds::remembered_name;

/// A choice in a select.
#[derive(Debug, Clone)]
pub struct OptionView {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// One row of the pipeline form.
#[derive(Debug, Clone)]
pub struct StageInput {
    pub index: usize,
    pub name: String,
    pub seconds: String,
    pub error: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "scorecards/page.html")]
pub struct ScorecardPage {
    pub nav: &'static str,
    pub card: CardView,
    pub print: bool,
    pub profiles: Vec<OptionView>,
    pub incumbents: Vec<OptionView>,
    pub stages: Vec<StageInput>,
    pub model_share: String,
    pub model_share_error: Option<String>,
    pub your_name: String,
    /// Set on an archived scorecard: who saved it, when, why, and what changed since.
    pub archived: Option<ArchivedView>,
    /// Why "save this scorecard" refused (nothing was saved).
    pub save_error: Option<String>,
    /// The LLM judges of the run's eval set that are flagged (issue 50): (judge, its
    /// calibration page, why).
    pub judge_flags: Vec<crate::web::review::JudgeFlag>,
    /// The servers' telemetry in brief (None: nothing was scraped).
    pub telemetry: Option<crate::app::telemetry::TelemetryBrief>,
    /// Tool figures per candidate and load level (templates/runs/tool_levels.html); None
    /// without graded tool cases.
    pub tool_levels: Option<crate::app::pages::tool_levels::ToolLevelsView>,
    /// Structured output per candidate and level (templates/runs/structured.html).
    pub structured: Option<crate::app::pages::tool_levels::StructuredView>,
    /// The per-level figures whose prompt-cache table is shown (templates/runs/prompt_cache.html);
    /// None when no server reported cache fields.
    pub prompt_cache: Option<crate::app::pages::report::LevelsView>,
    /// Why the judging profile may not fit the run's eval set (written for another task).
    pub profile_fit: Option<String>,
    /// A find-capacity run's capacity @ SLO per candidate (templates/runs/capacity.html).
    pub capacity: Option<crate::app::pages::capacity::CapacityView>,
    /// A replay run's fidelity per candidate (templates/runs/replay.html).
    pub replay: Option<crate::app::pages::replay::ReplayView>,
}

/// The judging profile's fit to the run's eval set, in words when it may not fit.
async fn profile_fit(state: &AppState, j: &crate::app::scorecard::RunScorecard) -> Result<Option<String>, WebError> {
    let Some(v) = &j.version else { return Ok(None) };
    Ok(crate::app::profiles::fit_note(&state.store, &v.header.name, j.profile.id, &j.profile.name).await?)
}

/// What an archived scorecard page adds to the scorecard.
#[derive(Debug, Clone)]
pub struct ArchivedView {
    pub id: i64,
    pub created_by: String,
    pub at: String,
    pub note: String,
    /// (candidate, verdict, css class) as read when saved.
    pub saved_verdicts: Vec<(String, &'static str, &'static str)>,
    /// Recomputing from the same records gives a different verdict (e.g. the run was resumed).
    pub drifted: bool,
    pub rejudge: Option<RejudgeView>,
}

/// The differences when judged against the profile's current version.
#[derive(Debug, Clone)]
pub struct RejudgeView {
    pub current_version: u32,
    pub rule_changes: Vec<String>,
    /// (candidate, then, now, changed?)
    pub verdicts: Vec<(String, &'static str, &'static str, bool)>,
    pub state_changes: Vec<String>,
    pub link: String,
}

pub fn page_for(j: &RunScorecard, q: &ScorecardChoice, print: bool, your_name: String) -> ScorecardPage {
    let profiles = j
        .profiles
        .iter()
        .map(|p| OptionView {
            value: p.id.to_string(),
            label: format!("{} (v{})", p.name, p.version),
            selected: p.id == j.profile.id,
        })
        .collect();
    let mut incumbents = vec![OptionView {
        value: String::new(),
        label: "— none —".into(),
        selected: j.incumbent.is_none(),
    }];
    incumbents.extend(j.candidates.iter().map(|c| OptionView {
        value: c.id.to_string(),
        label: c.spec.name.clone(),
        selected: j.incumbent == Some(c.id),
    }));
    // Room for every typed stage plus an empty one, at least two rows, at most MAX_STAGES.
    let typed = q.pipeline.stage_names.len().max(q.pipeline.stage_seconds.len());
    let rows = (typed.max(j.pipeline.stages.len()) + 1).clamp(2, MAX_STAGES);
    let stages = (0..rows)
        .map(|i| StageInput {
            index: i,
            name: q.pipeline.stage_names.get(i).cloned().unwrap_or_default(),
            seconds: q.pipeline.stage_seconds.get(i).cloned().unwrap_or_default(),
            error: j
                .pipeline_errors
                .get(&format!("stage{i}_seconds"))
                .or_else(|| j.pipeline_errors.get(&format!("stage{i}_name")))
                .map(str::to_string),
        })
        .collect();
    ScorecardPage {
        nav: "scorecards",
        card: view::build(j),
        print,
        profiles,
        incumbents,
        stages,
        model_share: q.pipeline.model_share_percent.clone(),
        model_share_error: j.pipeline_errors.get("model_share").map(str::to_string),
        your_name,
        archived: None,
        save_error: None,
        judge_flags: j.judge_flags.iter().map(crate::web::review::JudgeFlag::of).collect(),
        telemetry: None,
        tool_levels: None,
        structured: None,
        prompt_cache: None,
        profile_fit: None,
        capacity: None,
        replay: None,
    }
}

/// The run page's tool, structured-output and prompt-cache blocks (its stored parts), with the
/// run of the other tool mode linked.
async fn tool_block(state: &AppState, j: &RunScorecard, page: &mut ScorecardPage) -> Result<(), WebError> {
    let parts = crate::app::pages::run_page::cached_record_parts(
        &state.store,
        &state.views.run_page,
        &j.run,
        &crate::app::runs::RunVersion::of(&j.run),
        &j.candidates,
        &crate::app::runs::RunRecords::of(j.run.id),
    )
    .await?;
    let mut block = parts.tool_levels;
    if let Some(tl) = &mut block {
        tl.other_mode = crate::app::pages::tool_levels::other_mode_run(&state.store, &j.run).await?;
    }
    page.tool_levels = block;
    page.structured = parts.structured;
    page.capacity = crate::app::pages::capacity::capacity_view(
        &state.store.list_run_capacity(j.run.id).await?,
        !j.run.status.is_terminal(),
        &j.candidates,
        |id| {
            let i = j.candidates.iter().position(|c| c.id == id)?;
            let answered = j.summaries.get(i)?.answered;
            (answered.answers > 0).then(|| answered.correct as f64 / answered.answers as f64)
        },
    );
    page.prompt_cache = parts.levels.filter(|l| l.cache_reported);
    page.replay = crate::app::pages::replay::replay_view(&state.store, &j.run, &j.candidates).await?;
    Ok(())
}

pub async fn page(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<ScorecardPage, WebError> {
    let id = parse_id(&raw, "run")?;
    let q = parse_query(query.as_deref())?;
    let j = assemble(&state.store, &state.views.summaries, id, &q).await?;
    let mut page = page_for(&j, &q, false, remembered_name(&headers));
    page.telemetry = crate::app::telemetry::brief(&state.store, id).await?;
    tool_block(&state, &j, &mut page).await?;
    page.profile_fit = profile_fit(&state, &j).await?;
    Ok(page)
}

pub async fn print(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<ScorecardPage, WebError> {
    let id = parse_id(&raw, "run")?;
    let q = parse_query(query.as_deref())?;
    let j = assemble(&state.store, &state.views.summaries, id, &q).await?;
    let mut page = page_for(&j, &q, true, String::new());
    page.telemetry = crate::app::telemetry::brief(&state.store, id).await?;
    tool_block(&state, &j, &mut page).await?;
    page.profile_fit = profile_fit(&state, &j).await?;
    Ok(page)
}
