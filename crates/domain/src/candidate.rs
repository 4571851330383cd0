//! Candidates: one model behind one endpoint, with what the team declares about it.
use serde::{Deserialize, Serialize};

use super::Timestamp;
use super::reasoning::ReasoningInContent;
use super::validation::{FieldErrors, MAX_FIELD_CHARS, name, optional_number, optional_text, required_text};

/// The wire protocol bakeoff speaks to a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// OpenAI-compatible `POST {base}/chat/completions`.
    OpenAiChat,
    /// OpenAI-compatible `POST {base}/completions` (raw prompt).
    OpenAiCompletions,
    /// Anthropic Messages API, `POST {base}/messages`.
    Anthropic,
    /// OpenAI's Responses API, `POST {base}/responses`.
    OpenAiResponses,
    /// Azure OpenAI chat completions: the base URL is a deployment's
    /// (`https://{resource}.openai.azure.com/openai/deployments/{deployment}?api-version=…`),
    /// the key goes in the `api-key` header.
    AzureOpenAi,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 5] = [
        ProviderKind::OpenAiChat,
        ProviderKind::OpenAiCompletions,
        ProviderKind::Anthropic,
        ProviderKind::OpenAiResponses,
        ProviderKind::AzureOpenAi,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            ProviderKind::OpenAiChat => "openai-chat",
            ProviderKind::OpenAiCompletions => "openai-completions",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAiResponses => "openai-responses",
            ProviderKind::AzureOpenAi => "azure-openai",
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            ProviderKind::OpenAiChat => "OpenAI-compatible chat completions",
            ProviderKind::OpenAiCompletions => "OpenAI-compatible completions",
            ProviderKind::Anthropic => "Anthropic Messages",
            ProviderKind::OpenAiResponses => "OpenAI Responses API",
            ProviderKind::AzureOpenAi => "Azure OpenAI chat completions (deployment URL, api-key header)",
        }
    }

    pub fn parse(s: &str) -> Option<ProviderKind> {
        ProviderKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// An API key. Never displayed, logged, serialized or exported: `Debug` redacts it and it
/// implements neither `Display` nor `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The only way to read the key: when building the request header (and sealing it).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The key's last four characters, to tell keys apart ("set · last 4 …c1e5"); None for a
    /// key shorter than 12 characters, where four would give too much of it away.
    pub fn last4(&self) -> Option<String> {
        let n = self.0.chars().count();
        (n >= 12).then(|| self.0.chars().skip(n - 4).collect())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(****)")
    }
}

/// Serving conditions the team declares; they become part of every figure's provenance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    pub hardware: Option<String>,
    pub framework: Option<String>,
    pub quantization: Option<String>,
    pub context_length: Option<u32>,
}

/// Price in the candidate's currency (USD assumed) per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pricing {
    pub input_per_mtok: Option<f64>,
    pub output_per_mtok: Option<f64>,
    /// Prompt tokens read from the server's prompt cache (OpenAI cached input, Anthropic cache
    /// reads); unset: they cost `input_per_mtok` (`cost::prompt_cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
    /// Prompt tokens written to the cache (Anthropic cache writes); unset: `input_per_mtok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
}

/// A vendor's headline figure with the caliber and conditions it was stated under,
/// e.g. 2158 tok/s, "per-stream decode", "H100, batch 1".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedFigure {
    pub tokens_per_second: f64,
    pub caliber: String,
    pub conditions: Option<String>,
}

/// The API shape of a server's tokenize endpoint: each kind is one real server's request and
/// response, so an answer in another shape is an error that names what was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenizeKind {
    /// llama.cpp's own server: `POST /tokenize {"content": …}` → `{"tokens": […]}`.
    LlamaCpp,
    /// vLLM: `POST /tokenize {"model": …, "prompt": …}` → `{"count": n, "tokens": […]}`.
    Vllm,
    /// llama-cpp-python's server: `POST /extras/tokenize {"input": …, "model": …}` → `{"tokens": […]}`.
    LlamaCppPython,
}

impl TokenizeKind {
    pub const ALL: [TokenizeKind; 3] = [TokenizeKind::LlamaCpp, TokenizeKind::Vllm, TokenizeKind::LlamaCppPython];

    pub fn as_str(&self) -> &'static str {
        match self {
            TokenizeKind::LlamaCpp => "llama-cpp",
            TokenizeKind::Vllm => "vllm",
            TokenizeKind::LlamaCppPython => "llama-cpp-python",
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            TokenizeKind::LlamaCpp => "llama.cpp server: POST /tokenize {\"content\"}",
            TokenizeKind::Vllm => "vLLM: POST /tokenize {\"model\", \"prompt\"}",
            TokenizeKind::LlamaCppPython => "llama-cpp-python: POST /extras/tokenize {\"input\", \"model\"}",
        }
    }

    pub fn parse(s: &str) -> Option<TokenizeKind> {
        TokenizeKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Where this kind of server answers, on its own origin.
    pub fn default_path(&self) -> &'static str {
        match self {
            TokenizeKind::LlamaCpp | TokenizeKind::Vllm => "/tokenize",
            TokenizeKind::LlamaCppPython => "/extras/tokenize",
        }
    }

    /// The request and response this kind expects, for error messages.
    pub fn shape(&self) -> &'static str {
        match self {
            TokenizeKind::LlamaCpp => "POST {\"content\": text} answered by {\"tokens\": [...]}",
            TokenizeKind::Vllm => "POST {\"model\", \"prompt\": text} answered by {\"count\": n, \"tokens\": [...]}",
            TokenizeKind::LlamaCppPython => "POST {\"input\": text, \"model\"} answered by {\"tokens\": [...]}",
        }
    }
}

/// A tokenize endpoint the candidate's server offers, used to count output tokens with the served
/// model's own tokenizer when a stream carries no `usage`. It lives on the candidate's own server
/// (the base URL's scheme, host and port), so the count is the served model's and the key is
/// never sent anywhere else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizeEndpoint {
    pub kind: TokenizeKind,
    /// Path on the candidate's server, e.g. `/tokenize`.
    pub path: String,
}

impl TokenizeEndpoint {
    /// The endpoint's URL on the server of `base_url`.
    pub fn url(&self, base_url: &str) -> Option<String> {
        let base = url::Url::parse(base_url).ok()?;
        Some(format!("{}{}", base.origin().ascii_serialization(), self.path))
    }

    /// Parses a declaration as typed (kind, and a path or a URL on the server of `base_url`;
    /// a blank path is the kind's usual one). `None` when no kind is chosen. Problems are added
    /// to `e` under `tokenize_kind` / `tokenize_path`. `base_url` is None when it is itself
    /// invalid (its own error is reported; the origin is then not checked).
    pub fn parse(e: &mut FieldErrors, kind: &str, path: &str, base_url: Option<&str>) -> Option<TokenizeEndpoint> {
        let (kind, path) = (kind.trim(), path.trim());
        let kind = match kind {
            "" | "none" => {
                if !path.is_empty() {
                    e.add(
                        "tokenize_kind",
                        "choose the kind of server the tokenize path belongs to, or clear the path",
                    );
                }
                return None;
            }
            raw => match TokenizeKind::parse(raw) {
                Some(k) => k,
                None => {
                    e.add(
                        "tokenize_kind",
                        "choose one of: none, llama-cpp, vllm, llama-cpp-python",
                    );
                    return None;
                }
            },
        };
        if path.is_empty() {
            return Some(TokenizeEndpoint {
                kind,
                path: kind.default_path().to_string(),
            });
        }
        if path.chars().count() > 300 {
            e.add("tokenize_path", "is too long (at most 300 characters)");
            return None;
        }
        let path = if path.starts_with("http://") || path.starts_with("https://") {
            let Ok(u) = url::Url::parse(path) else {
                e.add("tokenize_path", "is not a valid URL; give a path such as /tokenize");
                return None;
            };
            let base = base_url.and_then(|b| url::Url::parse(b).ok());
            if let Some(base) = base
                && base.origin() != u.origin()
            {
                e.add(
                    "tokenize_path",
                    format!(
                        "must be on the candidate's own server ({}), so tokens are counted by the served model's \
                         tokenizer and the key goes nowhere else",
                        base.origin().ascii_serialization()
                    ),
                );
                return None;
            }
            if u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() || u.password().is_some() {
                e.add("tokenize_path", "must not contain a query, fragment or credentials");
                return None;
            }
            u.path().to_string()
        } else {
            path.to_string()
        };
        if !path.starts_with('/') || path.contains(['?', '#', ' ']) || path.contains("//") {
            e.add(
                "tokenize_path",
                format!(
                    "must be a path on the candidate's server such as {}, without query or spaces",
                    kind.default_path()
                ),
            );
            return None;
        }
        Some(TokenizeEndpoint { kind, path })
    }
}

/// Everything about a candidate that the team enters; validated on construction.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateSpec {
    pub name: String,
    pub provider: ProviderKind,
    /// Base URL up to and including the API version, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    pub model: String,
    /// Stored key, write-only from the UI.
    pub api_key: Option<Secret>,
    /// Name of an environment variable holding the key (preferred over storing it).
    pub api_key_env: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// Extra JSON body fields merged into every request (e.g. `{"top_p": 0.9}`).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    pub conditions: Conditions,
    pub pricing: Pricing,
    pub claimed: Option<ClaimedFigure>,
    pub notes: Option<String>,
    /// Where to count output tokens with the served model's tokenizer when streams carry no
    /// `usage` (None: bakeoff's own o200k count, labelled `tokenizer`).
    pub tokenize: Option<TokenizeEndpoint>,
    /// A PEM file of CA certificates trusted for this candidate's `https` besides the system's
    /// (an in-house server with a self-signed certificate). A path on the machine bakeoff runs on.
    pub tls_ca_file: Option<String>,
    /// How bakeoff talks to the server beyond its provider kind.
    pub wire: WireOptions,
    /// Telemetry source (`telemetry::source`): the server's Prometheus endpoint, scraped during
    /// runs (None: not scraped; the operability probe offers the usual `/metrics` when it answers)…
    pub metrics_url: Option<String>,
    /// …and a GPU exporter's (DCGM exporter or any Prometheus endpoint with GPU series).
    pub gpu_metrics_url: Option<String>,
    /// Series kept from those scrapes beyond the catalogue's (`telemetry::source::keep_list`):
    /// metric family names, or prefixes ending in `*`; charted on the run's telemetry page.
    pub metrics_keep: Vec<String>,
    /// Self-hosted cost: GPUs (or instances) the deployment runs on…
    pub gpu_count: Option<u32>,
    /// …of which kind ("H100 80GB", "g5.xlarge")…
    pub gpu_kind: Option<String>,
    /// …at this price, USD per GPU-hour (per instance-hour): with the capacity measured, the
    /// cost per 1,000 answers (`domain::capacity::cost_at_capacity`).
    pub gpu_hour_price: Option<f64>,
}

/// How bakeoff talks to a candidate's server beyond its provider kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireOptions {
    /// Where the server puts reasoning that has no field of its own (`domain::reasoning`).
    pub reasoning_in_content: ReasoningInContent,
    /// Headers sent with every request (a gateway's routing or team header, a second token).
    pub headers: Vec<CustomHeader>,
}

impl WireOptions {
    /// The secret headers' values, to redact from anything shown.
    pub fn secrets(&self) -> impl Iterator<Item = &Secret> {
        self.headers.iter().filter_map(|h| match &h.value {
            HeaderText::Secret(s) => Some(s),
            HeaderText::Plain(_) => None,
        })
    }

    /// The secret headers as (name, value) pairs, to tell whether they changed.
    pub fn secret_headers(&self) -> Vec<(&str, &Secret)> {
        self.headers
            .iter()
            .filter_map(|h| match &h.value {
                HeaderText::Secret(s) => Some((h.name.as_str(), s)),
                HeaderText::Plain(_) => None,
            })
            .collect()
    }
}

/// A header sent with every request to a candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomHeader {
    pub name: String,
    pub value: HeaderText,
}

/// A header's value: shown like any setting, or a secret (sealed at rest, never shown, logged
/// or exported: a credential like the API key).
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderText {
    Plain(String),
    Secret(Secret),
}

impl HeaderText {
    /// The value to send.
    pub fn expose(&self) -> &str {
        match self {
            HeaderText::Plain(v) => v,
            HeaderText::Secret(s) => s.expose(),
        }
    }
}

/// Headers no candidate may set: HTTP's own framing and routing (hop-by-hop, `Host`,
/// `Content-Length`), and what bakeoff's measurement states itself.
const REFUSED_HEADERS: [&str; 13] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "content-type",
    "accept",
    "user-agent",
];

/// Names whose values are credentials: refused as plain headers (they belong among the secret
/// ones, sealed and never shown).
fn looks_secret(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["auth", "key", "token", "secret", "cookie", "password", "signature"]
        .iter()
        .any(|w| n.contains(w))
}

/// Parses `Name: value` lines (blank lines skipped) into headers, adding problems to `e` under
/// `field`; `secret` marks every value a secret (and never repeats one in a message).
pub fn parse_header_lines(e: &mut FieldErrors, field: &str, text: &str, secret: bool) -> Vec<CustomHeader> {
    let mut out: Vec<CustomHeader> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("line {}", i + 1);
        let Some((name, value)) = line.split_once(':') else {
            e.add(field, format!("{at}: write each header as Name: value"));
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || name.len() > 100 || !name.chars().all(tchar) {
            e.add(
                field,
                format!("{at}: {name:?} is not a header name (letters, digits, - and _)"),
            );
            continue;
        }
        if REFUSED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            e.add(
                field,
                format!("{at}: {name} is set by bakeoff itself (HTTP framing or the measured request)"),
            );
            continue;
        }
        if !secret && looks_secret(name) {
            e.add(
                field,
                format!("{at}: {name} looks like a credential; put it among the secret headers"),
            );
            continue;
        }
        if value.is_empty() || value.len() > 4_000 || value.chars().any(|c| c.is_control() && c != '\t') {
            let what = if secret { "its value" } else { value };
            e.add(
                field,
                format!("{at}: {name}: {what:?} is not a header value (1 to 4000 characters, no control characters)"),
            );
            continue;
        }
        if !value.is_ascii() {
            e.add(field, format!("{at}: {name}: a header value must be ASCII"));
            continue;
        }
        if out.iter().any(|h| h.name.eq_ignore_ascii_case(name)) {
            e.add(field, format!("{at}: {name} is given twice"));
            continue;
        }
        out.push(CustomHeader {
            name: name.to_string(),
            value: if secret {
                HeaderText::Secret(Secret::new(value))
            } else {
                HeaderText::Plain(value.to_string())
            },
        });
    }
    if out.len() > 20 {
        e.add(field, "at most 20 headers");
    }
    out
}

impl CandidateSpec {
    /// An OpenAI-compatible chat candidate with nothing else declared: no key, no per-candidate
    /// overrides, no conditions, pricing, claim or tokenizer endpoint. Callers that need more set
    /// those fields with struct update syntax (`CandidateSpec { pricing, ..CandidateSpec::openai_chat(…) }`).
    pub fn openai_chat(name: impl Into<String>, base_url: impl Into<String>, model: impl Into<String>) -> Self {
        CandidateSpec {
            name: name.into(),
            provider: ProviderKind::OpenAiChat,
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            api_key_env: None,
            max_tokens: None,
            temperature: None,
            extra_body: serde_json::Map::new(),
            conditions: Conditions::default(),
            pricing: Pricing::default(),
            claimed: None,
            notes: None,
            tokenize: None,
            tls_ca_file: None,
            wire: WireOptions::default(),
            metrics_url: None,
            gpu_metrics_url: None,
            metrics_keep: Vec::new(),
            gpu_count: None,
            gpu_kind: None,
            gpu_hour_price: None,
        }
    }

    /// The key to send, from the stored value or the named environment variable (only one
    /// that [`key_env_allowed`] lets a candidate read, whatever was stored).
    pub fn resolve_api_key(&self) -> Option<Secret> {
        if let Some(key) = &self.api_key {
            return Some(key.clone());
        }
        self.api_key_env
            .as_ref()
            .filter(|var| key_env_allowed(var))
            .and_then(|var| std::env::var(var).ok())
            .map(Secret::new)
    }
}

/// `scheme://host:port` of a base URL (None when it does not parse): the server a key is sent to.
pub fn origin_of(base_url: &str) -> Option<String> {
    url::Url::parse(base_url).ok().map(|u| u.origin().ascii_serialization())
}

impl CandidateSpec {
    /// Applies the rule that a key follows its server: when `self` (the edited spec) points at
    /// another origin than `before`, a stored key that was only kept (not typed anew) is dropped,
    /// and so is a key variable left as it was. Returns whether anything was dropped.
    pub fn drop_credentials_if_moved(&mut self, before: &CandidateSpec, key_typed: bool) -> bool {
        if origin_of(&self.base_url) == origin_of(&before.base_url) {
            return false;
        }
        let mut dropped = false;
        if !key_typed && self.api_key.is_some() {
            self.api_key = None;
            dropped = true;
        }
        if self.api_key_env.is_some() && self.api_key_env == before.api_key_env {
            self.api_key_env = None;
            dropped = true;
        }
        // Secret headers kept as they were follow the key's rule.
        let kept_secrets =
            !self.wire.secret_headers().is_empty() && self.wire.secret_headers() == before.wire.secret_headers();
        if kept_secrets {
            self.wire.headers.retain(|h| matches!(h.value, HeaderText::Plain(_)));
            dropped = true;
        }
        dropped
    }
}

/// Every environment variable a candidate may take its key from starts with this, so a
/// candidate can never send the server's other variables (`HOME`, `DATABASE_URL`…) anywhere.
pub const KEY_ENV_PREFIX: &str = "BAKEOFF_KEY_";

/// Further variable names the admin allowed at start-up (`--allow-key-env`).
static EXTRA_KEY_ENVS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Why `name` is one of the server's own variables, which no candidate may ever send anywhere
/// (not even when allowed by name): its configuration and secrets (`BAKEOFF_…` other than
/// `BAKEOFF_KEY_…`: the secret key, the admin and user passwords, the database URL), and its
/// database's (`DATABASE_URL`, libpq's `PG…`).
pub fn server_own_variable(name: &str) -> Option<&'static str> {
    if name.starts_with("BAKEOFF_") && !name.starts_with(KEY_ENV_PREFIX) {
        Some("bakeoff's own settings and secrets (BAKEOFF_SECRET_KEY, BAKEOFF_ADMIN_PASSWORD, BAKEOFF_DATABASE_URL, …)")
    } else if name == "DATABASE_URL" || name.starts_with("PG") {
        Some("the database's connection settings and password")
    } else {
        None
    }
}

/// Sets the names allowed besides `BAKEOFF_KEY_…`; once per process (later calls are ignored).
/// Refuses (and allows nothing) when a name is one of the server's own variables.
pub fn allow_key_envs(names: &[String]) -> Result<(), String> {
    let names: Vec<String> = names
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    if let Some((name, what)) = names.iter().find_map(|n| server_own_variable(n).map(|w| (n, w))) {
        return Err(format!(
            "--allow-key-env {name}: that is one of {what}; a candidate may never send it to a server. Name a \
             variable that holds only a model API key (BAKEOFF_KEY_… needs no allowing)"
        ));
    }
    let _ = EXTRA_KEY_ENVS.set(names);
    Ok(())
}

/// Whether a candidate may read its key from the variable `name`: one starting with
/// `BAKEOFF_KEY_`, or one allowed at start-up, and never one of the server's own.
pub fn key_env_allowed(name: &str) -> bool {
    if server_own_variable(name).is_some() {
        return false;
    }
    let extra = EXTRA_KEY_ENVS.get().is_some_and(|list| list.iter().any(|n| n == name));
    extra || (name.len() > KEY_ENV_PREFIX.len() && name.starts_with(KEY_ENV_PREFIX))
}

/// The origins candidates may point at, when the deployment restricts them
/// (`--candidate-origins`); unset: any.
static CANDIDATE_ORIGINS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Restricts the servers candidates may name (and bakeoff may send requests to: runs, probes,
/// soaks, tokenizers, `/models`) to these origins (`scheme://host[:port]`); once per process.
/// Each must be an http(s) origin; an empty list restricts nothing.
pub fn restrict_candidate_origins(origins: &[String]) -> Result<(), String> {
    let mut list = Vec::new();
    for raw in origins.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        let url = url::Url::parse(raw).map_err(|e| format!("--candidate-origins {raw:?}: not a URL ({e})"))?;
        if url.scheme() != "http" && url.scheme() != "https" || url.host_str().is_none() {
            return Err(format!(
                "--candidate-origins {raw:?}: give an origin such as https://api.openai.com or http://10.0.0.5:8000"
            ));
        }
        list.push(url.origin().ascii_serialization());
    }
    if !list.is_empty() {
        let _ = CANDIDATE_ORIGINS.set(list);
    }
    Ok(())
}

/// None when a candidate may point at `base_url` (no allow-list, or its origin is on it), else
/// why not (for the `base_url` field, or a refused request).
pub fn origin_refused(base_url: &str) -> Option<String> {
    let allowed = CANDIDATE_ORIGINS.get()?;
    let origin = origin_of(base_url).unwrap_or_default();
    (!allowed.contains(&origin)).then(|| {
        format!(
            "points at {origin}, which is not one of the servers this deployment allows candidates to use \
             (--candidate-origins: {})",
            allowed.join(", ")
        )
    })
}

/// A stored candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: i64,
    pub spec: CandidateSpec,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The candidate form as typed: every field a string, exactly as submitted.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CandidateDraft {
    pub name: String,
    pub provider: String,
    pub base_url: String,
    pub model: String,
    pub api_key: String,
    pub api_key_env: String,
    pub max_tokens: String,
    pub temperature: String,
    pub extra_body: String,
    pub hardware: String,
    pub framework: String,
    pub quantization: String,
    pub context_length: String,
    pub price_input: String,
    pub price_output: String,
    /// Cached input (prompt-cache reads), $ per million tokens; blank: the input price.
    pub price_cached_input: String,
    /// Cache writes (Anthropic), $ per million tokens; blank: the input price.
    pub price_cache_write: String,
    pub claimed_tps: String,
    pub claimed_caliber: String,
    pub claimed_conditions: String,
    pub notes: String,
    /// `none`/blank, or a `TokenizeKind`.
    pub tokenize_kind: String,
    /// A path (or a URL on the candidate's server); blank: the kind's usual path.
    pub tokenize_path: String,
    /// An absolute path to a PEM file of CA certificates to trust besides the system's; blank: none.
    pub tls_ca_file: String,
    /// GPUs (or instances) of a self-hosted deployment; blank: not stated.
    pub gpu_count: String,
    pub gpu_kind: String,
    /// USD per GPU-hour (per instance-hour); blank: not stated.
    pub gpu_hour_price: String,
    /// `auto` (or blank), `always` or `never`: reasoning in the content.
    pub reasoning_in_content: String,
    /// Plain headers, one `Name: value` a line.
    pub headers: String,
    /// Secret headers, one `Name: value` a line; write-only (blank on an edit keeps them).
    pub secret_headers: String,
    /// The server's Prometheus endpoint; blank: none.
    pub metrics_url: String,
    /// A GPU exporter's Prometheus endpoint; blank: none.
    pub gpu_metrics_url: String,
    /// Extra series to keep from the scrapes: names or `prefix*`, separated by commas or lines.
    pub metrics_keep: String,
}

impl CandidateDraft {
    /// The form pre-filled from a stored candidate. The key is never put back in a page.
    pub fn from_spec(spec: &CandidateSpec) -> Self {
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let num = |v: Option<f64>| v.map(|n| n.to_string()).unwrap_or_default();
        CandidateDraft {
            name: spec.name.clone(),
            provider: spec.provider.as_str().to_string(),
            base_url: spec.base_url.clone(),
            model: spec.model.clone(),
            api_key: String::new(),
            api_key_env: opt(&spec.api_key_env),
            max_tokens: spec.max_tokens.map(|n| n.to_string()).unwrap_or_default(),
            temperature: num(spec.temperature),
            extra_body: if spec.extra_body.is_empty() {
                String::new()
            } else {
                serde_json::Value::Object(spec.extra_body.clone()).to_string()
            },
            hardware: opt(&spec.conditions.hardware),
            framework: opt(&spec.conditions.framework),
            quantization: opt(&spec.conditions.quantization),
            context_length: spec
                .conditions
                .context_length
                .map(|n| n.to_string())
                .unwrap_or_default(),
            price_input: num(spec.pricing.input_per_mtok),
            price_output: num(spec.pricing.output_per_mtok),
            price_cached_input: num(spec.pricing.cached_input_per_mtok),
            price_cache_write: num(spec.pricing.cache_write_per_mtok),
            claimed_tps: num(spec.claimed.as_ref().map(|c| c.tokens_per_second)),
            claimed_caliber: spec.claimed.as_ref().map(|c| c.caliber.clone()).unwrap_or_default(),
            claimed_conditions: spec
                .claimed
                .as_ref()
                .and_then(|c| c.conditions.clone())
                .unwrap_or_default(),
            notes: opt(&spec.notes),
            tokenize_kind: spec
                .tokenize
                .as_ref()
                .map(|t| t.kind.as_str().to_string())
                .unwrap_or_default(),
            tokenize_path: spec.tokenize.as_ref().map(|t| t.path.clone()).unwrap_or_default(),
            tls_ca_file: opt(&spec.tls_ca_file),
            gpu_count: spec.gpu_count.map(|n| n.to_string()).unwrap_or_default(),
            gpu_kind: opt(&spec.gpu_kind),
            gpu_hour_price: num(spec.gpu_hour_price),
            reasoning_in_content: spec.wire.reasoning_in_content.as_str().to_string(),
            headers: spec
                .wire
                .headers
                .iter()
                .filter_map(|h| match &h.value {
                    HeaderText::Plain(v) => Some(format!("{}: {v}\n", h.name)),
                    HeaderText::Secret(_) => None,
                })
                .collect(),
            // Secret headers are never put back in a page.
            secret_headers: String::new(),
            metrics_url: opt(&spec.metrics_url),
            gpu_metrics_url: opt(&spec.gpu_metrics_url),
            metrics_keep: spec.metrics_keep.join("\n"),
        }
    }

    /// Validates every field, collecting all problems at once. `existing_key` is kept when the
    /// key field is left blank on an edit.
    pub fn validate(&self, existing_key: Option<&Secret>) -> Result<CandidateSpec, FieldErrors> {
        let mut e = FieldErrors::default();
        let name = name(&mut e, "name", &self.name);
        let provider = match ProviderKind::parse(self.provider.trim()) {
            Some(p) => Some(p),
            None => {
                e.add(
                    "provider",
                    "choose one of: openai-chat, openai-completions, anthropic, openai-responses, azure-openai",
                );
                None
            }
        };
        let azure = provider == Some(ProviderKind::AzureOpenAi);
        let base_url = required_text(&mut e, "base_url", &self.base_url, 2_000)
            .and_then(|raw| validate_base_url(&mut e, &raw, azure));
        if let Some(why) = base_url.as_deref().and_then(origin_refused) {
            e.add("base_url", why);
        }
        let model = required_text(&mut e, "model", &self.model, 300);
        let api_key = optional_text(&mut e, "api_key", &self.api_key, 1_000).map(Secret::new);
        let api_key_env = key_env(&mut e, &self.api_key_env);
        let max_tokens = optional_number::<u32>(&mut e, "max_tokens", &self.max_tokens, 1, 1_000_000);
        let temperature = optional_number::<f64>(&mut e, "temperature", &self.temperature, 0.0, 2.0);
        let extra_body = extra_body(&mut e, &self.extra_body);
        let conditions = Conditions {
            hardware: optional_text(&mut e, "hardware", &self.hardware, 500),
            framework: optional_text(&mut e, "framework", &self.framework, 500),
            quantization: optional_text(&mut e, "quantization", &self.quantization, 200),
            context_length: optional_number::<u32>(&mut e, "context_length", &self.context_length, 1, 100_000_000),
        };
        let pricing = Pricing {
            input_per_mtok: optional_number::<f64>(&mut e, "price_input", &self.price_input, 0.0, 1e6),
            output_per_mtok: optional_number::<f64>(&mut e, "price_output", &self.price_output, 0.0, 1e6),
            cached_input_per_mtok: optional_number::<f64>(
                &mut e,
                "price_cached_input",
                &self.price_cached_input,
                0.0,
                1e6,
            ),
            cache_write_per_mtok: optional_number::<f64>(
                &mut e,
                "price_cache_write",
                &self.price_cache_write,
                0.0,
                1e6,
            ),
        };
        let claimed_tps = optional_number::<f64>(&mut e, "claimed_tps", &self.claimed_tps, 0.0, 1e9);
        let claimed_caliber = optional_text(&mut e, "claimed_caliber", &self.claimed_caliber, 500);
        let claimed_conditions = optional_text(&mut e, "claimed_conditions", &self.claimed_conditions, 1_000);
        let claimed = match (claimed_tps, claimed_caliber) {
            (Some(tps), Some(caliber)) => Some(ClaimedFigure {
                tokens_per_second: tps,
                caliber,
                conditions: claimed_conditions,
            }),
            (Some(_), None) => {
                e.add(
                    "claimed_caliber",
                    "a claimed figure needs its caliber (e.g. per-stream decode, aggregate @c=64)",
                );
                None
            }
            _ => None,
        };
        let notes = optional_text(&mut e, "notes", &self.notes, MAX_FIELD_CHARS);
        let tokenize = TokenizeEndpoint::parse(&mut e, &self.tokenize_kind, &self.tokenize_path, base_url.as_deref());
        let tls_ca_file = tls_ca_file(&mut e, &self.tls_ca_file);
        let gpu_count = optional_number::<u32>(&mut e, "gpu_count", &self.gpu_count, 1, 100_000);
        let gpu_kind = optional_text(&mut e, "gpu_kind", &self.gpu_kind, 200);
        let gpu_hour_price = optional_number::<f64>(&mut e, "gpu_hour_price", &self.gpu_hour_price, 0.0, 1e6);
        let mut headers = parse_header_lines(&mut e, "headers", &self.headers, false);
        for h in parse_header_lines(&mut e, "secret_headers", &self.secret_headers, true) {
            if headers.iter().any(|p| p.name.eq_ignore_ascii_case(&h.name)) {
                e.add("secret_headers", format!("{} is also a plain header", h.name));
            } else {
                headers.push(h);
            }
        }
        let metrics_url = super::telemetry::source::endpoint(&mut e, "metrics_url", &self.metrics_url);
        let gpu_metrics_url = super::telemetry::source::endpoint(&mut e, "gpu_metrics_url", &self.gpu_metrics_url);
        let metrics_keep = super::telemetry::source::keep_list(&mut e, "metrics_keep", &self.metrics_keep);
        let reasoning_in_content = ReasoningInContent::parse(&self.reasoning_in_content).unwrap_or_else(|| {
            e.add("reasoning_in_content", "choose one of: auto, always, never");
            ReasoningInContent::Auto
        });
        if !e.is_empty() {
            return Err(e);
        }
        Ok(CandidateSpec {
            name: name.unwrap_or_default(),
            provider: provider.unwrap_or(ProviderKind::OpenAiChat),
            base_url: base_url.unwrap_or_default(),
            model: model.unwrap_or_default(),
            api_key: api_key.or_else(|| existing_key.cloned()),
            api_key_env,
            max_tokens,
            temperature,
            extra_body,
            conditions,
            pricing,
            claimed,
            notes,
            tokenize,
            tls_ca_file,
            wire: WireOptions {
                reasoning_in_content,
                headers,
            },
            metrics_url,
            gpu_metrics_url,
            metrics_keep,
            gpu_count,
            gpu_kind,
            gpu_hour_price,
        })
    }
}

/// A CA file's path: absolute, as the server reads it (whether it is there and holds
/// certificates is checked when a run, probe or measurement first connects).
fn tls_ca_file(e: &mut FieldErrors, raw: &str) -> Option<String> {
    let path = raw.trim();
    if path.is_empty() {
        return None;
    }
    if path.chars().count() > 1000 {
        e.add("tls_ca_file", "is too long (at most 1000 characters)");
    } else if !path.starts_with('/') {
        e.add(
            "tls_ca_file",
            "must be an absolute path (starting with /) to a PEM file of CA certificates",
        );
    } else if path.chars().any(char::is_control) {
        e.add("tls_ca_file", "must not contain control characters");
    } else {
        return Some(path.to_string());
    }
    None
}

/// The key variable's name: a variable name bakeoff may read (its prefix, or one the admin allowed).
fn key_env(e: &mut FieldErrors, raw: &str) -> Option<String> {
    let api_key_env = optional_text(e, "api_key_env", raw, 200);
    if let Some(var) = &api_key_env {
        if !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            e.add(
                "api_key_env",
                "must be an environment variable name (letters, digits, _)",
            );
        } else if !key_env_allowed(var) {
            e.add(
                "api_key_env",
                format!(
                    "may only name a variable starting with {KEY_ENV_PREFIX} (e.g. {KEY_ENV_PREFIX}OPENAI), or one \
                     the admin allowed when starting the server (--allow-key-env)"
                ),
            );
        }
    }
    api_key_env
}

/// Extra request fields: a JSON object (blank: none).
fn extra_body(e: &mut FieldErrors, raw: &str) -> serde_json::Map<String, serde_json::Value> {
    match raw.trim() {
        "" => serde_json::Map::new(),
        raw if raw.len() > MAX_FIELD_CHARS => {
            e.add(
                "extra_body",
                format!("is too long (at most {MAX_FIELD_CHARS} characters)"),
            );
            serde_json::Map::new()
        }
        raw => match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) => {
                e.add("extra_body", "must be a JSON object, e.g. {\"top_p\": 0.9}");
                serde_json::Map::new()
            }
            Err(err) => {
                e.add("extra_body", format!("is not valid JSON: {err}"));
                serde_json::Map::new()
            }
        },
    }
}

/// An http(s) URL without credentials, query or fragment; the trailing slash is dropped. An
/// Azure OpenAI URL may carry its `api-version` (the one query it takes), and a pasted
/// `…/chat/completions` is cut back to the deployment.
fn validate_base_url(e: &mut FieldErrors, raw: &str, azure: bool) -> Option<String> {
    if azure {
        return validate_azure_url(e, raw);
    }
    match url::Url::parse(raw) {
        Ok(u) if u.scheme() != "http" && u.scheme() != "https" => {
            e.add("base_url", "must start with http:// or https://");
            None
        }
        Ok(u) if u.host_str().is_none() => {
            e.add("base_url", "must name a host");
            None
        }
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            e.add("base_url", "must not contain credentials; use the API key field");
            None
        }
        Ok(u) if u.query().is_some() || u.fragment().is_some() => {
            e.add("base_url", "must not contain a query or fragment");
            None
        }
        Ok(u) => Some(u.as_str().trim_end_matches('/').to_string()),
        Err(err) => {
            e.add(
                "base_url",
                format!("is not a valid URL ({err}), e.g. http://127.0.0.1:8000/v1"),
            );
            None
        }
    }
}

/// An Azure OpenAI deployment URL: `https://{resource}.openai.azure.com/openai/deployments/{d}`
/// with `?api-version=…` (required there), or the v1 API's `…/openai/v1` (no version).
fn validate_azure_url(e: &mut FieldErrors, raw: &str) -> Option<String> {
    let mut u = match url::Url::parse(raw) {
        Ok(u) if (u.scheme() == "http" || u.scheme() == "https") && u.host_str().is_some() => u,
        _ => {
            e.add(
                "base_url",
                "must be the deployment's URL, e.g. https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=2024-10-21",
            );
            return None;
        }
    };
    if !u.username().is_empty() || u.password().is_some() || u.fragment().is_some() {
        e.add(
            "base_url",
            "must not contain credentials or a fragment; use the API key field",
        );
        return None;
    }
    let pairs: Vec<(String, String)> = u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let version = match pairs.as_slice() {
        [] => None,
        [(k, v)] if k == "api-version" && !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') => {
            Some(v.clone())
        }
        _ => {
            e.add(
                "base_url",
                "may carry only its api-version, e.g. ?api-version=2024-10-21",
            );
            return None;
        }
    };
    let path = u.path().trim_end_matches('/');
    let path = path.strip_suffix("/chat/completions").unwrap_or(path).to_string();
    if path.contains("/openai/deployments/") && version.is_none() {
        e.add(
            "base_url",
            "an Azure deployment URL needs its api-version, e.g. …/openai/deployments/DEPLOYMENT?api-version=2024-10-21",
        );
        return None;
    }
    u.set_path(&path);
    Some(u.as_str().trim_end_matches('/').replace("/?", "?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_urls_keep_their_api_version_and_only_that() {
        let with = |url: &str| CandidateDraft {
            provider: "azure-openai".into(),
            base_url: url.into(),
            ..draft()
        };
        let ok = with("https://r.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21")
            .validate(None)
            .unwrap();
        assert_eq!(
            ok.base_url,
            "https://r.openai.azure.com/openai/deployments/gpt4o?api-version=2024-10-21"
        );
        assert_eq!(
            with("https://r.openai.azure.com/openai/v1/")
                .validate(None)
                .unwrap()
                .base_url,
            "https://r.openai.azure.com/openai/v1"
        );
        for bad in [
            "https://r.openai.azure.com/openai/deployments/gpt4o",
            "https://r.openai.azure.com/openai/deployments/gpt4o?api-version=1&key=x",
            "https://u:p@r.openai.azure.com/openai/v1",
        ] {
            assert!(with(bad).validate(None).unwrap_err().get("base_url").is_some(), "{bad}");
        }
        // Other providers still refuse a query.
        let other = CandidateDraft {
            base_url: "https://h/v1?api-version=1".into(),
            ..draft()
        };
        assert!(other.validate(None).is_err());
    }

    fn draft() -> CandidateDraft {
        CandidateDraft {
            name: "fast".into(),
            provider: "openai-chat".into(),
            base_url: "http://127.0.0.1:9000/v1/".into(),
            model: "m".into(),
            ..Default::default()
        }
    }

    #[test]
    fn valid_draft_normalises_url() {
        let spec = draft().validate(None).unwrap();
        assert_eq!(spec.base_url, "http://127.0.0.1:9000/v1");
        assert_eq!(spec.provider, ProviderKind::OpenAiChat);
    }

    #[test]
    fn every_bad_field_is_reported_at_once() {
        let d = CandidateDraft {
            name: " ".into(),
            provider: "grpc".into(),
            base_url: "ftp://x".into(),
            model: "".into(),
            temperature: "3".into(),
            extra_body: "[1]".into(),
            claimed_tps: "2158".into(),
            ..Default::default()
        };
        let e = d.validate(None).unwrap_err();
        for field in [
            "name",
            "provider",
            "base_url",
            "model",
            "temperature",
            "extra_body",
            "claimed_caliber",
        ] {
            assert!(e.get(field).is_some(), "no error for {field}: {e}");
        }
    }

    #[test]
    fn blank_key_on_edit_keeps_the_stored_one_and_debug_redacts_it() {
        let old = Secret::new("sk-live-123");
        let spec = draft().validate(Some(&old)).unwrap();
        assert_eq!(spec.api_key.as_ref().unwrap().expose(), "sk-live-123");
        assert!(!format!("{spec:?}").contains("sk-live"));
        assert!(CandidateDraft::from_spec(&spec).api_key.is_empty());
    }

    #[test]
    fn a_kept_key_never_follows_the_candidate_to_another_server() {
        let before = CandidateDraft {
            api_key: "sk-live-123".into(),
            api_key_env: "BAKEOFF_KEY_A".into(),
            ..draft()
        }
        .validate(None)
        .unwrap();
        let edit = |url: &str, key: &str| {
            let d = CandidateDraft {
                base_url: url.into(),
                api_key: key.into(),
                ..CandidateDraft::from_spec(&before)
            };
            let mut spec = d.validate(before.api_key.as_ref()).unwrap();
            let dropped = spec.drop_credentials_if_moved(&before, !key.is_empty());
            (spec, dropped)
        };
        // Same server, another path: the key stays.
        let (spec, dropped) = edit("http://127.0.0.1:9000/v2", "");
        assert!(!dropped && spec.api_key.is_some() && spec.api_key_env.is_some());
        // Another port, host or scheme: dropped.
        for url in [
            "http://127.0.0.1:9001/v1",
            "http://evil.example/v1",
            "https://127.0.0.1:9000/v1",
        ] {
            let (spec, dropped) = edit(url, "");
            assert!(dropped && spec.api_key.is_none() && spec.api_key_env.is_none(), "{url}");
        }
        // A key typed with the move is the new server's.
        let (spec, _) = edit("http://other.example/v1", "sk-new");
        assert_eq!(spec.api_key.unwrap().expose(), "sk-new");
    }

    #[test]
    fn key_env_must_carry_the_prefix_so_server_variables_never_leave() {
        for var in ["HOME", "DATABASE_URL", "PATH", "BAKEOFF_KEY_", "BAKEOFF_SECRET_KEY"] {
            let d = CandidateDraft {
                api_key_env: var.into(),
                ..draft()
            };
            let e = d.validate(None).unwrap_err();
            assert!(e.get("api_key_env").unwrap().contains(KEY_ENV_PREFIX), "{var}: {e}");
            // Even a stored one (from an older version) is never read.
            let mut spec = draft().validate(None).unwrap();
            spec.api_key_env = Some(var.into());
            assert!(spec.resolve_api_key().is_none() || var == "BAKEOFF_KEY_", "{var}");
        }
        let ok = CandidateDraft {
            api_key_env: "BAKEOFF_KEY_OPENAI".into(),
            ..draft()
        };
        assert_eq!(
            ok.validate(None).unwrap().api_key_env.as_deref(),
            Some("BAKEOFF_KEY_OPENAI")
        );
    }

    #[test]
    fn tokenize_endpoint_is_a_path_on_the_candidates_own_server() {
        let with = |kind: &str, path: &str| CandidateDraft {
            tokenize_kind: kind.into(),
            tokenize_path: path.into(),
            ..draft()
        };
        assert_eq!(with("", "").validate(None).unwrap().tokenize, None);
        assert_eq!(with("none", "").validate(None).unwrap().tokenize, None);
        let t = with("llama-cpp-python", "").validate(None).unwrap().tokenize.unwrap();
        assert_eq!(
            (t.kind, t.path.as_str()),
            (TokenizeKind::LlamaCppPython, "/extras/tokenize")
        );
        assert_eq!(
            t.url("http://127.0.0.1:9000/v1").unwrap(),
            "http://127.0.0.1:9000/extras/tokenize"
        );
        let t = with("vllm", "http://127.0.0.1:9000/tokenize")
            .validate(None)
            .unwrap()
            .tokenize
            .unwrap();
        assert_eq!((t.kind, t.path.as_str()), (TokenizeKind::Vllm, "/tokenize"));
        // Round trip through the form.
        let spec = with("llama-cpp", "/custom/tokenize").validate(None).unwrap();
        assert_eq!(CandidateDraft::from_spec(&spec).validate(None).unwrap(), spec);
        for (kind, path, field) in [
            ("sentencepiece", "", "tokenize_kind"),
            ("", "/tokenize", "tokenize_kind"),
            ("vllm", "http://other-host:9000/tokenize", "tokenize_path"),
            ("vllm", "https://127.0.0.1:9000/tokenize", "tokenize_path"),
            ("vllm", "tokenize", "tokenize_path"),
            ("vllm", "/tokenize?x=1", "tokenize_path"),
        ] {
            let e = with(kind, path).validate(None).unwrap_err();
            assert!(e.get(field).is_some(), "{kind} {path}: {e}");
        }
    }
}
