//! `GET /runs/new` and `POST /runs`: choose an eval set version, candidates and conditions;
//! the run is stored, handed to the runner, and the browser is sent to its live page.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::domain::run::{NewRun, RunConfig, RunDraft};
use crate::domain::validation::{FieldErrors, MAX_NAME_CHARS, optional_text};
use crate::web::AppState;
use crate::web::error::WebError;
use crate::web::views::{FieldKind, FieldView, FormBody, short_hash};

#[derive(Debug, Clone)]
pub struct EvalSetOption {
    pub version_id: i64,
    pub label: String,
    pub selected: bool,
}

#[derive(Debug, Clone)]
pub struct CandidateOption {
    pub id: i64,
    pub name: String,
    pub detail: String,
    pub checked: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "runs/new.html")]
pub struct NewRunPage {
    pub nav: &'static str,
    pub name: FieldView,
    pub evalsets: Vec<EvalSetOption>,
    pub evalset_error: Option<String>,
    pub candidates: Vec<CandidateOption>,
    pub candidates_error: Option<String>,
    /// Load and request conditions.
    pub conditions: Vec<FieldView>,
    /// Robustness knobs (timeout, retries, case limit).
    pub limits: Vec<FieldView>,
    pub stream: FieldView,
    pub has_errors: bool,
}

/// What the form holds, as typed.
#[derive(Debug, Clone, Default)]
struct RunForm {
    name: String,
    evalset_version: String,
    candidates: Vec<String>,
    draft: RunDraft,
}

fn draft_from_config(c: &RunConfig) -> RunDraft {
    let opt = |v: Option<String>| v.unwrap_or_default();
    RunDraft {
        concurrency: c.concurrency.to_string(),
        repetitions: c.repetitions.to_string(),
        warmup_requests: c.warmup_requests.to_string(),
        max_tokens: opt(c.max_tokens.map(|v| v.to_string())),
        temperature: opt(c.temperature.map(|v| v.to_string())),
        timeout_secs: c.timeout_secs.to_string(),
        retries: c.retries.to_string(),
        case_limit: opt(c.case_limit.map(|v| v.to_string())),
        stream: c.stream.then(|| "on".to_string()),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct NewRunQuery {
    /// Pre-selects an eval set version (links from an eval set's page).
    pub evalset_version: Option<String>,
}

pub async fn form(State(state): State<AppState>, Query(q): Query<NewRunQuery>) -> Result<NewRunPage, WebError> {
    let form = RunForm {
        evalset_version: q.evalset_version.unwrap_or_default(),
        draft: draft_from_config(&RunConfig::default()),
        ..Default::default()
    };
    render(&state, &form, &FieldErrors::default()).await
}

pub async fn create(State(state): State<AppState>, body: FormBody) -> Result<Response, WebError> {
    let form = RunForm {
        name: body.get("name").unwrap_or_default().to_string(),
        evalset_version: body.get("evalset_version").unwrap_or_default().to_string(),
        candidates: body.all("candidate").into_iter().map(str::to_string).collect(),
        draft: body.to_draft()?,
    };
    let mut errors = FieldErrors::default();
    let config = match form.draft.validate() {
        Ok(config) => Some(config),
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    };
    let name = optional_text(&mut errors, "name", &form.name, MAX_NAME_CHARS);

    let version = match form.evalset_version.trim().parse::<i64>() {
        Ok(id) => state.store.get_evalset_version(id).await?,
        Err(_) => None,
    };
    if version.is_none() {
        errors.add(
            "evalset_version",
            "is not a known eval set version; choose one from the list",
        );
    }

    let known = state.store.list_candidates().await?;
    let mut candidate_ids: Vec<i64> = Vec::new();
    for raw in &form.candidates {
        match raw
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|id| known.iter().any(|c| c.id == *id))
        {
            Some(id) if !candidate_ids.contains(&id) => candidate_ids.push(id),
            Some(_) => {}
            None => errors.add(
                "candidates",
                format!(
                    "unknown candidate {:?}; reload the page and choose again",
                    crate::domain::validation::truncate(raw, 20)
                ),
            ),
        }
    }
    if form.candidates.is_empty() {
        errors.add("candidates", "choose at least one candidate");
    }

    let (Some(config), Some(version), true) = (config, version, errors.is_empty()) else {
        let page = render(&state, &form, &errors).await?;
        return Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response());
    };
    let name = name.unwrap_or_else(|| {
        let names: Vec<&str> = candidate_ids
            .iter()
            .filter_map(|id| known.iter().find(|c| c.id == *id).map(|c| c.spec.name.as_str()))
            .collect();
        let set = &version.file.header.name;
        let full = format!("{set} · {}", names.join(" vs "));
        if full.chars().count() <= 60 {
            full
        } else {
            crate::domain::validation::truncate(&format!("{set} · {} candidates", names.len()), MAX_NAME_CHARS)
        }
    });
    let id = state
        .store
        .create_run(&NewRun {
            name,
            evalset_version_id: version.id,
            candidate_ids,
            config,
        })
        .await?;
    state.runner.start(id);
    tracing::info!(run_id = id, "run created and started");
    Ok(Redirect::to(&format!("/runs/{id}")).into_response())
}

async fn render(state: &AppState, form: &RunForm, errors: &FieldErrors) -> Result<NewRunPage, WebError> {
    let sets = state.store.list_evalsets().await?;
    // With nothing chosen yet, the first set is preselected so the common case is one click.
    let chosen = match form.evalset_version.trim() {
        "" => sets
            .first()
            .map(|s| s.latest_version_id.to_string())
            .unwrap_or_default(),
        typed => typed.to_string(),
    };
    let evalsets = sets
        .into_iter()
        .map(|s| EvalSetOption {
            version_id: s.latest_version_id,
            selected: chosen == s.latest_version_id.to_string(),
            label: format!(
                "{} ({}, {} cases, version {})",
                s.name,
                s.task.as_str(),
                s.case_count,
                short_hash(&s.latest_hash)
            ),
        })
        .collect();
    let candidates = state
        .store
        .list_candidates()
        .await?
        .into_iter()
        .map(|c| CandidateOption {
            checked: form.candidates.iter().any(|raw| raw.trim() == c.id.to_string()),
            detail: format!("{} · {}", c.spec.model, c.spec.provider.label()),
            id: c.id,
            name: c.spec.name,
        })
        .collect();
    let d = &form.draft;
    let field = |name, label, kind, value: &str| FieldView::new(name, label, kind, value).errors_from(errors);
    Ok(NewRunPage {
        nav: "runs",
        name: field("name", "Run name", FieldKind::Text, &form.name)
            .help("Optional; defaults to the eval set and candidate names."),
        evalsets,
        evalset_error: errors.get("evalset_version").map(str::to_string),
        candidates,
        candidates_error: errors.get("candidates").map(str::to_string),
        conditions: vec![
            field("concurrency", "Concurrency", FieldKind::Number, &d.concurrency)
                .required()
                .help("Requests in flight at once per candidate (closed loop)."),
            field("repetitions", "Repetitions", FieldKind::Number, &d.repetitions)
                .required()
                .help("Every case is sent this many times; figures report medians and spread."),
            field(
                "warmup_requests",
                "Warm-up requests",
                FieldKind::Number,
                &d.warmup_requests,
            )
            .help("Sent first and excluded from every figure."),
            field("max_tokens", "max_tokens", FieldKind::Number, &d.max_tokens)
                .help("Blank: the eval set's or candidate's value."),
            field("temperature", "Temperature", FieldKind::Number, &d.temperature)
                .decimal()
                .help("0–2. Blank: the eval set's or candidate's value."),
        ],
        limits: vec![
            field("timeout_secs", "Timeout (s)", FieldKind::Number, &d.timeout_secs).help("Whole-request timeout."),
            field("retries", "Retries", FieldKind::Number, &d.retries)
                .help("After a failed attempt; every attempt is recorded."),
            field("case_limit", "Case limit", FieldKind::Number, &d.case_limit)
                .help("Only the first N cases (one → ten → all). Blank: every case."),
        ],
        stream: FieldView::new(
            "stream",
            "Stream responses (needed for TTFT and decode speed)",
            FieldKind::Checkbox,
            "",
        )
        .checked(d.stream.is_some())
        .errors_from(errors),
        has_errors: !errors.is_empty(),
    })
}
