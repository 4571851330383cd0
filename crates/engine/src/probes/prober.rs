//! The probes' HTTP plumbing: one client per probe session, requests built as a run builds
//! them, each exchange read (a stream decoded event by event) into a `Fetched` within the probe
//! timeout, and the provenance headers noted on the way.
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;

use super::ProbeOptions;
use crate::domain::candidate::{CandidateSpec, Secret};
use crate::domain::evalset::EvalSetFile;
use crate::domain::operability::{Evidence, ProbeKind, ProbeOutcome, ProbeResult};
use crate::wire::failure::classify_transport;
use crate::wire::protocol::{PreparedRequest, RequestParams};
use crate::wire::provider::{parse_completion, prepare, stream_decoder};
use crate::wire::sse::SseParser;

/// Most bytes of any probe response kept (only an excerpt is shown).
const MAX_BODY_BYTES: usize = 256 * 1024;
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

/// What one exchange gave back.
#[derive(Debug, Default, Clone)]
pub(super) struct Fetched {
    pub(super) request: String,
    pub(super) status: Option<u16>,
    pub(super) headers: HeaderMap,
    pub(super) body: String,
    pub(super) elapsed: Duration,
    /// Send → first token (streams).
    pub(super) first_token: Option<Duration>,
    /// Why there is no (complete) answer: timeout or transport error.
    pub(super) error: Option<String>,
    // decoded answer (completion requests)
    pub(super) content: String,
    pub(super) finish_reason: Option<String>,
    pub(super) input_tokens: Option<u32>,
    pub(super) output_tokens: Option<u32>,
    pub(super) reasoning_tokens: Option<u32>,
    pub(super) usage_seen: bool,
    /// Every `model` value the response carried.
    pub(super) models: Vec<String>,
}

impl Fetched {
    pub(super) fn ok(&self) -> bool {
        self.error.is_none() && self.status.is_some_and(|s| (200..300).contains(&s))
    }

    pub(super) fn evidence(&self, key: Option<&Secret>) -> Evidence {
        Evidence {
            request: self.request.clone(),
            status: self.status,
            excerpt: redact(&Evidence::excerpt_of(&self.body), key),
            elapsed_ms: Some(ms(self.elapsed)),
            notes: self.error.iter().map(|e| redact(e, key)).collect(),
        }
    }

    /// `HTTP 404 in 12 ms`, `no answer within 10.0 s`.
    pub(super) fn describe(&self) -> String {
        match (&self.error, self.status) {
            (Some(e), Some(s)) => format!("HTTP {s}, then {e}"),
            (Some(e), None) => e.clone(),
            (None, Some(s)) => format!("HTTP {s} in {:.0} ms", ms(self.elapsed)),
            (None, None) => "no response".to_string(),
        }
    }
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(super) fn redact(text: &str, key: Option<&Secret>) -> String {
    match key {
        Some(k) if !k.expose().is_empty() => text.replace(k.expose(), "****"),
        _ => text.to_string(),
    }
}

pub(super) fn result(
    kind: ProbeKind,
    outcome: ProbeOutcome,
    summary: impl Into<String>,
    evidence: Evidence,
) -> ProbeResult {
    ProbeResult {
        kind,
        outcome,
        summary: summary.into(),
        evidence,
    }
}

/// The server's root for `/health` and `/metrics`: the base URL without a trailing `/v1`.
pub(super) fn root_url(base_url: &str) -> String {
    crate::domain::telemetry::source::server_root(base_url)
}

/// The `model` values in a response object or stream event (OpenAI: `model`; Anthropic:
/// `message.model` in `message_start`; the Responses API: `response.model` in its events).
pub(super) fn models_in(json: &Value) -> Vec<String> {
    [
        json.get("model"),
        json.get("message").and_then(|m| m.get("model")),
        json.get("response").and_then(|m| m.get("model")),
    ]
    .into_iter()
    .flatten()
    .filter_map(|m| m.as_str())
    .filter(|m| !m.is_empty())
    .map(str::to_string)
    .collect()
}

pub(super) struct Prober<'a> {
    pub(super) spec: &'a CandidateSpec,
    pub(super) options: &'a ProbeOptions,
    pub(super) key: Option<Secret>,
    pub(super) http: Result<reqwest::Client, String>,
    pub(super) root: String,
    pub(super) base: String,
    pub(super) provenance: Vec<(String, String)>,
}

impl<'a> Prober<'a> {
    pub(super) fn new(spec: &'a CandidateSpec, options: &'a ProbeOptions) -> Self {
        let http = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(options.timeout.min(Duration::from_secs(10)))
            .tcp_nodelay(true)
            // Every probe on a connection of its own: llama.cpp's server closes the connection
            // after each streamed answer although it says keep-alive, and a probe sent on that
            // connection would fail for it.
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(format!("bakeoff/{} (operability probe)", crate::VERSION))
            .build()
            .map_err(|e| format!("could not build an HTTP client: {e}"))
            .and_then(|http| match crate::domain::candidate::origin_refused(&spec.base_url) {
                Some(why) => Err(format!("the base URL {why}")),
                None => Ok(http),
            });
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
    pub(super) fn completion(&self, prompt: &str, max_tokens: u32, stream: bool) -> Result<PreparedRequest, String> {
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
    pub(super) fn auth_headers(&self) -> HeaderMap {
        let mut h = match self.completion("x", 1, false) {
            Ok(r) => r.headers,
            Err(_) => HeaderMap::new(),
        };
        h.remove(CONTENT_TYPE);
        h.insert(ACCEPT, HeaderValue::from_static("*/*"));
        h
    }

    pub(super) fn note_provenance(&mut self, headers: &HeaderMap) {
        for name in PROVENANCE_HEADERS {
            if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
                let v = redact(v, self.key.as_ref());
                if !self.provenance.iter().any(|(n, old)| n == name && *old == v) {
                    self.provenance.push((name.to_string(), v));
                }
            }
        }
    }

    pub(super) async fn get(&mut self, url: &str) -> Fetched {
        let headers = self.auth_headers();
        self.exchange(reqwest::Method::GET, url, headers, None, false, false)
            .await
    }

    pub(super) async fn send(&mut self, req: &PreparedRequest) -> Fetched {
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
    pub(super) async fn exchange(
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
}

/// Whether a URL is a completion endpoint (its body is parsed as an answer).
pub(super) fn body_is_completion(url: &str) -> bool {
    let path = url.split('?').next().unwrap_or(url);
    ["/chat/completions", "/completions", "/messages", "/responses"]
        .iter()
        .any(|p| path.ends_with(p))
}

/// The JSON body with one top-level field replaced.
pub(super) fn with_field(body: &Bytes, field: &str, value: Value) -> Bytes {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut m)) => {
            m.insert(field.to_string(), value);
            Bytes::from(Value::Object(m).to_string())
        }
        _ => body.clone(),
    }
}

/// The JSON body with its user text replaced (last user message, or `prompt`).
pub(super) fn with_prompt(body: &Bytes, text: &str) -> Bytes {
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
