//! The archive: saving a scorecard (`POST /runs/{id}/scorecard/save`), the list of saved ones
//! (`/scorecards`), and a saved scorecard (`/scorecards/{id}`) judged by the profile version it
//! was saved with, beside a re-judgement against the profile's current version.
use std::collections::HashMap;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::page::{ArchivedView, RejudgeView, ScorecardPage, page_for};
use super::query_string;
use crate::app::scorecard::{RunScorecard, ScorecardChoice, assemble};
use crate::domain::pipeline::PipelineDraft;
use crate::domain::scorecard::{NewScorecard, ScorecardRecord};
use crate::domain::thresholds::history::diff_rules;
use crate::domain::thresholds::key::MetricKey;
use crate::domain::validation::{MAX_FIELD_CHARS, MAX_NAME_CHARS, name_problem, truncate};
use crate::web::AppState;
use crate::web::error::{WebError, parse_id, parse_page};
use crate::web::thresholds::{name_cookie, remembered_name};
use crate::web::views::{FormBody, Pagination};

/// Saved scorecards per list page.
const PER_PAGE: u32 = 20;

/// The choice a saved scorecard was judged with: its profile version, incumbent and pipeline.
pub(crate) fn record_choice(r: &ScorecardRecord) -> ScorecardChoice {
    ScorecardChoice {
        profile: Some(r.profile_id),
        version: Some(r.profile_version),
        incumbent: r.incumbent,
        pipeline: PipelineDraft::from_spec(&r.pipeline),
    }
}

pub async fn save(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    body: FormBody,
) -> Result<Response, WebError> {
    let run_id = parse_id(&raw, "run")?;
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&body.pairs)
        .finish();
    let q = super::parse_query(Some(&query))?;
    let j = assemble(&state.store, &state.views.summaries, run_id, &q).await?;
    let created_by = body.get("created_by").unwrap_or("").trim().to_string();
    let note = body.get("note").unwrap_or("").trim().to_string();
    if let Some((field, what)) = save_problem(&j, &created_by, &note) {
        let mut page = page_for(&j, &q, false, created_by);
        page.save_error = Some(match field {
            "created_by" => format!("Your name {what}."),
            "note" => format!("The note {what}."),
            _ => "Fix the pipeline stages first: nothing was saved.".to_string(),
        });
        return Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response());
    }
    let id = store_saved(&state, &j, &created_by, note).await?;
    let mut response = Redirect::to(&format!("/scorecards/{id}")).into_response();
    if let Some(cookie) = name_cookie(&created_by) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// What keeps the judged scorecard `j` from being saved signed `created_by` with `note`, as
/// (field, what is wrong with it); None when it can be saved. The page's and the API's one check.
pub(crate) fn save_problem(j: &RunScorecard, created_by: &str, note: &str) -> Option<(&'static str, String)> {
    if created_by.is_empty() {
        Some(("created_by", "is required to save a scorecard".to_string()))
    } else if created_by.chars().count() > MAX_NAME_CHARS {
        Some((
            "created_by",
            format!("is too long (at most {MAX_NAME_CHARS} characters)"),
        ))
    } else if let Some(problem) = name_problem(created_by) {
        Some(("created_by", problem.to_string()))
    } else if note.chars().count() > MAX_FIELD_CHARS {
        Some(("note", format!("is too long (at most {MAX_FIELD_CHARS} characters)")))
    } else if !j.pipeline_errors.is_empty() {
        Some(("pipeline", "has errors; nothing was saved".to_string()))
    } else {
        None
    }
}

/// Saves the judged scorecard `j` (checked by [`save_problem`]) with its verdicts as they read
/// now, audited; its id.
pub(crate) async fn store_saved(
    state: &AppState,
    j: &RunScorecard,
    created_by: &str,
    note: String,
) -> Result<i64, WebError> {
    let run_id = j.run.id;
    let id = state
        .store
        .save_scorecard(&NewScorecard {
            run_id,
            profile_id: j.profile.id,
            profile_version: j.profile.version,
            incumbent: j.incumbent,
            pipeline: j.pipeline.clone(),
            created_by: created_by.to_string(),
            note,
            verdicts: j.verdicts(),
        })
        .await?;
    tracing::info!(scorecard_id = id, run_id, "scorecard saved");
    crate::web::audit::record(
        state,
        crate::domain::audit::Action::ScorecardSaved,
        format!("scorecard #{id} of run #{run_id}"),
        format!("signed {created_by:?}"),
    )
    .await?;
    Ok(id)
}

/// Whether recomputing the saved scorecard from the same records (`then`) gives another
/// verdict than the one saved (e.g. the run was resumed since).
pub(crate) fn drifted(record: &ScorecardRecord, then: &RunScorecard) -> bool {
    record.verdicts.iter().any(|saved| {
        then.card
            .columns
            .iter()
            .find(|c| c.candidate_id == saved.candidate_id)
            .is_some_and(|c| c.verdict != saved.verdict)
    })
}

pub async fn detail(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Result<ScorecardPage, WebError> {
    let id = parse_id(&raw, "scorecard")?;
    let record = state
        .store
        .get_scorecard(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("scorecard #{id}")))?;
    let q = record_choice(&record);
    let then = assemble(&state.store, &state.views.summaries, record.run_id, &q).await?;
    let drifted = drifted(&record, &then);
    let rejudge = if then.current_version != record.profile_version {
        let now = assemble(
            &state.store,
            &state.views.summaries,
            record.run_id,
            &ScorecardChoice {
                version: None,
                ..q.clone()
            },
        )
        .await?;
        let rule_changes = diff_rules(&then.profile.rules, &now.profile.rules)
            .iter()
            .map(|c| c.describe())
            .collect();
        let verdicts = then
            .card
            .columns
            .iter()
            .zip(&now.card.columns)
            .map(|(a, b)| {
                (
                    a.name.clone(),
                    a.verdict.as_str(),
                    b.verdict.as_str(),
                    a.verdict != b.verdict,
                )
            })
            .collect();
        // Rule states that changed, for rules on the same metric in both versions.
        let old_states: HashMap<&str, Vec<&str>> = then
            .card
            .rows
            .iter()
            .map(|r| {
                (
                    r.rule.metric.as_str(),
                    r.cells.iter().map(|c| c.assessment.state.as_str()).collect(),
                )
            })
            .collect();
        let mut state_changes = Vec::new();
        for row in &now.card.rows {
            let Some(old) = old_states.get(row.rule.metric.as_str()) else {
                continue;
            };
            for (i, cell) in row.cells.iter().enumerate() {
                let new_state = cell.assessment.state.as_str();
                if old.get(i).is_some_and(|o| *o != new_state) {
                    let label = MetricKey::parse(&row.rule.metric)
                        .map(|k| k.label())
                        .unwrap_or_else(|_| row.rule.metric.clone());
                    state_changes.push(format!(
                        "{}: {label} {} → {new_state} ({})",
                        now.card.columns[i].name, old[i], cell.assessment.reason
                    ));
                }
            }
        }
        Some(RejudgeView {
            current_version: now.profile.version,
            rule_changes,
            verdicts,
            state_changes,
            link: format!("/runs/{}/scorecard?{}", record.run_id, query_string(&now)),
        })
    } else {
        None
    };
    let mut page = page_for(&then, &q, false, remembered_name(&headers));
    page.archived = Some(ArchivedView {
        id: record.id,
        created_by: record.created_by.clone(),
        at: record.created_at.display(),
        note: record.note.clone(),
        saved_verdicts: record
            .verdicts
            .iter()
            .map(|v| (v.candidate.clone(), v.verdict.as_str(), v.verdict.class()))
            .collect(),
        drifted,
        rejudge,
    });
    Ok(page)
}

/// One saved scorecard as listed.
#[derive(Debug, Clone)]
pub struct ListRow {
    pub id: i64,
    pub run_id: i64,
    pub run_name: String,
    pub profile: String,
    pub verdicts: Vec<(String, &'static str, &'static str)>,
    pub created_by: String,
    pub at: String,
    pub note: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "scorecards/list.html")]
pub struct ScorecardsPage {
    pub nav: &'static str,
    pub rows: Vec<ListRow>,
    pub pagination: Pagination,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    pub page: Option<String>,
}

pub async fn list(State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<ScorecardsPage, WebError> {
    let page = parse_page(q.page.as_deref())?;
    let total = state.store.count_scorecards().await?;
    let pagination = Pagination::new("/scorecards", page, PER_PAGE, total);
    if pagination.out_of_range() {
        return Err(WebError::NotFound(format!("page {page} of the scorecards")));
    }
    let items = state
        .store
        .list_scorecards(i64::from(PER_PAGE), pagination.offset())
        .await?;
    Ok(ScorecardsPage {
        nav: "scorecards",
        rows: items
            .into_iter()
            .map(|item| ListRow {
                id: item.record.id,
                run_id: item.record.run_id,
                run_name: item.run_name,
                profile: format!("{} v{}", item.profile_name, item.record.profile_version),
                verdicts: item
                    .record
                    .verdicts
                    .iter()
                    .map(|v| (v.candidate.clone(), v.verdict.as_str(), v.verdict.class()))
                    .collect(),
                created_by: item.record.created_by,
                at: item.record.created_at.display(),
                note: truncate(&item.record.note, 120),
            })
            .collect(),
        pagination,
    })
}
