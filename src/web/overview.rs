//! `/`: a dashboard of recent decisions — the latest verdict per candidate (and whether it
//! changed), runs in progress, recent runs — with a one-click demo run in demo mode.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::AppState;
use super::archive::list::VerdictCell;
use super::error::WebError;
use super::runs::RunRow;

pub fn router() -> Router<AppState> {
    Router::new().route("/", get(page)).route("/demo/run", post(demo_run))
}

#[derive(Template, WebTemplate)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub nav: &'static str,
    pub candidates: usize,
    pub evalsets: usize,
    pub runs: i64,
    pub profiles: usize,
    pub recent: Vec<RunRow>,
    pub demo_mock_url: Option<String>,
    /// The latest verdict of each candidate on each eval set, newest first.
    pub decisions: Vec<Decision>,
    /// Runs queued, running or paused.
    pub in_progress: Vec<RunRow>,
    /// Demo mode: what the one-click demo run measures (eval set, candidates), if it can start.
    pub demo_run: Option<String>,
}

/// A candidate's latest verdict on an eval set, and the one before it when it differs.
#[derive(Debug, Clone)]
pub struct Decision {
    pub candidate: String,
    pub evalset: String,
    pub run_id: i64,
    pub when: String,
    pub verdict: VerdictCell,
    /// The previous judged run's verdict on the same eval set, when it was different.
    pub changed_from: Option<(&'static str, i64)>,
}

const RECENT_RUNS: i64 = 5;
/// Runs read for the decisions table.
const DECISION_RUNS: i64 = 60;

async fn page(State(state): State<AppState>) -> Result<OverviewPage, WebError> {
    let store = &state.store;
    let candidates = store.list_candidates().await?.len();
    let evalsets = store.list_evalsets().await?.len();
    let runs = store.count_runs().await?;
    let profiles = store.list_threshold_profiles().await?.len();
    let items = store.list_runs(DECISION_RUNS, 0).await?;
    let own = verdicts_by_own_profile(&state, &items).await?;
    let window = super::runs::run_rows(&state, items).await?;
    let recent: Vec<RunRow> = window.iter().take(RECENT_RUNS as usize).cloned().collect();
    let in_progress = window
        .iter()
        .filter(|r| matches!(r.status, "queued" | "running" | "paused"))
        .cloned()
        .collect();
    // A decision is judged as its run page judges it: by the profile chosen for its eval set,
    // else the default (the runs tables show the default's, as the archive does).
    let judged: Vec<RunRow> = window
        .iter()
        .cloned()
        .map(|mut row| {
            row.verdicts = own.get(&row.id).cloned().unwrap_or_default();
            row
        })
        .collect();
    let decisions = decisions(&judged);
    let demo_run = match state.demo_mock_url.as_deref() {
        Some(url) => demo_request(&state, url)
            .await?
            .map(|(_, names)| format!("{} × {}", crate::app::demo::DEMO_EVALSET, names.join(", "))),
        None => None,
    };
    Ok(OverviewPage {
        decisions,
        in_progress,
        demo_run,
        nav: "overview",
        candidates,
        evalsets,
        runs,
        profiles,
        recent,
        demo_mock_url: state.demo_mock_url.as_deref().map(str::to_string),
    })
}

/// Each run's verdicts by the profile its eval set is judged by (the set's own, else the
/// default: `app::profiles::judging_profile`), as stored by the background judge.
async fn verdicts_by_own_profile(
    state: &AppState,
    items: &[crate::store::RunListItem],
) -> Result<std::collections::HashMap<i64, Vec<VerdictCell>>, WebError> {
    use super::archive::list::{ShownProfile, profile_for_evalset, verdict_cells};
    let mut by_set: std::collections::BTreeMap<&str, Option<ShownProfile>> = Default::default();
    for item in items {
        if !by_set.contains_key(item.evalset_name.as_str()) {
            let profile = profile_for_evalset(state, Some(&item.evalset_name)).await?;
            by_set.insert(&item.evalset_name, profile);
        }
    }
    let mut by_profile: std::collections::BTreeMap<i64, (ShownProfile, Vec<&crate::store::RunListItem>)> =
        Default::default();
    for item in items {
        if let Some(Some(p)) = by_set.get(item.evalset_name.as_str()) {
            by_profile
                .entry(p.id)
                .or_insert_with(|| (p.clone(), Vec::new()))
                .1
                .push(item);
        }
    }
    let mut out = std::collections::HashMap::new();
    for (profile, runs) in by_profile.into_values() {
        let ids: Vec<i64> = runs.iter().map(|i| i.run.id).collect();
        let all = state.store.list_run_verdicts(&ids, profile.id).await?;
        for item in runs {
            out.insert(
                item.run.id,
                verdict_cells(
                    &profile,
                    &item.run.candidate_ids,
                    &item.candidate_names,
                    item.run.id,
                    &all,
                ),
            );
        }
    }
    Ok(out)
}

/// The latest verdict of each candidate on each eval set (runs newest first), with the previous
/// verdict when it changed.
fn decisions(rows: &[RunRow]) -> Vec<Decision> {
    let mut out: Vec<Decision> = Vec::new();
    let mut settled: Vec<(String, String)> = Vec::new();
    for row in rows {
        for v in &row.verdicts {
            let key = (v.candidate.clone(), row.evalset.clone());
            if settled.contains(&key) {
                continue;
            }
            match out.iter_mut().find(|d| d.candidate == key.0 && d.evalset == key.1) {
                // The run before the latest: settles whether the verdict changed.
                Some(d) => {
                    if d.verdict.verdict != v.verdict {
                        d.changed_from = Some((v.verdict, row.id));
                    }
                    settled.push(key);
                }
                None => out.push(Decision {
                    candidate: v.candidate.clone(),
                    evalset: row.evalset.clone(),
                    run_id: row.id,
                    when: row.created.clone(),
                    verdict: v.clone(),
                    changed_from: None,
                }),
            }
        }
    }
    out
}

/// The demo run: the demo eval set's latest version and the demo candidates served by the
/// mock at `mock_url` (ids and names), or None when they are gone.
async fn demo_request(
    state: &AppState,
    mock_url: &str,
) -> Result<Option<(crate::app::runs::RunRequest, Vec<String>)>, WebError> {
    let Some(set) = state
        .store
        .list_evalsets()
        .await?
        .into_iter()
        .find(|e| e.name == crate::app::demo::DEMO_EVALSET)
    else {
        return Ok(None);
    };
    let wanted: Vec<String> = crate::app::demo::demo_candidates(mock_url)
        .into_iter()
        .map(|c| c.name)
        .collect();
    let retired = crate::app::retirement::retired(&state.store, crate::domain::retirement::ItemKind::Candidate).await?;
    let chosen: Vec<(i64, String)> = state
        .store
        .list_candidates()
        .await?
        .into_iter()
        .filter(|c| wanted.contains(&c.spec.name) && !retired.contains(&c.id))
        .map(|c| (c.id, c.spec.name))
        .collect();
    if chosen.is_empty() {
        return Ok(None);
    }
    let config = crate::domain::run::RunConfig::default();
    let request = crate::app::runs::RunRequest {
        name: "demo run".to_string(),
        evalset_version: set.latest_version_id.to_string(),
        candidates: chosen.iter().map(|(id, _)| id.to_string()).collect(),
        draft: crate::domain::run::RunDraft::from_config(&config),
        load: crate::domain::presets::LoadDraft::from_config(&config),
        ..Default::default()
    };
    Ok(Some((request, chosen.into_iter().map(|(_, n)| n).collect())))
}

/// `POST /demo/run` (demo mode): starts the demo eval set over the demo candidates with the
/// default conditions and opens the run's page, where the verdicts appear when it ends.
async fn demo_run(State(state): State<AppState>) -> Result<Response, WebError> {
    let Some(url) = state.demo_mock_url.as_deref() else {
        return Err(WebError::NotFound(
            "the demo run (this server is not in demo mode)".to_string(),
        ));
    };
    let Some((request, _)) = demo_request(&state, url).await? else {
        return Err(WebError::NotFound(format!(
            "the demo eval set {} or the demo candidates (removed or retired)",
            crate::app::demo::DEMO_EVALSET
        )));
    };
    let id = crate::app::runs::create_run(&state.store, &state.runner, &request).await?;
    crate::web::audit::record(
        &state,
        crate::domain::audit::Action::RunStarted,
        format!("run #{id} (the demo run)"),
        String::new(),
    )
    .await?;
    Ok(Redirect::to(&format!("/runs/{id}")).into_response())
}
