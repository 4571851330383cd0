//! Operability probes: short HTTP checks of a candidate's endpoint, each bounded in time, each
//! ending pass / fail / not applicable with its evidence (request, status, body excerpt,
//! timing). Requests are built exactly as a run builds them (`provider::prepare`), so the
//! credential header is the same — and, as in a run, it is never written into any evidence.
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;

use crate::domain::candidate::{CandidateSpec, ProviderKind, Secret};
use crate::domain::evalset::EvalSetFile;
use crate::domain::operability::{Evidence, ProbeKind, ProbeOutcome, ProbeReport, ProbeResult};
use crate::engine::tokens::tokenizer;
use crate::engine::wire::failure::{classify_transport, error_message, is_context_length_error};
use crate::engine::wire::protocol::{PreparedRequest, RequestParams};
use crate::engine::wire::provider::{parse_completion, prepare, stream_decoder};
use crate::engine::wire::sse::SseParser;

/// Most bytes of any probe response kept (only an excerpt is shown).
const MAX_BODY_BYTES: usize = 256 * 1024;
/// The word an over-long prompt repeats: one token in every common tokenizer and in the mock's.
const FILL_WORD: &str = " the";
/// Context windows above this are not probed with an over-long prompt (the body would be huge).
const MAX_PROBED_CONTEXT: u32 = 1_000_000;
/// Headers kept as provenance when present.
const PROVENANCE_HEADERS: [&str; 10] = [
    "server",
    "x-powered-by",
    "openai-version",
    "anthropic-version",
    "via",
    "x-served-by",
    "x-litellm-version",
    "x-model-version",
    "x-served-model",
    "x-vllm-version",
];

/// How the probes run.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// Longest any one probe may take (each HTTP exchange is bounded by it).
    pub timeout: Duration,
    /// An invalid parameter must be refused within this.
    pub quick_error: Duration,
    /// Streams opened and abandoned by the cancel probe.
    pub cancel_streams: usize,
    /// max_tokens of the abandoned streams (long enough that a server generating for nobody
    /// holds its capacity noticeably).
    pub abandoned_max_tokens: u32,
    /// Context window assumed when neither the server nor the candidate states one.
    pub default_context_length: u32,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            timeout: Duration::from_secs(10),
            quick_error: Duration::from_secs(5),
            cancel_streams: 8,
            abandoned_max_tokens: 256,
            default_context_length: 32_768,
        }
    }
}

/// Runs every probe against `spec`, one after the other (the cancel probe compares timings, so
/// nothing else of ours may load the endpoint meanwhile). Never fails: an unreachable endpoint
/// fails its probes with the transport error as evidence.
pub async fn run_probes(spec: &CandidateSpec, options: &ProbeOptions) -> ProbeReport {
    let started = Instant::now();
    let mut p = Prober::new(spec, options);
    let mut results = Vec::new();
    let (models, context) = p.models().await;
    results.push(models);
    results.push(p.health().await);
    results.push(p.metrics().await);
    let (usage, streamed) = p.usage_in_stream().await;
    results.push(usage);
    let (max_tokens, whole) = p.max_tokens().await;
    results.push(max_tokens);
    results.push(p.invalid_param().await);
    results.push(p.overlong_prompt(context).await);
    results.push(p.cancel_frees_capacity().await);
    results.push(p.rate_limit_headers(&[&streamed, &whole]));
    results.push(p.model_field(&[&streamed, &whole]));
    results.push(p.version_headers());
    // Belt and braces: whatever a server echoed back, no stored string holds the key.
    let key = p.key.clone();
    for r in &mut results {
        r.summary = redact(&r.summary, key.as_ref());
        let ev = &mut r.evidence;
        ev.request = redact(&ev.request, key.as_ref());
        ev.excerpt = redact(&ev.excerpt, key.as_ref());
        for n in &mut ev.notes {
            *n = redact(n, key.as_ref());
        }
    }
    ProbeReport {
        results,
        provenance: p.provenance,
        base_url: spec.base_url.clone(),
        model: spec.model.clone(),
        elapsed_ms: ms(started.elapsed()),
    }
}

/// What one exchange gave back.
#[derive(Debug, Default, Clone)]
struct Fetched {
    request: String,
    status: Option<u16>,
    headers: HeaderMap,
    body: String,
    elapsed: Duration,
    /// Send → first token (streams).
    first_token: Option<Duration>,
    /// Why there is no (complete) answer: timeout or transport error.
    error: Option<String>,
    // decoded answer (completion requests)
    content: String,
    finish_reason: Option<String>,
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
    reasoning_tokens: Option<u32>,
    usage_seen: bool,
    /// Every `model` value the response carried.
    models: Vec<String>,
}

impl Fetched {
    fn ok(&self) -> bool {
        self.error.is_none() && self.status.is_some_and(|s| (200..300).contains(&s))
    }

    fn evidence(&self, key: Option<&Secret>) -> Evidence {
        Evidence {
            request: self.request.clone(),
            status: self.status,
            excerpt: redact(&Evidence::excerpt_of(&self.body), key),
            elapsed_ms: Some(ms(self.elapsed)),
            notes: self.error.iter().map(|e| redact(e, key)).collect(),
        }
    }

    /// `HTTP 404 in 12 ms`, `no answer within 10.0 s`.
    fn describe(&self) -> String {
        match (&self.error, self.status) {
            (Some(e), Some(s)) => format!("HTTP {s}, then {e}"),
            (Some(e), None) => e.clone(),
            (None, Some(s)) => format!("HTTP {s} in {:.0} ms", ms(self.elapsed)),
            (None, None) => "no response".to_string(),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn redact(text: &str, key: Option<&Secret>) -> String {
    match key {
        Some(k) if !k.expose().is_empty() => text.replace(k.expose(), "****"),
        _ => text.to_string(),
    }
}

fn result(kind: ProbeKind, outcome: ProbeOutcome, summary: impl Into<String>, evidence: Evidence) -> ProbeResult {
    ProbeResult {
        kind,
        outcome,
        summary: summary.into(),
        evidence,
    }
}

/// The server's root for `/health` and `/metrics`: the base URL without a trailing `/v1`.
pub fn root_url(base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base).to_string()
}

/// The `model` values in a response object or stream event (OpenAI: `model`; Anthropic:
/// `message.model` in `message_start`).
fn models_in(json: &Value) -> Vec<String> {
    [json.get("model"), json.get("message").and_then(|m| m.get("model"))]
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str())
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect()
}

struct Prober<'a> {
    spec: &'a CandidateSpec,
    options: &'a ProbeOptions,
    key: Option<Secret>,
    http: Result<reqwest::Client, String>,
    root: String,
    base: String,
    provenance: Vec<(String, String)>,
}

impl<'a> Prober<'a> {
    fn new(spec: &'a CandidateSpec, options: &'a ProbeOptions) -> Self {
        let http = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(format!("bakeoff/{} (operability probe)", crate::VERSION))
            .build()
            .map_err(|e| format!("could not build an HTTP client: {e}"));
        Prober {
            spec,
            options,
            key: spec.resolve_api_key(),
            http,
            root: root_url(&spec.base_url),
            base: spec.base_url.trim_end_matches('/').to_string(),
            provenance: Vec::new(),
        }
    }

    /// A completion request for `prompt`, exactly as a run would send it.
    fn completion(&self, prompt: &str, max_tokens: u32, stream: bool) -> Result<PreparedRequest, String> {
        let header = serde_json::json!({
            "bakeoff_evalset": 1, "name": "operability probe", "task": "generation", "prompt": "{{text}}",
        });
        let case = serde_json::json!({"id": "probe", "vars": {"text": prompt}});
        let file = EvalSetFile::parse("probe", &format!("{header}\n{case}\n"))
            .map_err(|e| format!("could not build the probe request: {e}"))?;
        let params = RequestParams {
            max_tokens: Some(max_tokens),
            temperature: Some(0.0),
            stream,
        };
        prepare(self.spec, self.key.as_ref(), &file, &file.cases[0], &params).map_err(|f| f.detail)
    }

    /// The credential and version headers of a request, for GETs on the same server.
    fn auth_headers(&self) -> HeaderMap {
        let mut h = match self.completion("x", 1, false) {
            Ok(r) => r.headers,
            Err(_) => HeaderMap::new(),
        };
        h.remove(CONTENT_TYPE);
        h.insert(ACCEPT, HeaderValue::from_static("*/*"));
        h
    }

    fn note_provenance(&mut self, headers: &HeaderMap) {
        for name in PROVENANCE_HEADERS {
            if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
                let v = redact(v, self.key.as_ref());
                if !self.provenance.iter().any(|(n, old)| n == name && *old == v) {
                    self.provenance.push((name.to_string(), v));
                }
            }
        }
    }

    async fn get(&mut self, url: &str) -> Fetched {
        let headers = self.auth_headers();
        self.exchange(reqwest::Method::GET, url, headers, None, false, false)
            .await
    }

    async fn send(&mut self, req: &PreparedRequest) -> Fetched {
        let body = Some(req.body.clone());
        self.exchange(
            reqwest::Method::POST,
            &req.url,
            req.headers.clone(),
            body,
            req.stream,
            false,
        )
        .await
    }

    /// Sends one request and reads the answer (a stream is decoded event by event) within the
    /// probe timeout. With `abandon`, a stream is dropped as soon as its first token arrives.
    async fn exchange(
        &mut self,
        method: reqwest::Method,
        url: &str,
        headers: HeaderMap,
        body: Option<Bytes>,
        stream: bool,
        abandon: bool,
    ) -> Fetched {
        let mut f = Fetched {
            request: format!("{method} {}", redact(url, self.key.as_ref())),
            ..Default::default()
        };
        let http = match &self.http {
            Ok(h) => h.clone(),
            Err(e) => {
                f.error = Some(e.clone());
                return f;
            }
        };
        let t0 = Instant::now();
        let deadline = t0 + self.options.timeout;
        let mut builder = http.request(method, url).headers(headers);
        if let Some(b) = body {
            builder = builder.body(b);
        }
        let response = match tokio::time::timeout_at(deadline, builder.send()).await {
            Err(_) => {
                f.elapsed = t0.elapsed();
                f.error = Some(format!("no answer within {:.1} s", self.options.timeout.as_secs_f64()));
                return f;
            }
            Ok(Err(e)) => {
                f.elapsed = t0.elapsed();
                f.error = Some(classify_transport(&e).detail);
                return f;
            }
            Ok(Ok(r)) => r,
        };
        f.status = Some(response.status().as_u16());
        f.headers = response.headers().clone();
        self.note_provenance(&f.headers);
        let is_stream = stream
            && response.status().is_success()
            && f.headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.contains("event-stream"));
        let mut decoder = stream_decoder(self.spec.provider);
        let mut parser = SseParser::new();
        let mut chunks = response.bytes_stream();
        let mut raw = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, chunks.next()).await {
                Err(_) => {
                    f.error = Some(format!(
                        "the body did not end within {:.1} s",
                        self.options.timeout.as_secs_f64()
                    ));
                    break;
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    f.error = Some(format!("the body broke off: {}", classify_transport(&e).detail));
                    break;
                }
                Ok(Some(Ok(bytes))) => {
                    let room = MAX_BODY_BYTES.saturating_sub(raw.len());
                    raw.extend_from_slice(&bytes[..bytes.len().min(room)]);
                    if !is_stream {
                        continue;
                    }
                    let events = parser.push(&bytes).unwrap_or_default();
                    for event in events {
                        if let Ok(json) = serde_json::from_str::<Value>(&event.data) {
                            f.models.extend(models_in(&json));
                        }
                        if let Ok(update) = decoder.decode(&event) {
                            if update.carries_tokens() && f.first_token.is_none() {
                                f.first_token = Some(t0.elapsed());
                            }
                            f.content.push_str(&update.content);
                            if update.finish_reason.is_some() {
                                f.finish_reason = update.finish_reason;
                            }
                            if let Some(u) = update.usage {
                                f.usage_seen = true;
                                f.input_tokens = u.input_tokens.or(f.input_tokens);
                                f.output_tokens = u.output_tokens.or(f.output_tokens);
                                f.reasoning_tokens = u.reasoning_tokens.or(f.reasoning_tokens);
                            }
                        }
                    }
                    if abandon && f.first_token.is_some() {
                        break; // dropping the body closes the connection mid-stream
                    }
                }
            }
        }
        f.elapsed = t0.elapsed();
        f.body = String::from_utf8_lossy(&raw).into_owned();
        if !is_stream && f.ok() && body_is_completion(url) {
            if let Ok(json) = serde_json::from_str::<Value>(&f.body) {
                f.models.extend(models_in(&json));
            }
            if let Ok(c) = parse_completion(self.spec.provider, &f.body) {
                f.content = c.content;
                f.finish_reason = c.finish_reason;
                if let Some(u) = c.usage {
                    f.usage_seen = true;
                    f.input_tokens = u.input_tokens;
                    f.output_tokens = u.output_tokens;
                    f.reasoning_tokens = u.reasoning_tokens;
                }
            }
        }
        f
    }

    // ------------------------------------------------------------------ the probes

    /// `/v1/models` lists the model; also the context length the server states, if any.
    async fn models(&mut self) -> (ProbeResult, Option<u32>) {
        let kind = ProbeKind::ModelsListsModel;
        let f = self.get(&format!("{}/models", self.base)).await;
        let mut ev = f.evidence(self.key.as_ref());
        if !f.ok() {
            return (
                result(kind, ProbeOutcome::Fail, format!("no model list: {}", f.describe()), ev),
                None,
            );
        }
        let json: Option<Value> = serde_json::from_str(&f.body).ok();
        let entries: Vec<Value> = json
            .as_ref()
            .and_then(|j| j.get("data").or_else(|| j.get("models")))
            .and_then(|d| d.as_array())
            .cloned()
            .unwrap_or_default();
        let id_of = |e: &Value| {
            e.get("id")
                .or_else(|| e.get("name"))
                .or_else(|| e.get("model"))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let ids: Vec<String> = entries.iter().filter_map(id_of).collect();
        let entry = entries
            .iter()
            .find(|e| id_of(e).as_deref() == Some(self.spec.model.as_str()));
        let context = entry.and_then(|e| {
            [
                "max_model_len",
                "context_length",
                "context_window",
                "max_context_length",
            ]
            .iter()
            .find_map(|k| e.get(*k).and_then(Value::as_u64))
            .and_then(|n| u32::try_from(n).ok())
        });
        if let Some(c) = context {
            ev.notes
                .push(format!("the server states a context length of {c} tokens"));
        }
        let outcome = match (json.is_some(), entry.is_some()) {
            (false, _) => {
                return (result(kind, ProbeOutcome::Fail, "the model list is not JSON", ev), None);
            }
            (true, true) => result(
                kind,
                ProbeOutcome::Pass,
                format!("{} listed among {} model(s)", self.spec.model, ids.len()),
                ev,
            ),
            (true, false) => {
                let shown: Vec<&str> = ids.iter().take(10).map(String::as_str).collect();
                result(
                    kind,
                    ProbeOutcome::Fail,
                    format!(
                        "{} is not listed; the server lists {}",
                        self.spec.model,
                        if shown.is_empty() {
                            "nothing".to_string()
                        } else {
                            shown.join(", ")
                        }
                    ),
                    ev,
                )
            }
        };
        (outcome, context)
    }

    async fn health(&mut self) -> ProbeResult {
        let kind = ProbeKind::HealthEndpoint;
        let mut urls = vec![
            format!("{}/health", self.root),
            format!("{}/healthz", self.root),
            format!("{}/health", self.base),
            format!("{}/v1/health", self.root),
            format!("{}/ping", self.root),
        ];
        urls.dedup();
        let mut tried = Vec::new();
        let mut last = Fetched::default();
        for url in urls {
            let f = self.get(&url).await;
            if f.ok() {
                let mut ev = f.evidence(self.key.as_ref());
                ev.notes.extend(tried);
                if let Some(v) = serde_json::from_str::<Value>(&f.body)
                    .ok()
                    .and_then(|j| j.get("version").and_then(|v| v.as_str()).map(str::to_string))
                {
                    self.provenance
                        .push(("health version".into(), redact(&v, self.key.as_ref())));
                }
                return result(
                    kind,
                    ProbeOutcome::Pass,
                    format!("{} answers {}", f.request, f.describe()),
                    ev,
                );
            }
            tried.push(format!("{}: {}", f.request, f.describe()));
            let unreachable = f.status.is_none();
            last = f;
            if unreachable {
                break; // the host does not answer at all: the other paths will not either
            }
        }
        let mut ev = last.evidence(self.key.as_ref());
        ev.notes = tried;
        result(kind, ProbeOutcome::Fail, "no health endpoint answered 2xx", ev)
    }

    async fn metrics(&mut self) -> ProbeResult {
        let kind = ProbeKind::MetricsEndpoint;
        if self.spec.provider == ProviderKind::Anthropic {
            return result(
                kind,
                ProbeOutcome::NotApplicable,
                "a hosted Messages API exposes no Prometheus endpoint",
                Evidence::default(),
            );
        }
        let f = self.get(&format!("{}/metrics", self.root)).await;
        let ev = f.evidence(self.key.as_ref());
        let prometheus = f
            .body
            .lines()
            .any(|l| l.starts_with("# TYPE ") || l.starts_with("# HELP "));
        match (f.ok(), prometheus) {
            (true, true) => {
                let families = f.body.lines().filter(|l| l.starts_with("# TYPE ")).count();
                result(
                    kind,
                    ProbeOutcome::Pass,
                    format!("Prometheus text with {families} metric families"),
                    ev,
                )
            }
            (true, false) => result(
                kind,
                ProbeOutcome::Fail,
                "/metrics answers, but not in Prometheus text format",
                ev,
            ),
            (false, _) => result(kind, ProbeOutcome::Fail, format!("no /metrics: {}", f.describe()), ev),
        }
    }

    async fn usage_in_stream(&mut self) -> (ProbeResult, Fetched) {
        let kind = ProbeKind::UsageInStream;
        let req = match self.completion("Say hello in one short sentence.", 16, true) {
            Ok(r) => r,
            Err(e) => return (self.unbuildable(kind, e), Fetched::default()),
        };
        let f = self.send(&req).await;
        let mut ev = f.evidence(self.key.as_ref());
        ev.excerpt = redact(&Evidence::excerpt_of(&f.content), self.key.as_ref());
        let r = if !f.ok() {
            result(
                kind,
                ProbeOutcome::Fail,
                format!("the stream failed: {}", f.describe()),
                ev,
            )
        } else if f.usage_seen && f.output_tokens.is_some() {
            result(
                kind,
                ProbeOutcome::Pass,
                format!(
                    "usage reported: {} prompt, {} completion tokens",
                    f.input_tokens.map_or("?".into(), |n| n.to_string()),
                    f.output_tokens.unwrap_or(0)
                ),
                ev,
            )
        } else {
            result(
                kind,
                ProbeOutcome::Fail,
                "the stream ended without a usage block; token counts must come from a tokenizer",
                ev,
            )
        };
        (r, f)
    }

    async fn max_tokens(&mut self) -> (ProbeResult, Fetched) {
        let kind = ProbeKind::MaxTokensHonoured;
        const LIMIT: u32 = 5;
        let req = match self.completion(
            "Write a long story about a lighthouse keeper, at least five paragraphs.",
            LIMIT,
            false,
        ) {
            Ok(r) => r,
            Err(e) => return (self.unbuildable(kind, e), Fetched::default()),
        };
        let f = self.send(&req).await;
        let mut ev = f.evidence(self.key.as_ref());
        ev.excerpt = redact(&Evidence::excerpt_of(&f.content), self.key.as_ref());
        if !f.ok() {
            let r = result(
                kind,
                ProbeOutcome::Fail,
                format!("the request failed: {}", f.describe()),
                ev,
            );
            return (r, f);
        }
        ev.notes.push(format!(
            "finish reason {}",
            f.finish_reason.as_deref().unwrap_or("none")
        ));
        // Reasoning tokens are part of completion tokens in usage; whether max_tokens bounds
        // them differs between servers, so the answer is judged and the reasoning shown.
        let reasoning = f.reasoning_tokens.unwrap_or(0);
        let (count, source) = match f.output_tokens {
            Some(n) if reasoning > 0 => (n.saturating_sub(reasoning), "usage, answer tokens"),
            Some(n) => (n, "usage"),
            // Another tokenizer than the server's: allow twice the limit before calling it ignored.
            None => (tokenizer::count(&f.content) / 2, "o200k count / 2, no usage"),
        };
        if reasoning > 0 {
            ev.notes
                .push(format!("{reasoning} reasoning tokens besides the answer"));
        }
        let r = if count <= LIMIT {
            result(
                kind,
                ProbeOutcome::Pass,
                format!("asked for ≤ {LIMIT} tokens, got {count} ({source})"),
                ev,
            )
        } else {
            result(
                kind,
                ProbeOutcome::Fail,
                format!("asked for ≤ {LIMIT} tokens, got {count} ({source})"),
                ev,
            )
        };
        (r, f)
    }

    async fn invalid_param(&mut self) -> ProbeResult {
        let kind = ProbeKind::InvalidParam4xx;
        let mut req = match self.completion("Say hello.", 8, false) {
            Ok(r) => r,
            Err(e) => return self.unbuildable(kind, e),
        };
        req.body = with_field(&req.body, "max_tokens", serde_json::json!(-1));
        let f = self.send(&req).await;
        let mut ev = f.evidence(self.key.as_ref());
        ev.notes.push("sent max_tokens = -1".into());
        let json_error = serde_json::from_str::<Value>(&f.body)
            .ok()
            .is_some_and(|j| j.is_object());
        let quick = f.elapsed <= self.options.quick_error;
        match f.status {
            _ if f.error.is_some() && f.status.is_none() => {
                result(kind, ProbeOutcome::Fail, format!("no answer: {}", f.describe()), ev)
            }
            Some(s @ 400..=499) if json_error && quick => result(
                kind,
                ProbeOutcome::Pass,
                format!(
                    "refused with HTTP {s} and a JSON error in {:.0} ms{}",
                    ms(f.elapsed),
                    error_message(&serde_json::from_str(&f.body).unwrap_or(Value::Null))
                        .map(|m| format!(": {}", redact(&m, self.key.as_ref())))
                        .unwrap_or_default()
                ),
                ev,
            ),
            Some(s @ 400..=499) if !json_error => result(
                kind,
                ProbeOutcome::Fail,
                format!("HTTP {s}, but the error body is not JSON"),
                ev,
            ),
            Some(s @ 400..=499) => result(
                kind,
                ProbeOutcome::Fail,
                format!("HTTP {s}, but only after {:.1} s", f.elapsed.as_secs_f64()),
                ev,
            ),
            Some(s @ 200..=299) => result(
                kind,
                ProbeOutcome::Fail,
                format!("accepted with HTTP {s}: the invalid value was silently ignored or replaced"),
                ev,
            ),
            Some(s) => result(
                kind,
                ProbeOutcome::Fail,
                format!("HTTP {s} instead of a 4xx: a client mistake looks like a server failure"),
                ev,
            ),
            None => result(kind, ProbeOutcome::Fail, "no response", ev),
        }
    }

    async fn overlong_prompt(&mut self, server_context: Option<u32>) -> ProbeResult {
        let kind = ProbeKind::OverlongPrompt4xx;
        let declared = self.spec.conditions.context_length;
        let (context, source) = match (server_context, declared) {
            (Some(c), _) => (c, "stated by the server"),
            (None, Some(c)) => (c, "declared for the candidate"),
            (None, None) => (self.options.default_context_length, "assumed (none stated)"),
        };
        if context > MAX_PROBED_CONTEXT {
            return result(
                kind,
                ProbeOutcome::NotApplicable,
                format!("context window of {context} tokens is too large to probe"),
                Evidence::default(),
            );
        }
        let words = context + context / 4 + 64;
        let mut req = match self.completion("x", 1, false) {
            Ok(r) => r,
            Err(e) => return self.unbuildable(kind, e),
        };
        req.body = with_prompt(&req.body, &FILL_WORD.repeat(words as usize));
        let f = self.send(&req).await;
        let mut ev = f.evidence(self.key.as_ref());
        ev.notes.push(format!(
            "sent about {words} tokens against a context of {context} ({source})"
        ));
        let says_context = is_context_length_error(serde_json::from_str(&f.body).ok().as_ref(), &f.body);
        match f.status {
            None => result(
                kind,
                ProbeOutcome::Fail,
                format!("no clear answer: {} (a hang or a dropped connection)", f.describe()),
                ev,
            ),
            Some(s @ 400..=499) => {
                let why = if says_context {
                    "naming the context length"
                } else {
                    "(the message does not name the context length)"
                };
                result(kind, ProbeOutcome::Pass, format!("refused with HTTP {s} {why}"), ev)
            }
            Some(s @ 200..=299) if server_context.is_none() && declared.is_none() => result(
                kind,
                ProbeOutcome::NotApplicable,
                format!(
                    "accepted with HTTP {s}; no context length is stated, so the window may simply be larger: declare it on the candidate to probe this"
                ),
                ev,
            ),
            Some(s @ 200..=299) => result(
                kind,
                ProbeOutcome::Fail,
                format!(
                    "accepted with HTTP {s}: silently truncated or ignored (prompt tokens reported: {})",
                    f.input_tokens.map_or("none".to_string(), |n| n.to_string())
                ),
                ev,
            ),
            Some(s) => result(kind, ProbeOutcome::Fail, format!("HTTP {s} instead of a clear 4xx"), ev),
        }
    }

    /// Baseline, then streams abandoned after their first token, then one more request: it
    /// must not be much slower than the baseline.
    async fn cancel_frees_capacity(&mut self) -> ProbeResult {
        let kind = ProbeKind::CancelFreesCapacity;
        let small = match self.completion("Say hello.", 8, true) {
            Ok(r) => r,
            Err(e) => return self.unbuildable(kind, e),
        };
        let long = match self.completion(
            "Write a very long essay about the history of lighthouses.",
            self.options.abandoned_max_tokens,
            true,
        ) {
            Ok(r) => r,
            Err(e) => return self.unbuildable(kind, e),
        };
        // Two idle requests, allowing one sporadic failure (a 500 says nothing about capacity).
        let mut baseline = Duration::ZERO;
        let (mut good, mut last_failure) = (0, None);
        for _ in 0..3 {
            let f = self.send(&small).await;
            if f.ok() {
                baseline = baseline.max(f.elapsed);
                good += 1;
                if good == 2 {
                    break;
                }
            } else {
                last_failure = Some(f);
            }
        }
        if good < 2 {
            let f = last_failure.unwrap_or_default();
            return result(
                kind,
                ProbeOutcome::Fail,
                format!("the baseline request failed: {}", f.describe()),
                f.evidence(self.key.as_ref()),
            );
        }
        // Open the streams together; each is dropped once its first token arrives, and any still
        // waiting (queued) when a third of the probe's time is up is dropped too.
        let give_up = self.options.timeout / 3;
        let mut opened = Vec::new();
        for _ in 0..self.options.cancel_streams.max(1) {
            let mut probe = Prober {
                spec: self.spec,
                options: self.options,
                key: self.key.clone(),
                http: self.http.clone(),
                root: self.root.clone(),
                base: self.base.clone(),
                provenance: Vec::new(),
            };
            let req = long.clone();
            opened.push(async move {
                tokio::time::timeout(
                    give_up,
                    probe.exchange(
                        reqwest::Method::POST,
                        &req.url,
                        req.headers.clone(),
                        Some(req.body.clone()),
                        true,
                        true,
                    ),
                )
                .await
                .ok()
            });
        }
        let abandoned = futures_util::future::join_all(opened).await;
        let started = abandoned.iter().flatten().filter(|f| f.first_token.is_some()).count();
        let mut after = self.send(&small).await;
        if !after.ok() && after.status.is_some() {
            // An error answer came back at once: sporadic, not held capacity. Ask once more.
            after = self.send(&small).await;
        }
        let mut ev = after.evidence(self.key.as_ref());
        ev.notes.push(format!(
            "baseline {:.0} ms (slower of two idle requests); {started} of {} streams of {} tokens abandoned after their first token",
            ms(baseline),
            abandoned.len(),
            self.options.abandoned_max_tokens
        ));
        if started == 0 {
            return result(
                kind,
                ProbeOutcome::Fail,
                "no stream produced a first token, so none could be abandoned",
                ev,
            );
        }
        if !after.ok() {
            return result(
                kind,
                ProbeOutcome::Fail,
                format!("the request after the abandoned streams failed: {}", after.describe()),
                ev,
            );
        }
        // Generous: the machine is noisy, and a held slot costs seconds, not milliseconds.
        let bound = baseline * 3 + Duration::from_millis(300);
        if after.elapsed <= bound {
            result(
                kind,
                ProbeOutcome::Pass,
                format!(
                    "the next request took {:.0} ms vs {:.0} ms idle",
                    ms(after.elapsed),
                    ms(baseline)
                ),
                ev,
            )
        } else {
            result(
                kind,
                ProbeOutcome::Fail,
                format!(
                    "the next request took {:.0} ms vs {:.0} ms idle: abandoned streams still hold capacity",
                    ms(after.elapsed),
                    ms(baseline)
                ),
                ev,
            )
        }
    }

    fn rate_limit_headers(&self, seen: &[&Fetched]) -> ProbeResult {
        let kind = ProbeKind::RateLimitHeaders;
        let answered: Vec<&&Fetched> = seen.iter().filter(|f| f.status.is_some()).collect();
        let Some(first) = answered.first() else {
            return result(
                kind,
                ProbeOutcome::Fail,
                "no completion response to inspect",
                Evidence::default(),
            );
        };
        let mut names: Vec<String> = answered
            .iter()
            .flat_map(|f| f.headers.iter())
            .filter(|(name, _)| {
                let n = name.as_str();
                n.starts_with("x-ratelimit")
                    || n.starts_with("ratelimit")
                    || n.starts_with("anthropic-ratelimit")
                    || n.starts_with("x-rate-limit")
                    || n == "retry-after"
            })
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("(binary)")))
            .collect();
        names.sort();
        names.dedup();
        let mut ev = Evidence {
            request: first.request.clone(),
            status: first.status,
            ..Default::default()
        };
        if names.is_empty() {
            result(
                kind,
                ProbeOutcome::Fail,
                "no rate-limit headers: clients cannot pace themselves before a 429",
                ev,
            )
        } else {
            let summary = format!("{} rate-limit header(s)", names.len());
            ev.notes = names;
            result(kind, ProbeOutcome::Pass, summary, ev)
        }
    }

    fn model_field(&self, seen: &[&Fetched]) -> ProbeResult {
        let kind = ProbeKind::ModelFieldMatches;
        let mut models: Vec<String> = seen.iter().flat_map(|f| f.models.iter().cloned()).collect();
        models.sort();
        models.dedup();
        let first = seen.iter().find(|f| f.status.is_some());
        let ev = Evidence {
            request: first.map(|f| f.request.clone()).unwrap_or_default(),
            status: first.and_then(|f| f.status),
            notes: models.iter().map(|m| format!("model field: {m}")).collect(),
            ..Default::default()
        };
        let wanted = &self.spec.model;
        if models.is_empty() {
            result(kind, ProbeOutcome::Fail, "no model field in the responses", ev)
        } else if models.iter().all(|m| m == wanted) {
            result(kind, ProbeOutcome::Pass, format!("responses name {wanted}"), ev)
        } else {
            let other: Vec<&str> = models.iter().filter(|m| *m != wanted).map(String::as_str).collect();
            result(
                kind,
                ProbeOutcome::Fail,
                format!("asked for {wanted}, the response names {}", other.join(", ")),
                ev,
            )
        }
    }

    fn version_headers(&self) -> ProbeResult {
        let kind = ProbeKind::VersionHeaders;
        let ev = Evidence {
            notes: self.provenance.iter().map(|(n, v)| format!("{n}: {v}")).collect(),
            ..Default::default()
        };
        if self.provenance.is_empty() {
            result(
                kind,
                ProbeOutcome::NotApplicable,
                "no server or version header: record the serving stack by hand",
                ev,
            )
        } else {
            result(
                kind,
                ProbeOutcome::Pass,
                format!("{} provenance value(s) recorded", self.provenance.len()),
                ev,
            )
        }
    }

    fn unbuildable(&self, kind: ProbeKind, why: String) -> ProbeResult {
        result(
            kind,
            ProbeOutcome::Fail,
            why,
            Evidence {
                request: format!("POST {}", redact(&self.base, self.key.as_ref())),
                ..Default::default()
            },
        )
    }
}

/// Whether a URL is a completion endpoint (its body is parsed as an answer).
fn body_is_completion(url: &str) -> bool {
    ["/chat/completions", "/completions", "/messages"]
        .iter()
        .any(|p| url.ends_with(p))
}

/// The JSON body with one top-level field replaced.
fn with_field(body: &Bytes, field: &str, value: Value) -> Bytes {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut m)) => {
            m.insert(field.to_string(), value);
            Bytes::from(Value::Object(m).to_string())
        }
        _ => body.clone(),
    }
}

/// The JSON body with its user text replaced (last user message, or `prompt`).
fn with_prompt(body: &Bytes, text: &str) -> Bytes {
    let Ok(Value::Object(mut m)) = serde_json::from_slice::<Value>(body) else {
        return body.clone();
    };
    if let Some(Value::Array(messages)) = m.get_mut("messages") {
        if let Some(last) = messages
            .iter_mut()
            .rev()
            .find(|msg| msg.get("role").and_then(Value::as_str) == Some("user"))
        {
            last["content"] = Value::String(text.to_string());
        }
    } else if m.contains_key("prompt") {
        m.insert("prompt".into(), Value::String(text.to_string()));
    }
    Bytes::from(Value::Object(m).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_strips_the_api_version() {
        assert_eq!(root_url("http://h:1/v1"), "http://h:1");
        assert_eq!(root_url("http://h:1/v1/"), "http://h:1");
        assert_eq!(root_url("http://h:1/api"), "http://h:1/api");
    }

    #[test]
    fn bodies_are_rewritten_in_place() {
        let chat = Bytes::from(
            r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"x"}],"max_tokens":1}"#,
        );
        let v: Value = serde_json::from_slice(&with_prompt(&chat, "long")).unwrap();
        assert_eq!(v["messages"][1]["content"], "long");
        assert_eq!(v["messages"][0]["content"], "s");
        let v: Value = serde_json::from_slice(&with_field(&chat, "max_tokens", serde_json::json!(-1))).unwrap();
        assert_eq!(v["max_tokens"], -1);
        let completions = Bytes::from(r#"{"model":"m","prompt":"x"}"#);
        let v: Value = serde_json::from_slice(&with_prompt(&completions, "long")).unwrap();
        assert_eq!(v["prompt"], "long");
    }

    #[test]
    fn model_fields_of_openai_and_anthropic_shapes() {
        assert_eq!(models_in(&serde_json::json!({"model": "a"})), vec!["a"]);
        assert_eq!(
            models_in(&serde_json::json!({"type": "message_start", "message": {"model": "b"}})),
            vec!["b"]
        );
        assert!(models_in(&serde_json::json!({"choices": []})).is_empty());
    }
}
