//! `GET /runs/new` and `POST /runs`: choose a preset, an eval set version, candidates and
//! conditions, see what the run will cost, and start it (`app::runs::create_run` checks, stores
//! and starts it); the browser is then sent to its live page.
//!
//! `GET /runs/new?preset=soak` fills the form from a preset; `GET /runs/new?…every field…` (the
//! form's "Update the estimate" button) re-shows the typed values with a fresh estimate, and
//! `GET /runs/estimate?…` returns just the estimate fragment (htmx swaps it on every change).
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use crate::app::AppError;
use crate::app::runs::{RunRequest, create_run};
use crate::domain::candidate::Candidate;
use crate::domain::format;
use crate::domain::presets::{ARRIVALS, CAPACITY_AXES, LOAD_SHAPES, LoadDraft, Preset};
use crate::domain::retirement::ItemKind;
use crate::domain::run::MAX_CLIENTS;
use crate::domain::run::{DEFAULT_FIRST_TOKEN_TIMEOUT_SECS, DEFAULT_STALL_TIMEOUT_SECS, RunConfig, RunDraft};
use crate::domain::telemetry::{DEFAULT_SCRAPE_INTERVAL_S, MAX_SCRAPE_INTERVAL_S, MIN_SCRAPE_INTERVAL_S};
use crate::domain::validation::FieldErrors;
use crate::store::{EvalSetSummary, EvalSetVersion};
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
    /// The failed probes of the candidate's last probe run ("health, models"), if any failed.
    pub probes_failed: Option<String>,
}

/// Which probes failed the last time the candidate's endpoint was probed (None: all passed,
/// or never probed), so the form warns before a run is spent on an endpoint known to be down.
async fn last_probes_failed(state: &AppState, candidate_id: i64) -> Result<Option<String>, WebError> {
    let Some(last) = state.store.list_probe_runs(candidate_id, 1).await?.into_iter().next() else {
        return Ok(None);
    };
    let failed = last.report.failed_labels();
    Ok((!failed.is_empty()).then(|| format!("{} — {}", last.at.display(), failed.join("; "))))
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
    /// Per-stage timeouts (first token, stall), folded away unless one is set or wrong.
    pub advanced: Vec<FieldView>,
    pub advanced_open: bool,
    pub stream: FieldView,
    /// Load shape, levels, sweep maximum, rate, requests per level, duration.
    pub load: Vec<FieldView>,
    pub staged_rollout: FieldView,
    pub stop_when_decided: FieldView,
    pub measure_past_saturation: FieldView,
    /// `llm-judge` grading: the on switch (off by default) and the judge candidate.
    pub judge: FieldView,
    pub judge_candidate: FieldView,
    pub presets: Vec<PresetLink>,
    /// The preset the form was filled from ("" when none).
    pub preset: String,
    pub estimate: EstimateView,
    pub has_errors: bool,
}

/// A preset as a link that refills the form.
#[derive(Debug, Clone)]
pub struct PresetLink {
    pub slug: &'static str,
    pub label: &'static str,
    pub description: &'static str,
    pub href: String,
    pub current: bool,
}

/// The estimate fragment (`#estimate`).
#[derive(Template, WebTemplate)]
#[template(path = "runs/estimate.html")]
pub struct EstimatePartial {
    pub estimate: EstimateView,
}

/// What the run will cost, in words and numbers, with its assumptions.
#[derive(Debug, Clone, Default)]
pub struct EstimateView {
    /// Why there is no estimate (no eval set chosen, form errors…); None when there is one.
    pub missing: Option<String>,
    pub rows: Vec<EstimateRow>,
    pub total: Option<EstimateRow>,
    pub unpriced: String,
    pub assumptions: Vec<String>,
    /// Which threshold profile will judge the run: (profile id, name, chosen for this eval set),
    /// and the chosen eval set's version id (where to choose one).
    pub judged_by: Option<(i64, String, bool, i64)>,
}

#[derive(Debug, Clone)]
pub struct EstimateRow {
    pub name: String,
    pub requests: String,
    pub input_tokens: String,
    pub output_tokens: String,
    pub time: String,
    pub cost: String,
    /// Where the time's speeds come from ("time from run #12's measured speed: …"); "" for the
    /// total and the placeholder row.
    pub speed: String,
}

/// The load part of a run form as typed (the run form's and the schedule form's).
pub(crate) fn load_draft(body: &FormBody) -> LoadDraft {
    let text = |name: &str| body.get(name).unwrap_or_default().to_string();
    LoadDraft {
        shape: text("load_shape"),
        levels: text("levels"),
        sweep_max: text("sweep_max"),
        rate: text("rate"),
        arrivals: text("arrivals"),
        requests_per_level: text("requests_per_level"),
        duration_secs: text("duration_secs"),
        staged_rollout: body.get("staged_rollout").map(str::to_string),
        stop_when_decided: body.get("stop_when_decided").map(str::to_string),
        measure_past_saturation: body.get("measure_past_saturation").map(str::to_string),
        capacity_axis: text("capacity_axis"),
        capacity_width: text("capacity_width"),
        capacity_max_probes: text("capacity_max_probes"),
        capacity_max_load: text("capacity_max_load"),
        slo_ttft_ms: text("slo_ttft_ms"),
        slo_ttfa_ms: text("slo_ttfa_ms"),
        slo_tpot_ms: text("slo_tpot_ms"),
        slo_e2e_ms: text("slo_e2e_ms"),
        slo_target: text("slo_target"),
        workload_version: text("workload_version"),
        replay_speed: text("replay_speed"),
    }
}

/// What the form holds, as typed: the run request and the preset it was filled from.
#[derive(Debug, Clone, Default)]
struct RunForm {
    run: RunRequest,
    preset: String,
}

impl RunForm {
    /// The form as submitted (POST body, or the query of an "update the estimate" GET).
    fn from_body(body: &FormBody) -> Result<RunForm, WebError> {
        let text = |name: &str| body.get(name).unwrap_or_default().to_string();
        Ok(RunForm {
            run: RunRequest {
                name: text("name"),
                evalset_version: text("evalset_version"),
                candidates: body.all("candidate").into_iter().map(str::to_string).collect(),
                draft: body.to_draft()?,
                load: load_draft(body),
                judge: body.get("judge").is_some(),
                judge_candidate: text("judge_candidate"),
            },
            preset: text("preset"),
        })
    }

    /// A fresh form filled from `config`.
    fn from_config(
        config: &RunConfig,
        preset: Option<Preset>,
        evalset_version: String,
        candidates: Vec<String>,
    ) -> Self {
        RunForm {
            run: RunRequest {
                evalset_version,
                candidates,
                draft: RunDraft::from_config(config),
                load: LoadDraft::from_config(config),
                ..Default::default()
            },
            preset: preset.map(|p| p.slug().to_string()).unwrap_or_default(),
        }
    }
}

/// `GET /runs/new`: from a preset (`?preset=`), from typed values (`?concurrency=…`, the
/// "update the estimate" button), or the defaults; `?evalset_version=` pre-selects a set.
pub async fn form(State(state): State<AppState>, RawQuery(query): RawQuery) -> Result<NewRunPage, WebError> {
    let (form, errors) = form_from_query(query.as_deref())?;
    render(&state, &form, &errors).await
}

/// `GET /runs/estimate?…form fields…`: the estimate fragment alone.
pub async fn estimate_fragment(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<EstimatePartial, WebError> {
    let (form, _) = form_from_query(query.as_deref())?;
    Ok(EstimatePartial {
        estimate: estimate_view(&state, &form).await?,
    })
}

fn form_from_query(query: Option<&str>) -> Result<(RunForm, FieldErrors), WebError> {
    let body = FormBody::parse(query.unwrap_or_default().as_bytes());
    if body.get("concurrency").is_some() {
        let form = RunForm::from_body(&body)?;
        let errors = form.run.config().err().unwrap_or_default();
        return Ok((form, errors));
    }
    let preset = match body.get("preset").map(str::trim) {
        None | Some("") => None,
        Some(slug) => Some(Preset::parse(slug).ok_or_else(|| {
            WebError::BadRequest(format!(
                "There is no preset {:?}; choose one of the links on the form.",
                crate::domain::validation::truncate(slug, 40)
            ))
        })?),
    };
    let config = preset.map(Preset::config).unwrap_or_default();
    let form = RunForm::from_config(
        &config,
        preset,
        body.get("evalset_version").unwrap_or_default().to_string(),
        body.all("candidate").into_iter().map(str::to_string).collect(),
    );
    Ok((form, FieldErrors::default()))
}

pub async fn create(State(state): State<AppState>, body: FormBody) -> Result<Response, WebError> {
    let form = RunForm::from_body(&body)?;
    match create_run(&state.store, &state.runner, &form.run).await {
        Ok(id) => {
            crate::web::audit::record(
                &state,
                crate::domain::audit::Action::RunStarted,
                format!("run #{id}"),
                String::new(),
            )
            .await?;
            Ok(Redirect::to(&format!("/runs/{id}")).into_response())
        }
        Err(AppError::Fields(errors)) => {
            let page = render(&state, &form, &errors).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

async fn render(state: &AppState, form: &RunForm, errors: &FieldErrors) -> Result<NewRunPage, WebError> {
    let (evalsets, chosen) = evalset_options(state, form).await?;
    let (candidates, judge_options) = candidate_options(state, form).await?;
    let estimate = estimate_view(
        state,
        &RunForm {
            run: RunRequest {
                evalset_version: chosen.clone(),
                ..form.run.clone()
            },
            preset: form.preset.clone(),
        },
    )
    .await?;
    let d = &form.run.draft;
    let field = |name, label, kind, value: &str| FieldView::new(name, label, kind, value).errors_from(errors);
    Ok(NewRunPage {
        nav: "runs",
        name: field("name", "Run name", FieldKind::Text, &form.run.name)
            .help("Optional; defaults to the eval set and candidate names."),
        evalsets,
        evalset_error: errors.get("evalset_version").map(str::to_string),
        candidates,
        candidates_error: errors.get("candidates").map(str::to_string),
        conditions: condition_fields(d, errors),
        limits: limit_fields(d, errors),
        advanced: advanced_fields(d, errors),
        advanced_open: [
            &d.first_token_timeout_secs,
            &d.stall_timeout_secs,
            &d.clients,
            &d.scrape_interval_secs,
            &d.think_time,
        ]
        .iter()
        .any(|v| !v.trim().is_empty())
            || [
                "first_token_timeout_secs",
                "stall_timeout_secs",
                "clients",
                "scrape_interval_secs",
                "think_time",
            ]
            .iter()
            .any(|f| errors.get(f).is_some()),
        stream: FieldView::new(
            "stream",
            "Stream responses (needed for TTFT and decode speed)",
            FieldKind::Checkbox,
            "",
        )
        .checked(d.stream.is_some())
        .errors_from(errors),
        load: load_fields(&form.run.load, errors),
        staged_rollout: FieldView::new(
            "staged_rollout",
            "Staged rollout: shortest case, longest case, a few at once, then everything; stop early if a stage fails",
            FieldKind::Checkbox,
            "",
        )
        .checked(form.run.load.staged_rollout.is_some())
        .errors_from(errors),
        stop_when_decided: FieldView::new(
            "stop_when_decided",
            "Stop each level when decided: once its SLO attainment's interval lies wholly on one side of the target \
             (needs an SLO with a target attainment); the run's events say when and what it saved",
            FieldKind::Checkbox,
            "",
        )
        .checked(form.run.load.stop_when_decided.is_some())
        .errors_from(errors),
        measure_past_saturation: FieldView::new(
            "measure_past_saturation",
            "Measure past saturation: go on with a sweep's higher levels after a level whose server queue was growing \
             (by default they are skipped)",
            FieldKind::Checkbox,
            "",
        )
        .checked(form.run.load.measure_past_saturation.is_some())
        .errors_from(errors),
        judge: FieldView::new(
            "judge",
            "Run llm-judge graders: after the measured requests, send each output to its judge (extra calls, \
             recorded and costed apart, in no figure)",
            FieldKind::Checkbox,
            "",
        )
        .checked(form.run.judge)
        .errors_from(errors),
        judge_candidate: field("judge_candidate", "Judge", FieldKind::Select, &form.run.judge_candidate)
            .options(judge_options)
            .help("Off by default. Choose a candidate to judge every llm-judge grader instead of the one it names."),
        presets: Preset::ALL
            .into_iter()
            .map(|p| PresetLink {
                slug: p.slug(),
                label: p.label(),
                description: p.description(),
                href: preset_href(p, &chosen),
                current: form.preset == p.slug(),
            })
            .collect(),
        preset: form.preset.clone(),
        estimate,
        has_errors: !errors.is_empty(),
    })
}

/// The eval sets offered (retired ones left out unless chosen) and the version chosen: the one
/// typed, else the one preselected so the common case is one click.
async fn evalset_options(state: &AppState, form: &RunForm) -> Result<(Vec<EvalSetOption>, String), WebError> {
    // Retired sets are not offered (a form sent back with one chosen keeps it).
    let retired_sets = crate::app::retirement::retired(&state.store, ItemKind::EvalSet).await?;
    let typed_set = form.run.evalset_version.trim().to_string();
    let sets: Vec<_> = state
        .store
        .list_evalsets()
        .await?
        .into_iter()
        .filter(|s| !retired_sets.contains(&s.id) || typed_set == s.latest_version_id.to_string())
        .collect();
    // With nothing chosen yet, one set is preselected so the common case is one click.
    let chosen = match form.run.evalset_version.trim() {
        "" => default_evalset(&sets, state.demo_mock_url.is_some())
            .map(|id| id.to_string())
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
    Ok((evalsets, chosen))
}

/// The candidates offered (retired ones left out unless checked) and the judge's choices.
async fn candidate_options(
    state: &AppState,
    form: &RunForm,
) -> Result<(Vec<CandidateOption>, Vec<(String, String)>), WebError> {
    let retired_candidates = crate::app::retirement::retired(&state.store, ItemKind::Candidate).await?;
    let all = state.store.list_candidates().await?;
    let mut judge_options = vec![(String::new(), "the candidate each llm-judge grader names".to_string())];
    judge_options.extend(
        all.iter()
            .filter(|c| !retired_candidates.contains(&c.id) || form.run.judge_candidate.trim() == c.id.to_string())
            .map(|c| (c.id.to_string(), c.spec.name.clone())),
    );
    let mut candidates = Vec::new();
    for c in all {
        let checked = form.run.candidates.iter().any(|raw| raw.trim() == c.id.to_string());
        if retired_candidates.contains(&c.id) && !checked {
            continue;
        }
        candidates.push(CandidateOption {
            checked,
            detail: format!("{} · {}", c.spec.model, c.spec.provider.label()),
            probes_failed: last_probes_failed(state, c.id).await?,
            id: c.id,
            name: c.spec.name,
        });
    }
    Ok((candidates, judge_options))
}

/// A field of the form showing its errors.
fn form_field(
    name: &'static str,
    label: &'static str,
    kind: FieldKind,
    value: &str,
    errors: &FieldErrors,
) -> FieldView {
    FieldView::new(name, label, kind, value).errors_from(errors)
}

/// The conditions every figure is measured under.
pub(crate) fn condition_fields(d: &RunDraft, errors: &FieldErrors) -> Vec<FieldView> {
    let field = |name, label, kind, value: &str| form_field(name, label, kind, value, errors);
    vec![
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
        field(
            "tool_mode",
            "Tool calls",
            FieldKind::Select,
            if d.tool_mode.trim().is_empty() {
                "native"
            } else {
                d.tool_mode.trim()
            },
        )
        .options(vec![
            ("native".to_string(), "Native tool API (tools / tool_calls)".to_string()),
            (
                "prompt".to_string(),
                "Prompt mode (tools in the system prompt, calls read from the text)".to_string(),
            ),
            (
                "both".to_string(),
                "Both, side by side (each candidate natively and as \"… (prompt mode)\")".to_string(),
            ),
        ])
        .help(
            "How tool cases are sent. Both: each candidate is measured natively and, right after it at the same \
             load, in prompt mode as a column of its own (\"… (prompt mode)\"), with its own figures and verdict.",
        ),
        field(
            "unconstrained_twins",
            "Measure the cost of structured output",
            FieldKind::Checkbox,
            "",
        )
        .checked(d.unconstrained_twins.is_some())
        .help(
            "Cases with a response_format (a JSON Schema the answer must fit) are also sent without it, right \
             after, at the same load: TTFT and decode rate with and without the constraint side by side.",
        ),
    ]
}

/// When a request, or a candidate, is given up on.
pub(crate) fn limit_fields(d: &RunDraft, errors: &FieldErrors) -> Vec<FieldView> {
    let field = |name, label, kind, value: &str| form_field(name, label, kind, value, errors);
    vec![
        field("timeout_secs", "Timeout (s)", FieldKind::Number, &d.timeout_secs).help("Whole-request timeout."),
        field("retries", "Retries", FieldKind::Number, &d.retries).help(
            "After a failed attempt, in every stage; waits what Retry-After asks (at most 30 s), else backs off. \
             Every attempt is recorded.",
        ),
        field("case_limit", "Case limit", FieldKind::Number, &d.case_limit)
            .help("Only the first N cases (one → ten → all). Blank: every case."),
        field(
            "error_budget_percent",
            "Error budget (% failed)",
            FieldKind::Number,
            &d.error_budget_percent,
        )
        .decimal()
        .help("A candidate failing more than this share of its last requests is stopped; the others go on. 100: off."),
        field(
            "error_budget_window",
            "Error budget window (requests)",
            FieldKind::Number,
            &d.error_budget_window,
        )
        .help("How many of a candidate's last measured requests (after retries) the budget looks at."),
    ]
}

/// Clients per candidate and the stage timeouts, folded away unless set.
fn advanced_fields(d: &RunDraft, errors: &FieldErrors) -> Vec<FieldView> {
    let field = |name, label, kind, value: &str| form_field(name, label, kind, value, errors);
    vec![
        field("clients", "Clients per candidate", FieldKind::Number, &d.clients).help(format!(
            "Split each candidate's load over this many workers at once (1–{MAX_CLIENTS}; one load level), \
             started together; each worker's clock offset is stated. Blank: one client."
        )),
        field(
            "first_token_timeout_secs",
            "First-token timeout (s)",
            FieldKind::Number,
            &d.first_token_timeout_secs,
        )
        .help(format!(
            "Send → first token of a stream; a stream without one by then fails first_token_timeout. \
             1 to the whole-request timeout. Blank: {DEFAULT_FIRST_TOKEN_TIMEOUT_SECS} s."
        )),
        field(
            "stall_timeout_secs",
            "Stall timeout (s)",
            FieldKind::Number,
            &d.stall_timeout_secs,
        )
        .help(format!(
            "Longest silence between two tokens of a started stream; longer fails stall_timeout. \
             1 to the whole-request timeout. Blank: {DEFAULT_STALL_TIMEOUT_SECS} s."
        )),
        field(
            "scrape_interval_secs",
            "Telemetry scrape interval (s)",
            FieldKind::Number,
            &d.scrape_interval_secs,
        )
        .decimal()
        .help(format!(
            "Seconds between scrapes of a candidate's server and GPU metrics (when it declares them) during \
             measured load; each level's start and end are scraped besides. {MIN_SCRAPE_INTERVAL_S} to \
             {MAX_SCRAPE_INTERVAL_S}. Blank: {DEFAULT_SCRAPE_INTERVAL_S} s."
        )),
        field(
            "think_time",
            "Think time (conversations)",
            FieldKind::Text,
            &d.think_time,
        )
        .help(
            "Conversation cases only: each user (the concurrency is the number of users) waits this long between \
             a reply and its next turn, seeded. `fixed 500`, `uniform 200-800` or `exponential 1000` (ms). \
             Blank: none.",
        ),
    ]
}

/// The eval set version preselected when the form names none, chosen on purpose rather than by
/// list order: in demo mode the demo's own set (the mock knows its answers), otherwise the set
/// changed most recently (what the team just imported or edited).
fn default_evalset(sets: &[EvalSetSummary], demo: bool) -> Option<i64> {
    let demo_set = demo
        .then(|| sets.iter().find(|s| s.name == crate::app::demo::DEMO_EVALSET))
        .flatten();
    demo_set
        .or_else(|| sets.iter().max_by_key(|s| (s.updated_at, s.latest_version_id)))
        .map(|s| s.latest_version_id)
}

fn preset_href(p: Preset, evalset_version: &str) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("preset", p.slug());
    if !evalset_version.is_empty() {
        q.append_pair("evalset_version", evalset_version);
    }
    format!("/runs/new?{}", q.finish())
}

pub(crate) fn load_fields(l: &LoadDraft, errors: &FieldErrors) -> Vec<FieldView> {
    let field = |name, label, kind, value: &str| FieldView::new(name, label, kind, value).errors_from(errors);
    let shape = if l.shape.trim().is_empty() {
        "fixed"
    } else {
        l.shape.trim()
    };
    vec![
        field("load_shape", "Load shape", FieldKind::Select, shape)
            .options(
                LOAD_SHAPES
                    .iter()
                    .map(|(v, label)| (v.to_string(), label.to_string()))
                    .collect(),
            )
            .help("Fixed: the concurrency above. Sweep: doubles up to the maximum and reports the knee."),
        field("levels", "Concurrency levels", FieldKind::Text, &l.levels)
            .help("For concurrency levels: e.g. 1, 4, 16."),
        field("sweep_max", "Sweep maximum", FieldKind::Number, &l.sweep_max)
            .help("For a sweep: the highest concurrency (default 32)."),
        field("rate", "Requests per second", FieldKind::Number, &l.rate)
            .decimal()
            .help("For a request rate: offered load, sent on schedule."),
        field(
            "arrivals",
            "Arrivals",
            FieldKind::Select,
            if l.arrivals.trim().is_empty() {
                "poisson"
            } else {
                l.arrivals.trim()
            },
        )
        .options(
            ARRIVALS
                .iter()
                .map(|(v, label)| (v.to_string(), label.to_string()))
                .collect(),
        )
        .help("For a request rate: Poisson shows how queues build under random bursts; constant isolates the server's steady-state latency."),
        field(
            "requests_per_level",
            "Requests per level",
            FieldKind::Number,
            &l.requests_per_level,
        )
        .help("Blank: every case once per level and repetition; more cycles through the cases."),
        field(
            "duration_secs",
            "Duration per level (s)",
            FieldKind::Number,
            &l.duration_secs,
        )
        .help("Stop a level's repetition after this long (soak). Blank: no limit."),
        field(
            "capacity_axis",
            "Capacity search over",
            FieldKind::Select,
            if l.capacity_axis.trim().is_empty() {
                "rate"
            } else {
                l.capacity_axis.trim()
            },
        )
        .options(
            CAPACITY_AXES
                .iter()
                .map(|(v, label)| (v.to_string(), label.to_string()))
                .collect(),
        )
        .help("For find capacity: each candidate's own search, bracketing then bisecting; every probe is a level of the run."),
        field("capacity_width", "Bracket width (%)", FieldKind::Number, &l.capacity_width)
            .decimal()
            .help("For find capacity: stop once the bracket is within this share of the capacity. Blank: 5."),
        field(
            "capacity_max_probes",
            "Most probe levels",
            FieldKind::Number,
            &l.capacity_max_probes,
        )
        .help("For find capacity: per candidate. Blank: 8."),
        field(
            "capacity_max_load",
            "Highest load probed",
            FieldKind::Number,
            &l.capacity_max_load,
        )
        .decimal()
        .help("For find capacity: req/s or concurrency. Blank: no limit."),
        field("workload_version", "Workload version", FieldKind::Number, &l.workload_version).help(
            "For replay: the workload version (its number on the Workloads page) whose traffic is replayed. \
             Level 0 sends this eval set's cases at the concurrency above (graded: the quality figures); \
             level 1 replays the workload — every request once, at its recorded arrival, with synthetic text \
             of its recorded length whose shared prefixes repeat as they did, max_tokens its recorded output — \
             the identical schedule for every candidate. Rules without @c=N judge the replay level.",
        ),
        field("replay_speed", "Replay speed-up", FieldKind::Number, &l.replay_speed)
            .decimal()
            .help("For replay: 1 sends at the recorded arrivals, 2 twice as fast (above 0, at most 1000). Blank: 1. \
                   The run page shows how closely the schedule was kept (send lag) and marks the replay's speed \
                   figures when it fell behind."),
        field("slo_ttft_ms", "SLO: TTFT ≤ (ms)", FieldKind::Number, &l.slo_ttft_ms)
            .decimal()
            .help("Send → first token. The SLO judges every request (goodput, attainment); blank: no limit."),
        field("slo_ttfa_ms", "SLO: TTFA ≤ (ms)", FieldKind::Number, &l.slo_ttfa_ms)
            .decimal()
            .help("Send → first answer token (differs from TTFT for reasoning models)."),
        field("slo_tpot_ms", "SLO: TPOT ≤ (ms)", FieldKind::Number, &l.slo_tpot_ms)
            .decimal()
            .help("Time per output token after the first (ITL averaged over the stream)."),
        field("slo_e2e_ms", "SLO: E2E ≤ (ms)", FieldKind::Number, &l.slo_e2e_ms)
            .decimal()
            .help("Send → end of stream."),
        field("slo_target", "SLO: target attainment (%)", FieldKind::Number, &l.slo_target)
            .decimal()
            .help("Share of requests that must meet every limit (e.g. 95); find capacity and stop when decided need it."),
    ]
}

/// The estimate for the form's current values (see `domain::estimate`).
async fn estimate_view(state: &AppState, form: &RunForm) -> Result<EstimateView, WebError> {
    let config = match form.run.config() {
        Ok(c) => c,
        Err(_) => {
            return Ok(EstimateView {
                missing: Some("Correct the fields marked below to see an estimate.".into()),
                ..Default::default()
            });
        }
    };
    let version = match form.run.evalset_version.trim().parse::<i64>() {
        Ok(id) => state.store.get_evalset_version(id).await?,
        Err(_) => match default_evalset(&state.store.list_evalsets().await?, state.demo_mock_url.is_some()) {
            Some(id) => state.store.get_evalset_version(id).await?,
            None => None,
        },
    };
    let Some(version) = version else {
        return Ok(EstimateView {
            missing: Some("Choose an eval set to see an estimate.".into()),
            ..Default::default()
        });
    };
    let all = state.store.list_candidates().await?;
    let chosen: Vec<&Candidate> = all
        .iter()
        .filter(|c| form.run.candidates.iter().any(|raw| raw.trim() == c.id.to_string()))
        .collect();
    let ids: Vec<i64> = chosen.iter().map(|c| c.id).collect();
    let measured = crate::app::runs::latest_measured_speeds(&state.store, &state.views.figures, &ids).await?;
    let mut view = build_estimate(&config, &version, &chosen, &measured);
    // The profile that will judge it: the one chosen for this eval set, else the default (which
    // was written for another task: the form says so, and where to choose or create one).
    let profiles = state.store.list_threshold_profiles().await?;
    let judge = crate::app::profiles::judging_profile(&state.store, Some(&version.file.header.name)).await?;
    view.judged_by = judge.and_then(|(id, own)| {
        profiles
            .iter()
            .find(|p| p.id == id)
            .map(|p| (p.id, p.name.clone(), own, version.id))
    });
    let judges = version.file.judge_names(version.file.cases.len()).len();
    if form.run.judge && judges > 0 {
        view.assumptions.push(format!(
            "Not included: the llm-judge calls (one per successful output per judge grader, {judges} judge(s)), \
             sent after the measured load and costed at the judge's prices."
        ));
    }
    Ok(view)
}

fn build_estimate(
    config: &RunConfig,
    version: &EvalSetVersion,
    chosen: &[&Candidate],
    measured: &std::collections::HashMap<i64, crate::domain::estimate::MeasuredSpeed>,
) -> EstimateView {
    let e = crate::app::runs::estimate_of(config, version, chosen, measured);
    let cost = |c: Option<f64>| match c {
        Some(usd) => format!("up to ${usd:.2}"),
        None => "no price stated".to_string(),
    };
    let rows = e
        .candidates
        .iter()
        .map(|c| EstimateRow {
            name: c.name.clone(),
            requests: format::thousands(c.requests),
            input_tokens: format::thousands(c.input_tokens),
            output_tokens: format!("up to {}", format::thousands(c.max_output_tokens)),
            time: format!("up to {}", format::duration(c.seconds)),
            cost: cost(c.max_cost_usd),
            // The placeholder row (no candidate ticked) has only the assumption to say.
            speed: if chosen.is_empty() {
                String::new()
            } else {
                c.speed.clone()
            },
        })
        .collect();
    EstimateView {
        missing: None,
        rows,
        total: (e.candidates.len() > 1).then(|| EstimateRow {
            name: "total".into(),
            requests: format::thousands(e.requests),
            input_tokens: format::thousands(e.input_tokens),
            output_tokens: format!("up to {}", format::thousands(e.max_output_tokens)),
            time: format!("up to {}", format::duration(e.seconds)),
            speed: String::new(),
            cost: match e.max_cost_usd {
                Some(usd) => format!("up to ${usd:.2}"),
                None => "no price stated".into(),
            },
        }),
        // Without a ticked candidate the row is a placeholder, not a candidate without prices.
        unpriced: if chosen.is_empty() {
            String::new()
        } else {
            e.unpriced.join(", ")
        },
        assumptions: e.assumptions,
        judged_by: None,
    }
}
