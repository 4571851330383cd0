//! A candidate's operability page: run the endpoint probes now and see each result with its
//! evidence; answer the operations checklist (versioned: who, when, why, what changed); the
//! operability score with its parts; and a short soak whose stability analysis (trend, drift,
//! bursts, "steadily degrading") is shown beside it.
use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::AppState;
use super::error::{WebError, parse_id};
use super::thresholds::{name_cookie, remembered_name};
use super::views::FormBody;
use crate::domain::candidate::Candidate;
use crate::domain::format;
use crate::domain::operability::{
    Answer, ChecklistAnswers, ChecklistDraft, ChecklistItem, ChecklistVersion, ProbeOutcome, ProbeRun, diff_checklist,
    operability_score,
};
use crate::domain::run::RunStatus;
use crate::domain::stability::soak::SoakAnalysis;
use crate::domain::stability::{StabilityOptions, stability_report};
use crate::domain::validation::{FieldErrors, optional_number};
use crate::engine::probes::{ProbeOptions, run_probes};
use crate::engine::run::soak::{self, SoakConfig};

/// Probe runs shown in the history.
const PROBE_HISTORY: i64 = 20;
/// Runs searched for this candidate's latest soak.
const SOAK_SEARCH: i64 = 100;
/// Soak runs are named with this prefix (how the page finds them again).
pub const SOAK_RUN_PREFIX: &str = "Soak · ";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/candidates/{id}/operability", get(page))
        .route("/candidates/{id}/operability/probes", post(probe_now))
        .route("/candidates/{id}/operability/probes/live", get(probes_live))
        .route("/candidates/{id}/operability/checklist", post(save_checklist))
        .route("/candidates/{id}/operability/soak", post(start_soak))
}

// ---------------------------------------------------------------- views

#[derive(Debug, Clone)]
pub struct PartView {
    pub label: &'static str,
    pub good: usize,
    pub applicable: usize,
    pub share: String,
    pub shortfalls: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ProbeRow {
    pub key: &'static str,
    pub label: &'static str,
    pub expectation: &'static str,
    pub outcome: &'static str,
    /// CSS class of the badge: pass, fail, na.
    pub badge: &'static str,
    pub summary: String,
    pub request: String,
    pub status: String,
    pub elapsed: String,
    pub excerpt: String,
    /// The evidence on one line, shortened to [`EVIDENCE_CHARS`] (the raw text on request).
    pub excerpt_short: String,
    pub notes: Vec<String>,
}

/// Characters of a probe's evidence shown before "show raw".
pub const EVIDENCE_CHARS: usize = 160;

/// Candidates whose probes run in the background now, per server (its public URL: several test
/// servers share a process), with when they started.
static PROBING: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<(String, i64), crate::domain::Timestamp>>,
> = std::sync::LazyLock::new(Default::default);

fn probing_key(state: &AppState, candidate: i64) -> (String, i64) {
    (state.security.public_url.origin().to_string(), candidate)
}

/// When this candidate's background probes started, while they run.
fn probing_since(state: &AppState, candidate: i64) -> Option<crate::domain::Timestamp> {
    PROBING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&probing_key(state, candidate))
        .copied()
}

#[derive(Debug, Clone)]
pub struct ProbeRunView {
    pub id: i64,
    pub at: String,
    pub passed: usize,
    pub failed: usize,
    pub not_applicable: usize,
    pub elapsed: String,
    pub base_url: String,
    pub rows: Vec<ProbeRow>,
    pub provenance: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct ChoiceView {
    pub value: &'static str,
    pub label: &'static str,
    pub selected: bool,
}

#[derive(Debug, Clone)]
pub struct ChecklistRow {
    pub key: &'static str,
    pub label: &'static str,
    pub question: &'static str,
    pub answer_field: String,
    pub notes_field: String,
    pub choices: Vec<ChoiceView>,
    pub notes: String,
    pub error: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ChecklistVersionView {
    pub version: u32,
    pub changed_by: String,
    pub at: String,
    pub rationale: String,
    pub changes: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct WindowView {
    pub index: usize,
    pub span: String,
    pub requests: usize,
    pub failed: usize,
    pub tok_s: String,
    pub p95: String,
    pub burst: bool,
}

#[derive(Debug, Clone)]
pub struct SoakView {
    pub run_id: i64,
    pub status: &'static str,
    pub finished: bool,
    pub at: String,
    pub config: String,
    /// None while running or when too short to analyse.
    pub analysis: Option<SoakAnalysisView>,
}

#[derive(Debug, Clone)]
pub struct SoakAnalysisView {
    pub degrading: bool,
    pub verdict: String,
    pub requests: usize,
    pub duration: String,
    pub error_rate: String,
    pub bursts: usize,
    pub tok_s_drift: String,
    pub tok_s_slope: String,
    pub p95_drift: String,
    pub p95_slope: String,
    pub failure_classes: Vec<String>,
    pub windows: Vec<WindowView>,
}

#[derive(Debug, Clone)]
pub struct EvalSetChoice {
    pub version_id: i64,
    pub label: String,
}

/// The soak form's fields as typed, and each one's error.
#[derive(Debug, Clone)]
pub struct SoakForm {
    pub evalset_version_id: String,
    pub seconds: String,
    pub concurrency: String,
    pub errors: FieldErrors,
}

impl Default for SoakForm {
    fn default() -> Self {
        SoakForm {
            evalset_version_id: String::new(),
            seconds: SOAK_DEFAULT_SECONDS.to_string(),
            concurrency: SOAK_DEFAULT_CONCURRENCY.to_string(),
            errors: FieldErrors::default(),
        }
    }
}

impl SoakForm {
    fn error(&self, field: &str) -> Option<&str> {
        self.errors.get(field)
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "operability/page.html")]
pub struct OperabilityPage {
    pub nav: &'static str,
    pub id: i64,
    pub name: String,
    pub model: String,
    pub base_url: String,
    pub score: String,
    pub complete: bool,
    pub parts: Vec<PartView>,
    pub latest: Option<ProbeRunView>,
    pub probe_history: Vec<ProbeRunView>,
    pub checklist: Vec<ChecklistRow>,
    pub changed_by: String,
    pub changed_by_error: Option<String>,
    pub rationale: String,
    pub checklist_version: Option<u32>,
    pub checklist_history: Vec<ChecklistVersionView>,
    pub saved: bool,
    pub probed: bool,
    /// Probes running in the background now: since when (the section polls until they end).
    pub probing: Option<String>,
    pub soak: Option<SoakView>,
    pub evalsets: Vec<EvalSetChoice>,
    /// The soak form as typed, with its field errors after a refused start.
    pub soak_form: SoakForm,
    /// The soak run just queued (from the form's redirect).
    pub soak_started: Option<i64>,
}

fn pct(v: Option<f64>) -> String {
    v.map_or("—".to_string(), |v| format::percent(v, 0))
}

fn signed_pct(v: Option<f64>) -> String {
    v.map_or("—".to_string(), |v| format::signed_percent(v, 1))
}

fn probe_view(run: &ProbeRun) -> ProbeRunView {
    let (passed, failed, not_applicable) = run.report.counts();
    ProbeRunView {
        id: run.id,
        at: run.at.display(),
        passed,
        failed,
        not_applicable,
        elapsed: format!("{:.1} s", run.report.elapsed_ms / 1000.0),
        base_url: run.report.base_url.clone(),
        rows: {
            // Failures first: what needs attention leads; then passes, then not applicable.
            let mut results: Vec<_> = run.report.results.iter().collect();
            results.sort_by_key(|r| match r.outcome {
                ProbeOutcome::Fail => 0,
                ProbeOutcome::Pass => 1,
                ProbeOutcome::NotApplicable => 2,
            });
            results
        }
        .into_iter()
        .map(|r| ProbeRow {
            key: r.kind.key(),
            label: r.kind.label(),
            expectation: r.kind.expectation(),
            outcome: match r.outcome {
                ProbeOutcome::Pass => "✓ pass",
                ProbeOutcome::Fail => "✗ fail",
                ProbeOutcome::NotApplicable => "n/a",
            },
            badge: match r.outcome {
                ProbeOutcome::Pass => "pass",
                ProbeOutcome::Fail => "fail",
                ProbeOutcome::NotApplicable => "na",
            },
            summary: r.summary.clone(),
            request: r.evidence.request.clone(),
            status: r.evidence.status.map_or("—".to_string(), |s| s.to_string()),
            elapsed: r
                .evidence
                .elapsed_ms
                .map_or("—".to_string(), |ms| format!("{ms:.0} ms")),
            excerpt_short: crate::domain::validation::truncate(
                &r.evidence.excerpt.split_whitespace().collect::<Vec<_>>().join(" "),
                EVIDENCE_CHARS,
            ),
            excerpt: r.evidence.excerpt.clone(),
            notes: r.evidence.notes.clone(),
        })
        .collect(),
        provenance: run.report.provenance.clone(),
    }
}

fn checklist_rows(draft: &ChecklistDraft, errors: &FieldErrors) -> Vec<ChecklistRow> {
    ChecklistItem::ALL
        .iter()
        .map(|item| {
            let answer_field = ChecklistDraft::answer_field(*item);
            let notes_field = ChecklistDraft::notes_field(*item);
            let current = draft.value(&answer_field);
            ChecklistRow {
                key: item.key(),
                label: item.label(),
                question: item.question(),
                choices: Answer::CHOICES
                    .iter()
                    .map(|a| ChoiceView {
                        value: a.as_str(),
                        label: a.label(),
                        selected: a.as_str() == current,
                    })
                    .collect(),
                notes: draft.value(&notes_field),
                error: errors
                    .get(&answer_field)
                    .or_else(|| errors.get(&notes_field))
                    .map(str::to_string),
                answer_field,
                notes_field,
            }
        })
        .collect()
}

fn version_views(history: &[ChecklistVersion]) -> Vec<ChecklistVersionView> {
    history
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let empty = ChecklistAnswers::default();
            let older = history.get(i + 1).map_or(&empty, |o| &o.answers);
            let changes = diff_checklist(older, &v.answers)
                .into_iter()
                .map(|c| {
                    let mut text = format!(
                        "{}: {} → {}",
                        c.item.label(),
                        c.old.answer.label(),
                        c.new.answer.label()
                    );
                    if c.old.notes != c.new.notes && !c.new.notes.is_empty() {
                        text.push_str(&format!(" (notes: {})", c.new.notes));
                    } else if c.old.notes != c.new.notes {
                        text.push_str(" (notes removed)");
                    }
                    text
                })
                .collect();
            ChecklistVersionView {
                version: v.version,
                changed_by: v.changed_by.clone(),
                at: v.at.display(),
                rationale: v.rationale.clone(),
                changes,
            }
        })
        .collect()
}

fn soak_analysis_view(s: &SoakAnalysis, failure_classes: Vec<String>) -> SoakAnalysisView {
    let slope = |fit: Option<&crate::domain::stability::trend::LinearFit>, unit: &str| {
        fit.map_or("—".to_string(), |f| match f.slope_interval {
            Some(ci) => format!("{:+.1} {unit}/min (90 % CI {:+.1} to {:+.1})", f.slope, ci.lo, ci.hi),
            None => format!("{:+.1} {unit}/min", f.slope),
        })
    };
    SoakAnalysisView {
        degrading: s.degrading,
        verdict: s.verdict.clone(),
        requests: s.requests,
        duration: format!("{:.0} s", s.duration_s),
        error_rate: pct(Some(s.error_rate)),
        bursts: s.error_bursts,
        tok_s_drift: signed_pct(s.tok_s.drift),
        tok_s_slope: slope(s.tok_s.fit.as_ref(), "tok/s"),
        p95_drift: signed_pct(s.p95_latency.drift),
        p95_slope: slope(s.p95_latency.fit.as_ref(), "ms"),
        failure_classes,
        windows: s
            .windows
            .iter()
            .map(|w| WindowView {
                index: w.index + 1,
                span: format!("{:.0}–{:.0} s", w.start_s, w.end_s),
                requests: w.requests,
                failed: w.failed,
                tok_s: format!("{:.0}", w.tok_s),
                p95: w.p95_e2e_ms.map_or("—".to_string(), |p| format!("{p:.0} ms")),
                burst: w.burst,
            })
            .collect(),
    }
}

/// The latest soak run of this candidate (by the name this page gives soak runs).
async fn latest_soak(state: &AppState, candidate: &Candidate) -> Result<Option<SoakView>, WebError> {
    let name = format!("{SOAK_RUN_PREFIX}{}", candidate.spec.name);
    let runs = state.store.list_runs(SOAK_SEARCH, 0).await?;
    let Some(item) = runs
        .into_iter()
        .find(|r| r.run.name == name && r.run.candidate_ids == [candidate.id])
    else {
        return Ok(None);
    };
    let run = item.run;
    let finished = run.status == RunStatus::Finished;
    let analysis = if finished {
        let records = state.store.list_request_records(run.id).await?;
        let report = stability_report(&records, candidate.id, &StabilityOptions::default());
        let classes = report
            .failures
            .by_class
            .iter()
            .map(|r| format!("{}: {} of {}", r.label, r.count, r.n))
            .collect();
        report.soak.as_ref().map(|s| soak_analysis_view(s, classes))
    } else {
        None
    };
    Ok(Some(SoakView {
        run_id: run.id,
        status: run.status.as_str(),
        finished,
        at: run.created_at.display(),
        config: format!(
            "concurrency {} for {} s, max_tokens {}, {}",
            run.config.concurrency,
            run.config.duration_secs.unwrap_or(0),
            run.config.max_tokens.map_or("as set".to_string(), |n| n.to_string()),
            if run.config.stream { "streamed" } else { "not streamed" }
        ),
        analysis,
    }))
}

struct Inputs {
    draft: Option<ChecklistDraft>,
    errors: FieldErrors,
    saved: bool,
    probed: bool,
    soak_started: Option<i64>,
    soak_form: SoakForm,
}

async fn render(
    state: &AppState,
    candidate: Candidate,
    headers: &HeaderMap,
    inputs: Inputs,
) -> Result<OperabilityPage, WebError> {
    let candidate_id = candidate.id;
    let probe_runs = state.store.list_probe_runs(candidate.id, PROBE_HISTORY).await?;
    let history = state.store.checklist_history(candidate.id).await?;
    let current = history.first().map(|v| &v.answers);
    let score = operability_score(probe_runs.first().map(|r| &r.report), current);
    let draft = inputs.draft.unwrap_or_else(|| {
        ChecklistDraft::from_answers(
            current.unwrap_or(&ChecklistAnswers::default()),
            &remembered_name(headers),
        )
    });
    let evalsets = state
        .store
        .list_evalsets()
        .await?
        .into_iter()
        .map(|s| EvalSetChoice {
            version_id: s.latest_version_id,
            label: format!("{} ({} cases)", s.name, s.case_count),
        })
        .collect();
    let soak = latest_soak(state, &candidate).await?;
    Ok(OperabilityPage {
        nav: "candidates",
        id: candidate.id,
        name: candidate.spec.name.clone(),
        model: candidate.spec.model.clone(),
        base_url: candidate.spec.base_url.clone(),
        score: score
            .score
            .map_or("not measured".to_string(), |s| format::percent(s, 0)),
        complete: score.complete,
        parts: score
            .parts
            .iter()
            .map(|p| PartView {
                label: p.label,
                good: p.good,
                applicable: p.applicable,
                share: pct(p.share),
                shortfalls: p.shortfalls.clone(),
            })
            .collect(),
        latest: probe_runs.first().map(probe_view),
        probe_history: probe_runs.iter().map(probe_view).collect(),
        checklist: checklist_rows(&draft, &inputs.errors),
        changed_by: draft.value("changed_by"),
        changed_by_error: inputs.errors.get("changed_by").map(str::to_string),
        rationale: draft.value("rationale"),
        checklist_version: history.first().map(|v| v.version),
        checklist_history: version_views(&history),
        saved: inputs.saved,
        probed: inputs.probed,
        probing: probing_since(state, candidate_id).map(since_text),
        soak,
        evalsets,
        soak_form: inputs.soak_form,
        soak_started: inputs.soak_started,
    })
}

async fn candidate(state: &AppState, id: &str) -> Result<Candidate, WebError> {
    let id = parse_id(id, "candidate")?;
    state
        .store
        .get_candidate(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("candidate {id}")))
}

// ---------------------------------------------------------------- handlers

#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    saved: Option<String>,
    probed: Option<String>,
    probing: Option<String>,
    soak: Option<String>,
}

async fn page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Result<OperabilityPage, WebError> {
    let c = candidate(&state, &id).await?;
    // Asked to follow probes that have ended since: they are saved, and shown.
    let probed = q.probed.is_some() || (q.probing.is_some() && probing_since(&state, c.id).is_none());
    render(
        &state,
        c,
        &headers,
        Inputs {
            draft: None,
            errors: FieldErrors::default(),
            saved: q.saved.is_some(),
            probed,
            soak_started: q.soak.as_deref().and_then(|s| s.parse().ok()),
            soak_form: SoakForm::default(),
        },
    )
    .await
}

/// Runs every probe now (bounded: ~10 s per probe at worst), stores the report, shows it.
async fn probe_now(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, WebError> {
    let c = candidate(&state, &id).await?;
    // A probe never overlaps a run measuring this candidate (it would distort both); a run due
    // while the probe lasts waits for it (seconds), saying so.
    if probing_since(&state, c.id).is_some() {
        // Already running: show them (a double click starts nothing twice).
        return Ok(Redirect::to(&format!("/candidates/{}/operability?probing=1#probes", c.id)).into_response());
    }
    let hold = state.runner.begin_probe(c.id).map_err(|run_id| {
        WebError::Conflict(format!(
            "Run #{run_id} is measuring {} now. Probes are not sent while a run measures a candidate: \
             their requests would distort the run's figures and its load would distort the probes'. \
             Run the probes again when run #{run_id} has ended (or cancel it); nothing was sent.",
            c.spec.name
        ))
    })?;
    // The probes take up to ~35 s: they run in the background and the page follows them, so
    // the request answers at once (the hold keeps runs of this candidate waiting meanwhile).
    crate::web::audit::record(
        &state,
        crate::domain::audit::Action::ProbesRun,
        format!("candidate #{} {:?}", c.id, c.spec.name),
        "started in the background".to_string(),
    )
    .await?;
    tracing::info!(candidate = c.id, "operability probes started");
    let key = probing_key(&state, c.id);
    PROBING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key.clone(), crate::domain::Timestamp::now());
    let store = state.store.clone();
    tokio::spawn(async move {
        let _hold = hold;
        let report = run_probes(&c.spec, &ProbeOptions::default()).await;
        let (passed, failed, _) = report.counts();
        tracing::info!(candidate = c.id, passed, failed, "operability probes run");
        if let Err(e) = store.save_probe_run(c.id, &report).await {
            tracing::warn!(candidate = c.id, error = %e, "saving the probe run failed");
        }
        PROBING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&key);
    });
    Ok(Redirect::to(&format!("/candidates/{}/operability?probing=1#probes", c.id)).into_response())
}

/// `GET /candidates/{id}/operability/probes/live`: while the background probes run, the
/// polling notice; once they ended, tells htmx to reload the page (which shows them).
async fn probes_live(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, WebError> {
    let c = candidate(&state, &id).await?;
    match probing_since(&state, c.id) {
        Some(since) => Ok(ProbingPartial {
            id: c.id,
            probing: Some(since_text(since)),
        }
        .into_response()),
        None => {
            let mut r = ProbingPartial {
                id: c.id,
                probing: None,
            }
            .into_response();
            r.headers_mut()
                .insert("hx-refresh", axum::http::HeaderValue::from_static("true"));
            Ok(r)
        }
    }
}

/// "started 14:03:07 UTC, 12 s ago".
fn since_text(since: crate::domain::Timestamp) -> String {
    let secs = (crate::domain::Timestamp::now().0 - since.0).max(0) / 1000;
    format!("started {} ({secs} s ago)", since.display())
}

/// The probes section's live notice (`operability/probing.html`).
#[derive(Template, WebTemplate)]
#[template(path = "operability/probing.html")]
pub struct ProbingPartial {
    pub id: i64,
    pub probing: Option<String>,
}

async fn save_checklist(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: FormBody,
) -> Result<Response, WebError> {
    let c = candidate(&state, &id).await?;
    let draft = ChecklistDraft(body.pairs.iter().cloned().collect());
    match draft.validate() {
        Ok(sub) => {
            state
                .store
                .save_checklist(c.id, &sub.answers, &sub.changed_by, &sub.rationale)
                .await?;
            crate::web::audit::record(
                &state,
                crate::domain::audit::Action::ChecklistSaved,
                format!("candidate #{} {:?}", c.id, c.spec.name),
                format!("signed {:?}: {}", sub.changed_by, sub.rationale),
            )
            .await?;
            let mut response =
                Redirect::to(&format!("/candidates/{}/operability?saved=1#checklist", c.id)).into_response();
            if let Some(cookie) = name_cookie(&sub.changed_by) {
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            Ok(response)
        }
        Err(errors) => {
            let page = render(
                &state,
                c,
                &headers,
                Inputs {
                    draft: Some(draft),
                    errors,
                    saved: false,
                    probed: false,
                    soak_started: None,
                    soak_form: SoakForm::default(),
                },
            )
            .await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
    }
}

/// Bounds and defaults of the soak form.
const SOAK_SECONDS: (u64, u64) = (5, 600);
const SOAK_CONCURRENCY: (u32, u32) = (1, 64);
const SOAK_DEFAULT_SECONDS: u64 = 30;
const SOAK_DEFAULT_CONCURRENCY: u32 = 4;

/// Starts a soak in the background and returns at once; the page shows it when finished.
/// Bad values re-show the page with the form as typed and every field's error (422), and
/// start nothing.
async fn start_soak(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: FormBody,
) -> Result<Response, WebError> {
    let c = candidate(&state, &id).await?;
    let mut form = SoakForm {
        evalset_version_id: body.get("evalset_version_id").unwrap_or_default().to_string(),
        seconds: body.get("seconds").unwrap_or_default().to_string(),
        concurrency: body.get("concurrency").unwrap_or_default().to_string(),
        errors: FieldErrors::default(),
    };
    let errors = &mut form.errors;
    let seconds = optional_number(errors, "seconds", &form.seconds, SOAK_SECONDS.0, SOAK_SECONDS.1);
    let concurrency = optional_number(
        errors,
        "concurrency",
        &form.concurrency,
        SOAK_CONCURRENCY.0,
        SOAK_CONCURRENCY.1,
    );
    let version_id = optional_number(errors, "evalset_version_id", &form.evalset_version_id, 1, i64::MAX);
    let version = match version_id {
        Some(v) => state.store.get_evalset_version_head(v).await?,
        None => None,
    };
    if version.is_none() && errors.get("evalset_version_id").is_none() {
        errors.add("evalset_version_id", "must be one of the eval sets listed");
    }
    let version_id = match version_id.filter(|_| version.is_some()) {
        Some(v) if form.errors.is_empty() => v,
        _ => {
            let inputs = Inputs {
                draft: None,
                errors: FieldErrors::default(),
                saved: false,
                probed: false,
                soak_started: None,
                soak_form: form,
            };
            let page = render(&state, c, &headers, inputs).await?;
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response());
        }
    };
    let config = SoakConfig {
        concurrency: concurrency.unwrap_or(SOAK_DEFAULT_CONCURRENCY),
        duration: Duration::from_secs(seconds.unwrap_or(SOAK_DEFAULT_SECONDS)),
        ..SoakConfig::default()
    };
    let name = format!("{SOAK_RUN_PREFIX}{}", c.spec.name);
    let run_id = soak::create_run(&state.store, &name, &c, version_id, &config)
        .await
        .map_err(|e| WebError::Internal(format!("storing the soak run: {e}")))?;
    // Like any run: queued until its candidate (and a global slot) is free, cancellable.
    state.runner.start(run_id);
    tracing::info!(candidate = c.id, run_id, "soak queued");
    crate::web::audit::record(
        &state,
        crate::domain::audit::Action::SoakStarted,
        format!("candidate #{} {:?}", c.id, c.spec.name),
        format!("run #{run_id}"),
    )
    .await?;
    Ok(Redirect::to(&format!("/candidates/{}/operability?soak={run_id}#soak", c.id)).into_response())
}
