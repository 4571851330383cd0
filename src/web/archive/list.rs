//! `GET /archive` (finished runs, filtered and paginated), `GET /runs/{id}/export.json` and
//! `POST /archive/import`.
use askama::Template;
use askama_web::WebTemplate;
use axum::body::Body;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use futures_util::StreamExt;

use crate::app::AppError;
use crate::app::transfer::{export_stream, import_from};
use crate::domain::Timestamp;
use crate::domain::run::RunStatus;
use crate::domain::thresholds::ThresholdProfile;
use crate::store::RunFilter;
use crate::web::AppState;
use crate::web::error::{WebError, parse_day, parse_id, parse_page, sentence};
use crate::web::views::{FormBody, Pagination};

pub const RUNS_PER_PAGE: u32 = 25;

#[derive(Template, WebTemplate)]
#[template(path = "archive/list.html")]
pub struct ArchivePage {
    pub nav: &'static str,
    pub filters: ArchiveFilters,
    /// (id, name) options.
    pub evalsets: Vec<(String, String)>,
    pub candidates: Vec<(String, String)>,
    pub statuses: Vec<&'static str>,
    /// (id, "name (vN)") options.
    pub profiles: Vec<(String, String)>,
    pub verdicts: Vec<&'static str>,
    /// The profile whose verdicts the table shows: the filtered one, else the default one.
    pub shown_profile: Option<ShownProfile>,
    /// Finished runs the shown profile has not judged yet (the worker catches up in the
    /// background), so a verdict filter's count is read knowing what is left out.
    pub pending_judgement: i64,
    pub rows: Vec<ArchiveRow>,
    pub total: i64,
    pub pager: Pagination,
    /// A message about the last import (error), shown above the form.
    pub import_error: Option<String>,
}

/// The filters as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArchiveFilters {
    pub evalset: String,
    pub candidate: String,
    pub status: String,
    pub from: String,
    pub to: String,
    pub profile: String,
    pub verdict: String,
}

/// The threshold profile whose verdicts the archive shows.
#[derive(Debug, Clone)]
pub struct ShownProfile {
    pub id: i64,
    pub name: String,
    /// Its version now (a row judged by an older one says so).
    pub current_version: u32,
}

/// One candidate's verdict in an archive row.
#[derive(Debug, Clone)]
pub struct VerdictCell {
    pub candidate: String,
    /// The candidate's colour (`domain::palette`, among the run's candidates).
    pub colour: &'static str,
    pub verdict: &'static str,
    /// The verdict itself (what is ranked; `verdict` is its words).
    pub outcome: crate::domain::scorecard::Verdict,
    pub class: &'static str,
    pub version: u32,
    /// Where the verdict can be read in full: the saved scorecard, or the run judged by that
    /// profile version.
    pub href: String,
    /// "saved scorecard #4" or "judged when the run finished".
    pub source: String,
}

impl ArchiveFilters {
    /// The filters as named in a query, each read by `text` (the page's form or the API's
    /// parameters).
    pub(crate) fn read(text: impl Fn(&str) -> String) -> ArchiveFilters {
        ArchiveFilters {
            evalset: text("evalset"),
            candidate: text("candidate"),
            status: text("status"),
            from: text("from"),
            to: text("to"),
            profile: text("profile"),
            verdict: text("verdict"),
        }
    }

    fn query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("evalset", &self.evalset),
            ("candidate", &self.candidate),
            ("status", &self.status),
            ("from", &self.from),
            ("to", &self.to),
            ("profile", &self.profile),
            ("verdict", &self.verdict),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.finish()
    }

    pub fn any(&self) -> bool {
        *self != ArchiveFilters::default()
    }

    /// The store filter, or a message naming the bad field.
    pub(crate) fn to_filter(&self) -> Result<RunFilter, WebError> {
        let id = |raw: &str, what: &str| -> Result<Option<i64>, WebError> {
            match raw.trim() {
                "" => Ok(None),
                t => t
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| WebError::BadRequest(format!("The {what} filter {:?} is not an id.", truncate(t)))),
            }
        };
        let status = match self.status.trim() {
            "" => None,
            s => match RunStatus::parse(s) {
                Some(st) if st.is_terminal() => Some(st),
                _ => {
                    return Err(WebError::BadRequest(format!(
                        "The status filter {:?} is not one of finished, failed, cancelled.",
                        truncate(s)
                    )));
                }
            },
        };
        let verdict = match self.verdict.trim() {
            "" => None,
            v => Some(crate::store::parse_verdict(&v.to_ascii_uppercase()).ok_or_else(|| {
                WebError::BadRequest(format!(
                    "The verdict filter {:?} is not one of GO, NO-GO, INCONCLUSIVE.",
                    truncate(v)
                ))
            })?),
        };
        Ok(RunFilter {
            profile_id: id(&self.profile, "threshold profile")?,
            verdict,
            evalset_id: id(&self.evalset, "eval set")?,
            candidate_id: id(&self.candidate, "candidate")?,
            status,
            created_from: parse_day(&self.from, "from")?.map(Timestamp),
            // "to" is inclusive: runs created before the next midnight.
            created_before: parse_day(&self.to, "to")?.map(|ms| Timestamp(ms + 86_400_000)),
            terminal_only: true,
            not_judged_by: None,
            measured_here: false,
        })
    }
}

/// The store filter and the profile whose verdicts are shown, for the filters as typed. A
/// verdict belongs to a profile: without one chosen, the default profile judges (and `filters`
/// then names it).
pub(crate) async fn resolve(
    state: &AppState,
    filters: &mut ArchiveFilters,
    profiles: &[ThresholdProfile],
) -> Result<(RunFilter, Option<ShownProfile>), WebError> {
    let default_id = crate::app::retirement::default_profile_id(&state.store, profiles).await?;
    let default_profile = profiles.iter().find(|p| Some(p.id) == default_id);
    if filters.profile.is_empty()
        && !filters.verdict.is_empty()
        && let Some(p) = default_profile
    {
        filters.profile = p.id.to_string();
    }
    let filter = filters.to_filter()?;
    let shown = match filter.profile_id {
        Some(id) => Some(
            profiles
                .iter()
                .find(|p| p.id == id)
                .ok_or_else(|| WebError::NotFound(format!("threshold profile #{id}")))?,
        ),
        None => default_profile,
    };
    let shown_profile = shown.map(|p| ShownProfile {
        id: p.id,
        name: p.name.clone(),
        current_version: p.version,
    });
    if filter.verdict.is_some() && shown_profile.is_none() {
        return Err(WebError::BadRequest(
            "There is no threshold profile yet, so no run has a verdict: create one under Thresholds first."
                .to_string(),
        ));
    }
    Ok((filter, shown_profile))
}

/// The profile the runs of eval set `evalset` are judged by on the history and compare pages:
/// the set's own profile when one was chosen for it, else the default (as the archive's).
pub(crate) async fn profile_for_evalset(
    state: &AppState,
    evalset: Option<&str>,
) -> Result<Option<ShownProfile>, WebError> {
    let profiles = state.store.list_threshold_profiles().await?;
    let id = crate::app::profiles::judging_profile(&state.store, evalset)
        .await?
        .map(|(id, _)| id);
    Ok(profiles.iter().find(|p| Some(p.id) == id).map(|p| ShownProfile {
        id: p.id,
        name: p.name.clone(),
        current_version: p.version,
    }))
}

/// The verdicts of these runs by the shown profile (none without one).
pub(crate) async fn verdicts_of(
    state: &AppState,
    items: &[crate::store::RunListItem],
    shown: Option<&ShownProfile>,
) -> Result<Vec<crate::store::RunVerdict>, WebError> {
    let ids: Vec<i64> = items.iter().map(|i| i.run.id).collect();
    Ok(match shown {
        Some(p) => state.store.list_run_verdicts(&ids, p.id).await?,
        None => Vec::new(),
    })
}

fn truncate(s: &str) -> String {
    crate::domain::validation::truncate(s, 40)
}

#[derive(Debug, Clone)]
pub struct ArchiveRow {
    pub id: i64,
    pub name: String,
    pub evalset: String,
    pub evalset_id: Option<i64>,
    /// (candidate id, name).
    pub candidates: Vec<(i64, String)>,
    pub status: &'static str,
    pub created: String,
    pub finished: String,
    pub records: i64,
    /// Verdicts by the shown profile, in the run's candidate order; empty when not judged.
    pub verdicts: Vec<VerdictCell>,
}

pub async fn page(State(state): State<AppState>, RawQuery(query): RawQuery) -> Result<ArchivePage, WebError> {
    let q = FormBody::parse(query.unwrap_or_default().as_bytes());
    render(&state, &q, None).await
}

async fn render(state: &AppState, q: &FormBody, import_error: Option<String>) -> Result<ArchivePage, WebError> {
    let mut filters = ArchiveFilters::read(|name| q.get(name).unwrap_or_default().trim().to_string());
    let page = parse_page(q.get("page"))?;
    let profiles = state.store.list_threshold_profiles().await?;
    let (filter, shown_profile) = resolve(state, &mut filters, &profiles).await?;
    let total = state.store.count_runs_filtered(&filter).await?;
    let base = match filters.query() {
        s if s.is_empty() => "/archive".to_string(),
        s => format!("/archive?{s}"),
    };
    let pager = Pagination::new(base, page, RUNS_PER_PAGE, total);
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!(
            "page {page} of the archive (there are {} pages)",
            pager.pages
        )));
    }
    let evalsets = state.store.list_evalsets().await?;
    let items = state
        .store
        .list_runs_filtered(&filter, RUNS_PER_PAGE as i64, pager.offset())
        .await?;
    // Only when filtering by profile or verdict: that is when runs left out matter.
    let pending_judgement = match &shown_profile {
        Some(p) if filter.profile_id.is_some() || filter.verdict.is_some() => {
            let pending = RunFilter {
                not_judged_by: Some(p.id),
                ..Default::default()
            };
            state.store.count_runs_filtered(&pending).await?
        }
        _ => 0,
    };
    let verdicts = verdicts_of(state, &items, shown_profile.as_ref()).await?;
    let rows = items
        .into_iter()
        .map(|item| ArchiveRow {
            verdicts: shown_profile
                .as_ref()
                .map(|p| {
                    verdict_cells(
                        p,
                        &item.run.candidate_ids,
                        &item.candidate_names,
                        item.run.id,
                        &verdicts,
                    )
                })
                .unwrap_or_default(),
            id: item.run.id,
            evalset_id: evalsets.iter().find(|e| e.name == item.evalset_name).map(|e| e.id),
            evalset: item.evalset_name,
            candidates: item
                .run
                .candidate_ids
                .iter()
                .copied()
                .zip(item.candidate_names)
                .collect(),
            status: item.run.status.as_str(),
            created: item.run.created_at.display(),
            finished: crate::web::views::or_dash(item.run.finished_at),
            records: item.record_count,
            name: item.run.name,
        })
        .collect();
    Ok(ArchivePage {
        nav: "archive",
        evalsets: evalsets.iter().map(|e| (e.id.to_string(), e.name.clone())).collect(),
        candidates: state
            .store
            .list_candidates()
            .await?
            .into_iter()
            .map(|c| (c.id.to_string(), c.spec.name))
            .collect(),
        statuses: vec!["finished", "failed", "cancelled"],
        profiles: profiles
            .iter()
            .map(|p| (p.id.to_string(), format!("{} (v{})", p.name, p.version)))
            .collect(),
        verdicts: vec!["GO", "NO-GO", "INCONCLUSIVE"],
        shown_profile,
        pending_judgement,
        filters,
        rows,
        total,
        pager,
        import_error,
    })
}

/// The run's verdicts by the shown profile, in the run's candidate order.
pub(crate) fn verdict_cells(
    profile: &ShownProfile,
    candidate_ids: &[i64],
    names: &[String],
    run_id: i64,
    all: &[crate::store::RunVerdict],
) -> Vec<VerdictCell> {
    let colours = crate::domain::palette::CandidateColours::of(candidate_ids.iter().copied());
    candidate_ids
        .iter()
        .zip(names)
        .filter_map(|(id, name)| {
            let v = all.iter().find(|v| v.run_id == run_id && v.candidate_id == *id)?;
            let (href, source) = match v.scorecard_id {
                Some(s) => (format!("/scorecards/{s}"), format!("saved scorecard #{s}")),
                None => (
                    format!(
                        "/runs/{run_id}/scorecard?profile={}&version={}",
                        profile.id, v.profile_version
                    ),
                    "judged when the run finished".to_string(),
                ),
            };
            Some(VerdictCell {
                candidate: name.clone(),
                colour: colours.hex(*id),
                verdict: v.verdict.as_str(),
                outcome: v.verdict,
                class: v.verdict.class(),
                version: v.profile_version,
                href,
                source,
            })
        })
        .collect()
}

/// `GET /runs/{id}/export.json`: the whole run as a download.
pub async fn export(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Response, WebError> {
    let id = parse_id(&raw, "run")?;
    // Streamed: the records are read and written a page at a time.
    let body = Body::from_stream(export_stream(state.store.clone(), id).await?.inspect(move |piece| {
        if let Err(e) = piece {
            tracing::error!(run_id = id, error = %e, "the export stopped half-way");
        }
    }));
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"bakeoff-run-{id}.json\""),
            ),
        ],
        body,
    )
        .into_response())
}

/// `POST /archive/import` (multipart, field `file`): stores the run and shows it; a bad file
/// re-shows the archive with the reason and stores nothing.
pub async fn import(
    State(state): State<AppState>,
    user: crate::web::security::CurrentUser,
    multipart: Result<Multipart, MultipartRejection>,
) -> Response {
    match read_and_import(&state, &user.actor(), multipart).await {
        Ok(crate::app::transfer::Imported::Before(id)) => {
            let message = format!(
                "This export was imported before, as run #{id} (recognised by its content hash): nothing was stored."
            );
            match render(&state, &FormBody::default(), Some(message)).await {
                Ok(page) => (StatusCode::OK, page).into_response(),
                Err(e) => e.into_response(),
            }
        }
        Ok(crate::app::transfer::Imported::New(id)) => {
            tracing::info!(run_id = id, "run imported");
            match crate::web::audit::record(
                &state,
                crate::domain::audit::Action::RunImported,
                format!("run #{id}"),
                String::new(),
            )
            .await
            {
                Ok(()) => Redirect::to(&format!("/runs/{id}")).into_response(),
                Err(e) => e.into_response(),
            }
        }
        Err((status, message)) => match render(&state, &FormBody::default(), Some(message)).await {
            Ok(page) => (status, page).into_response(),
            Err(e) => e.into_response(),
        },
    }
}

async fn read_and_import(
    state: &AppState,
    actor: &crate::app::candidates::Actor,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<crate::app::transfer::Imported, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::UNPROCESSABLE_ENTITY, m);
    let unreadable = |status: StatusCode, text: String| {
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "The file is larger than {}; nothing was stored. Import it with `bakeoff run import`.",
                    crate::domain::format::bytes(super::MAX_IMPORT_BYTES as u64)
                ),
            )
        } else {
            (StatusCode::BAD_REQUEST, format!("The form could not be read ({text})."))
        }
    };
    let mut multipart = multipart.map_err(|e| unreadable(e.status(), e.body_text()))?;
    let mut file: Option<Vec<u8>> = None;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| unreadable(e.status(), e.body_text()))?
    {
        if field.name() == Some("file") {
            let bytes = field.bytes().await.map_err(|e| unreadable(e.status(), e.body_text()))?;
            if !bytes.is_empty() {
                file = Some(bytes.to_vec());
            }
        }
    }
    let bytes = file.ok_or_else(|| bad("Choose an exported run file (.json) to import.".to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("The file is not UTF-8 JSON.".to_string()))?;
    let report = import_from(state.store.as_ref(), actor, std::io::Cursor::new(text.into_bytes()))
        .await
        .map_err(|e| match e {
            AppError::Store(e) => {
                tracing::error!(error = %e, "importing a run failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The run could not be stored; the cause has been logged on the server. Nothing was kept."
                        .to_string(),
                )
            }
            other => bad(sentence(&other.to_string())),
        })?;
    Ok(report.imported)
}
