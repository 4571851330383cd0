//! Candidates: the list, and the create / edit forms. API keys are write-only: pages show
//! whether a key is set, never the key, and a blank key field on edit keeps the stored one.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::AppState;
use super::error::{WebError, parse_id};
use super::security::CurrentUser;
use super::views::{FieldKind, FieldView, Fieldset, FormBody};
use crate::app::AppError;
use crate::app::candidates::{self, Source};
use crate::domain::candidate::{
    Candidate, CandidateDraft, CandidateSpec, HeaderText, ProviderKind, Secret, TokenizeKind,
};
use crate::domain::reasoning::ReasoningInContent;
use crate::domain::retirement::ItemKind;
use crate::domain::validation::FieldErrors;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/candidates", get(list).post(create))
        .route("/candidates/new", get(new_form))
        .route("/candidates/{id}/edit", get(edit_form).post(update))
}

/// One candidate as listed.
#[derive(Debug, Clone)]
pub struct CandidateRow {
    pub id: i64,
    pub name: String,
    pub provider: &'static str,
    pub model: String,
    pub base_url: String,
    pub conditions: String,
    pub price: String,
    pub claimed: String,
    /// Who counts output tokens when streams carry no usage: the server's endpoint or bakeoff.
    pub tokenize: String,
    pub key: String,
    /// The labels a worker must carry to measure it, "eu, gpu-a"; empty: any worker.
    pub worker_labels: String,
}

impl CandidateRow {
    /// The row with the labels its workers must carry (stored apart from the candidate).
    pub fn with_worker_labels(mut self, labels: &[String]) -> Self {
        self.worker_labels = labels.join(", ");
        self
    }
}

/// "set · last 4 …", "from env X", "set (env X unused)" or "none": never the key itself.
pub fn key_status(spec: &CandidateSpec) -> String {
    let set = |key: &Secret| match key.last4() {
        Some(last4) => format!("set · last 4 {last4}"),
        None => "set".to_string(),
    };
    let key = match (&spec.api_key, &spec.api_key_env) {
        (Some(key), Some(var)) => format!("{} (env {var} unused)", set(key)),
        (Some(key), None) => set(key),
        (None, Some(var)) => format!("from env {var}"),
        (None, None) => "none".to_string(),
    };
    // Secret headers by name only.
    let secret: Vec<&str> = spec.wire.secret_headers().into_iter().map(|(name, _)| name).collect();
    if secret.is_empty() {
        key
    } else {
        format!("{key} · secret headers: {}", secret.join(", "))
    }
}

impl From<&Candidate> for CandidateRow {
    fn from(c: &Candidate) -> Self {
        let s = &c.spec;
        let mut conditions = Vec::new();
        if let Some(h) = &s.conditions.hardware {
            conditions.push(h.clone());
        }
        if let Some(f) = &s.conditions.framework {
            conditions.push(f.clone());
        }
        if let Some(q) = &s.conditions.quantization {
            conditions.push(q.clone());
        }
        if let Some(ctx) = s.conditions.context_length {
            conditions.push(format!("ctx {ctx}"));
        }
        let money = |v: f64| crate::domain::format::significant(v);
        let mut price = match (s.pricing.input_per_mtok, s.pricing.output_per_mtok) {
            (None, None) => "—".to_string(),
            (i, o) => format!(
                "in {} / out {} $/Mtok",
                i.map(money).unwrap_or_else(|| "—".into()),
                o.map(money).unwrap_or_else(|| "—".into())
            ),
        };
        if let Some(c) = s.pricing.cached_input_per_mtok {
            price.push_str(&format!("; cached in {}", money(c)));
        }
        if let Some(w) = s.pricing.cache_write_per_mtok {
            price.push_str(&format!("; cache write {}", money(w)));
        }
        let claimed = match &s.claimed {
            Some(f) => {
                let mut t = format!(
                    "{} tok/s, {}",
                    crate::domain::format::significant(f.tokens_per_second),
                    f.caliber
                );
                if let Some(cond) = &f.conditions {
                    t.push_str(", ");
                    t.push_str(cond);
                }
                t
            }
            None => "—".to_string(),
        };
        CandidateRow {
            id: c.id,
            name: s.name.clone(),
            provider: s.provider.as_str(),
            model: s.model.clone(),
            base_url: s.base_url.clone(),
            conditions: if conditions.is_empty() {
                "—".to_string()
            } else {
                conditions.join(" · ")
            },
            price,
            claimed,
            tokenize: match &s.tokenize {
                Some(t) => format!("server: {} {}", t.kind.as_str(), t.path),
                None => "bakeoff (o200k)".to_string(),
            },
            key: key_status(s),
            worker_labels: String::new(),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "candidates/list.html")]
pub struct CandidatesPage {
    pub nav: &'static str,
    pub rows: Vec<CandidateRow>,
    /// Said after an edit moved a candidate to another server and its credentials were dropped.
    pub key_dropped: Option<String>,
    /// Retired candidates: listed apart, each with Restore.
    pub retired: Vec<CandidateRow>,
    /// The confirmation after a save: what was saved, and the candidate's id.
    pub saved: Option<(String, i64)>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct ListQuery {
    key_dropped: Option<i64>,
    /// Set after the form added (`added`) or changed (`saved`) this candidate.
    added: Option<i64>,
    saved: Option<i64>,
}

async fn list(State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<CandidatesPage, WebError> {
    let all = state.store.list_candidates().await?;
    let key_dropped = q
        .key_dropped
        .and_then(|id| all.iter().find(|c| c.id == id))
        .map(|c| super::error::sentence(&candidates::moved_note(c)));
    let saved = [(q.added, "Added"), (q.saved, "Saved")]
        .into_iter()
        .find_map(|(id, verb)| {
            let c = all.iter().find(|c| Some(c.id) == id)?;
            Some((format!("{verb} {}.", c.spec.name), c.id))
        });
    let retired_ids = crate::app::retirement::retired(&state.store, ItemKind::Candidate).await?;
    let labels: std::collections::HashMap<i64, Vec<String>> =
        state.store.candidate_worker_labels().await?.into_iter().collect();
    let row = |c: &Candidate| CandidateRow::from(c).with_worker_labels(labels.get(&c.id).map_or(&[], Vec::as_slice));
    let (retired, rows): (Vec<_>, Vec<_>) = all.iter().partition(|c| retired_ids.contains(&c.id));
    Ok(CandidatesPage {
        nav: "candidates",
        rows: rows.into_iter().map(row).collect(),
        key_dropped,
        retired: retired.into_iter().map(row).collect(),
        saved,
    })
}

#[derive(Template, WebTemplate)]
#[template(path = "candidates/form.html")]
pub struct CandidateFormPage {
    pub nav: &'static str,
    /// Some(id) when editing.
    pub editing: Option<i64>,
    pub action: String,
    pub heading: String,
    pub fieldsets: Vec<Fieldset>,
    /// The key's state on edit ("set", "from env X", "none").
    pub key_status: Option<String>,
    pub has_errors: bool,
}

impl CandidateFormPage {
    fn build(draft: &CandidateDraft, errors: &FieldErrors, editing: Option<(i64, &CandidateSpec)>) -> Self {
        let fieldsets = vec![
            endpoint_fieldset(draft, errors),
            credentials_fieldset(draft, errors, editing.map(|(_, spec)| spec)),
            request_parameters_fieldset(draft, errors),
            token_counting_fieldset(draft, errors),
            declared_conditions_fieldset(draft, errors),
            telemetry_fieldset(draft, errors),
            price_fieldset(draft, errors),
            claimed_figure_fieldset(draft, errors),
            notes_fieldset(draft, errors),
        ];
        let (editing_id, action, heading, key_status) = match editing {
            Some((id, spec)) => (
                Some(id),
                format!("/candidates/{id}/edit"),
                format!("Edit candidate {}", spec.name),
                Some(self::key_status(spec)),
            ),
            None => (None, "/candidates".to_string(), "Add a candidate".to_string(), None),
        };
        CandidateFormPage {
            nav: "candidates",
            editing: editing_id,
            action,
            heading,
            fieldsets,
            key_status,
            has_errors: !errors.is_empty(),
        }
    }
}

/// A form field showing `errors`' message for its name, if any.
fn field(errors: &FieldErrors, name: &'static str, label: &'static str, kind: FieldKind, value: &str) -> FieldView {
    FieldView::new(name, label, kind, value).errors_from(errors)
}

fn endpoint_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    let providers = ProviderKind::ALL
        .iter()
        .map(|p| (p.as_str().to_string(), p.label().to_string()))
        .collect();
    Fieldset {
        legend: "Endpoint",
        note: None,
        fields: vec![
            field(errors, "name", "Name", FieldKind::Text, &draft.name)
                .required()
                .help("Unique; how this candidate is labelled in every table."),
            field(errors, "provider", "Provider", FieldKind::Select, &draft.provider)
                .required()
                .options(providers),
            field(errors, "base_url", "Base URL", FieldKind::Url, &draft.base_url)
                .required()
                .help("Up to and including the API version, e.g. http://127.0.0.1:8000/v1"),
            field(errors, "model", "Model", FieldKind::Text, &draft.model)
                .required()
                .help("The model name the endpoint expects."),
        ],
    }
}

fn credentials_fieldset(draft: &CandidateDraft, errors: &FieldErrors, editing: Option<&CandidateSpec>) -> Fieldset {
    let secret_headers_help = match editing {
        Some(spec) if spec.wire.secrets().next().is_some() => {
            "Secret headers are stored (names: see the candidate page). Leave blank to keep them; type \
             Name: value lines to replace them all. Never shown again."
        }
        _ => {
            "One Name: value a line, e.g. X-Gateway-Token: … Sealed like the API key: never shown, logged or exported."
        }
    };
    let key_help = match editing {
        Some(spec) if spec.api_key.is_some() => {
            "A key is stored. Leave blank to keep it; type a new one to replace it. It is never shown again."
        }
        _ => "Stored write-only: never shown, logged or exported. Prefer an environment variable below.",
    };
    // An editor reads these but may not change them: shown read-only, saying who may.
    let locked = !crate::web::security::may(crate::domain::accounts::Role::Admin);
    Fieldset {
        legend: "Credentials",
        note: Some(if locked {
            "Needs admin: setting, changing or clearing these needs the admin role (a key goes wherever the \
             base URL points). They are shown read-only; the rest of the form is yours to change."
        } else {
            "Setting, changing or clearing these needs the admin role: a key goes wherever the base URL points."
        }),
        fields: vec![
            // The typed key is never echoed back, not even when the form is re-shown.
            field(errors, "api_key", "API key", FieldKind::Password, "").help(key_help),
            field(
                errors,
                "api_key_env",
                "API key environment variable",
                FieldKind::Text,
                &draft.api_key_env,
            )
            .help("Name of a variable in bakeoff's environment holding the key, e.g. BAKEOFF_KEY_OPENAI."),
            field(
                errors,
                "tls_ca_file",
                "Trusted TLS CA file",
                FieldKind::Text,
                &draft.tls_ca_file,
            )
            .help(
                "For an https server whose certificate no public CA signed (in-house, self-signed): an \
                 absolute path, on the machine bakeoff runs on, to a PEM file of the CA certificates to trust \
                 besides the system's. Blank: the system's only.",
            ),
            // Like the key: never echoed back.
            field(errors, "secret_headers", "Secret headers", FieldKind::TextArea, "").help(secret_headers_help),
        ]
        .into_iter()
        .map(|f| if locked { f.readonly() } else { f })
        .collect(),
    }
}

fn request_parameters_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    let reasoning_modes = ReasoningInContent::ALL
        .iter()
        .map(|m| (m.as_str().to_string(), m.label().to_string()))
        .collect();
    Fieldset {
        legend: "Request parameters",
        note: Some("A run's own settings override these."),
        fields: vec![
            field(errors, "max_tokens", "max_tokens", FieldKind::Number, &draft.max_tokens),
            field(
                errors,
                "temperature",
                "Temperature",
                FieldKind::Number,
                &draft.temperature,
            )
            .decimal()
            .help("0–2"),
            field(
                errors,
                "extra_body",
                "Extra request fields (JSON object)",
                FieldKind::TextArea,
                &draft.extra_body,
            )
            .help("Merged into every request body, e.g. {\"top_p\": 0.9}"),
            field(
                errors,
                "reasoning_in_content",
                "Reasoning in the content",
                FieldKind::Select,
                &draft.reasoning_in_content,
            )
            .options(reasoning_modes)
            .help(
                "Servers without a reasoning parser leave a reasoning model's thinking in the answer \
                 (<think>…</think>). Auto recognises a reasoning tag at the start of the content; always \
                 suits servers whose chat template puts <think> in the prompt (the answer then holds only \
                 …</think>); never keeps the content whole.",
            ),
            field(errors, "headers", "Extra headers", FieldKind::TextArea, &draft.headers).help(
                "One Name: value a line, sent with every request (e.g. a gateway's X-Team). Credentials \
                 belong among the secret headers.",
            ),
        ],
    }
}

fn token_counting_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    let tokenize_kinds = std::iter::once(("none".to_string(), "none: bakeoff counts (o200k)".to_string()))
        .chain(
            TokenizeKind::ALL
                .iter()
                .map(|k| (k.as_str().to_string(), k.label().to_string())),
        )
        .collect();
    Fieldset {
        legend: "Token counting",
        note: Some(
            "Servers that send no usage in streams (llama-cpp-python, some llama.cpp and vLLM setups) leave \
             bakeoff to count output tokens itself with o200k, labelled \"tokenizer\". Declare the server's own \
             tokenize endpoint to count them with the served model's tokenizer instead, labelled \
             \"server-tokenizer\": it is called only after the run's measured load has ended, and if it fails \
             the records keep bakeoff's count and the run's events say why.",
        ),
        fields: vec![
            field(
                errors,
                "tokenize_kind",
                "Tokenize endpoint",
                FieldKind::Select,
                &draft.tokenize_kind,
            )
            .options(tokenize_kinds)
            .help("The API shape of the server's endpoint; the count is only read in that shape."),
            field(
                errors,
                "tokenize_path",
                "Tokenize path",
                FieldKind::Text,
                &draft.tokenize_path,
            )
            .help(
                "On the candidate's own server (the base URL's scheme, host and port). Blank: /tokenize \
                 (llama.cpp, vLLM) or /extras/tokenize (llama-cpp-python).",
            ),
        ],
    }
}

fn declared_conditions_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    Fieldset {
        legend: "Declared conditions",
        note: Some("What you know about how it is served; recorded with every figure."),
        fields: vec![
            field(errors, "hardware", "Hardware", FieldKind::Text, &draft.hardware),
            field(
                errors,
                "framework",
                "Serving framework",
                FieldKind::Text,
                &draft.framework,
            ),
            field(
                errors,
                "quantization",
                "Quantization",
                FieldKind::Text,
                &draft.quantization,
            ),
            field(
                errors,
                "context_length",
                "Context length (tokens)",
                FieldKind::Number,
                &draft.context_length,
            ),
        ],
    }
}

fn telemetry_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    Fieldset {
        legend: "Telemetry source",
        note: Some(
            "Scraped during runs (every second by default) and shown on the run's time axis: what the server \
             and its GPUs were doing. A plain GET: no key or header is sent.",
        ),
        fields: vec![
            field(
                errors,
                "metrics_url",
                "Server metrics URL",
                FieldKind::Text,
                &draft.metrics_url,
            )
            .help(
                "The server's Prometheus endpoint (vLLM, SGLang, TGI, llama-server --metrics), usually /metrics \
                 at the server's root; the operability probe says when it answers there. Blank: not scraped.",
            ),
            field(
                errors,
                "gpu_metrics_url",
                "GPU metrics URL",
                FieldKind::Text,
                &draft.gpu_metrics_url,
            )
            .help("A DCGM exporter (e.g. http://gpu-node:9400/metrics) or any Prometheus endpoint with GPU series."),
            field(
                errors,
                "metrics_keep",
                "Also keep these series",
                FieldKind::TextArea,
                &draft.metrics_keep,
            )
            .help(
                "Metric names to keep beyond the ones bakeoff recognises (queue, running, KV cache, preemptions, \
                 prefix cache, server TTFT, GPU), one a line or comma-separated; end a name with * to keep every \
                 series it starts, e.g. vllm:spec_decode_*. Each is charted on the run's telemetry page.",
            ),
        ],
    }
}

fn price_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    Fieldset {
        legend: "Price",
        note: None,
        fields: vec![
            field(
                errors,
                "price_input",
                "Input, $ per million tokens",
                FieldKind::Number,
                &draft.price_input,
            )
            .decimal(),
            field(
                errors,
                "price_output",
                "Output, $ per million tokens",
                FieldKind::Number,
                &draft.price_output,
            )
            .decimal(),
            field(
                errors,
                "price_cached_input",
                "Cached input (prompt-cache reads), $ per million tokens (blank: the input price)",
                FieldKind::Number,
                &draft.price_cached_input,
            )
            .decimal(),
            field(
                errors,
                "price_cache_write",
                "Cache writes (Anthropic), $ per million tokens (blank: the input price)",
                FieldKind::Number,
                &draft.price_cache_write,
            )
            .decimal(),
            field(
                errors,
                "gpu_count",
                "Self-hosted: GPUs (or instances)",
                FieldKind::Number,
                &draft.gpu_count,
            )
            .help("How many GPUs (or instances) the deployment runs on; blank for an API-priced candidate."),
            field(
                errors,
                "gpu_kind",
                "GPU (or instance) kind",
                FieldKind::Text,
                &draft.gpu_kind,
            )
            .help("e.g. H100 80GB, g5.xlarge."),
            field(
                errors,
                "gpu_hour_price",
                "$ per GPU-hour (per instance-hour)",
                FieldKind::Number,
                &draft.gpu_hour_price,
            )
            .decimal()
            .help("With the capacity measured (docs/capacity.md) this gives the cost per 1,000 answers."),
        ],
    }
}

fn claimed_figure_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    Fieldset {
        legend: "Claimed figure",
        note: Some("A vendor's headline number, kept with the caliber it was stated under so it can be checked."),
        fields: vec![
            field(
                errors,
                "claimed_tps",
                "Claimed tok/s",
                FieldKind::Number,
                &draft.claimed_tps,
            )
            .decimal(),
            field(
                errors,
                "claimed_caliber",
                "Caliber",
                FieldKind::Text,
                &draft.claimed_caliber,
            )
            .help("e.g. per-stream decode, aggregate @c=64"),
            field(
                errors,
                "claimed_conditions",
                "Conditions",
                FieldKind::Text,
                &draft.claimed_conditions,
            )
            .help("e.g. H100, batch 1"),
        ],
    }
}

fn notes_fieldset(draft: &CandidateDraft, errors: &FieldErrors) -> Fieldset {
    Fieldset {
        legend: "Notes",
        note: None,
        fields: vec![field(errors, "notes", "Notes", FieldKind::TextArea, &draft.notes)],
    }
}

async fn new_form() -> CandidateFormPage {
    let draft = CandidateDraft {
        provider: ProviderKind::OpenAiChat.as_str().to_string(),
        ..Default::default()
    };
    CandidateFormPage::build(&draft, &FieldErrors::default(), None)
}

async fn create(State(state): State<AppState>, user: CurrentUser, body: FormBody) -> Result<Response, WebError> {
    let draft: CandidateDraft = body.to_draft()?;
    let spec = match draft.validate(None) {
        Ok(spec) => spec,
        Err(errors) => return Ok(invalid(CandidateFormPage::build(&draft, &errors, None))),
    };
    let key_typed = spec.api_key.is_some();
    match candidates::save(&state.store, &user.actor(), Source::Form, None, spec, key_typed).await {
        Ok(saved) => {
            tracing::info!(candidate_id = saved.candidate.id, "candidate created");
            Ok(Redirect::to(&format!("/candidates?added={}", saved.candidate.id)).into_response())
        }
        Err(AppError::Fields(errors)) => Ok(invalid(CandidateFormPage::build(&draft, &errors, None))),
        Err(e) => Err(e.into()),
    }
}

async fn load(state: &AppState, raw: &str) -> Result<Candidate, WebError> {
    let id = parse_id(raw, "candidate")?;
    state
        .store
        .get_candidate(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("candidate #{id}")))
}

async fn edit_form(State(state): State<AppState>, Path(raw): Path<String>) -> Result<CandidateFormPage, WebError> {
    let c = load(&state, &raw).await?;
    Ok(CandidateFormPage::build(
        &CandidateDraft::from_spec(&c.spec),
        &FieldErrors::default(),
        Some((c.id, &c.spec)),
    ))
}

/// A blank key field keeps the stored key, `clear_key` removes it; `app::candidates::save`
/// decides whether the actor may, and drops credentials when the base URL moves.
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(raw): Path<String>,
    body: FormBody,
) -> Result<Response, WebError> {
    let c = load(&state, &raw).await?;
    let draft: CandidateDraft = body.to_draft()?;
    let kept: Option<&Secret> = if body.get("clear_key").is_some() {
        None
    } else {
        c.spec.api_key.as_ref()
    };
    let spec = match draft.validate(kept) {
        // A blank secret-headers field keeps the stored ones (as a blank key field keeps the key).
        Ok(mut spec) if draft.secret_headers.trim().is_empty() && body.get("clear_secret_headers").is_none() => {
            let kept: Vec<_> = c
                .spec
                .wire
                .headers
                .iter()
                .filter(|h| matches!(h.value, HeaderText::Secret(_)))
                .filter(|h| !spec.wire.headers.iter().any(|p| p.name.eq_ignore_ascii_case(&h.name)))
                .cloned()
                .collect();
            spec.wire.headers.extend(kept);
            spec
        }
        Ok(spec) => spec,
        Err(errors) => {
            return Ok(invalid(CandidateFormPage::build(
                &draft,
                &errors,
                Some((c.id, &c.spec)),
            )));
        }
    };
    let key_typed = !draft.api_key.trim().is_empty();
    match candidates::save(&state.store, &user.actor(), Source::Form, Some(&c), spec, key_typed).await {
        Ok(saved) => {
            tracing::info!(
                candidate_id = c.id,
                outcome = saved.outcome.as_str(),
                key_dropped_by_move = saved.credentials_dropped,
                "candidate updated"
            );
            let to = if saved.credentials_dropped {
                format!("/candidates?key_dropped={}", c.id)
            } else {
                format!("/candidates?saved={}", c.id)
            };
            Ok(Redirect::to(&to).into_response())
        }
        Err(AppError::Fields(errors)) => Ok(invalid(CandidateFormPage::build(
            &draft,
            &errors,
            Some((c.id, &c.spec)),
        ))),
        Err(e) => Err(e.into()),
    }
}

/// A form re-shown with its errors: 422, nothing stored.
fn invalid(page: CandidateFormPage) -> Response {
    (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_status_never_contains_the_key() {
        let mut spec = CandidateDraft {
            name: "a".into(),
            provider: "openai-chat".into(),
            base_url: "http://h/v1".into(),
            model: "m".into(),
            api_key: "sk-secret-123".into(),
            ..Default::default()
        }
        .validate(None)
        .unwrap();
        assert_eq!(key_status(&spec), "set · last 4 -123");
        spec.api_key = Some(Secret::new("short"));
        assert_eq!(key_status(&spec), "set");
        spec.api_key = None;
        spec.api_key_env = Some("OPENAI_API_KEY".into());
        assert_eq!(key_status(&spec), "from env OPENAI_API_KEY");
        spec.api_key_env = None;
        assert_eq!(key_status(&spec), "none");
    }
}
