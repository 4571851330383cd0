//! The HTTP side: router, shared state, the two completion endpoints (streaming and not), and
//! the bookkeeping that feeds `/metrics` and `/mock/requests`.
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::answers::{AnswerKey, CaseRef};
use super::generate::{Api, Generator, Limits, Plan, Renderer, Schedule, Step, usage_json};
use super::log::{CaseTruth, Outcome, RequestLog, RequestRecord};
use super::profile::{ModelProfile, OverlongBehaviour};
use super::rng::{SplitMix, stable_hash};
use super::tokens::{count_chat_tokens, count_tokens};
use super::{MockConfig, SERVER_HEADER};

pub(crate) type Shared = Arc<MockState>;

/// Everything the handlers share.
pub(crate) struct MockState {
    pub profiles: Vec<ProfileState>,
    by_name: HashMap<String, usize>,
    answers: AnswerKey,
    seed: u64,
    pub log: RequestLog,
    next_seq: AtomicU64,
    pub counters: Mutex<Counters>,
    started_unix_s: u64,
}

/// One profile's live state.
pub(crate) struct ProfileState {
    pub profile: ModelProfile,
    slots: Option<Arc<Semaphore>>,
    pub queued: AtomicU64,
    pub in_flight: AtomicU64,
    pub tokens_generated: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Requests admitted so far: the per-request rng is seeded from it, so a profile's behaviour
    /// does not depend on other profiles' traffic.
    admitted: AtomicU64,
    window: Mutex<RateWindow>,
    /// When the current stretch of continuous load began (for `latency_drift_per_minute`).
    busy: Mutex<BusyClock>,
}

/// Continuous load: since when, and when the profile last saw a request start or end.
struct BusyClock {
    since: Instant,
    last_activity: Instant,
}

/// Quiet time after which a drifting profile is fresh again.
const DRIFT_IDLE_RESET: Duration = Duration::from_secs(2);
/// Most a drifting profile slows down (×).
const DRIFT_MAX_FACTOR: f64 = 20.0;
/// How long an over-long prompt hangs under `overlong_prompt_behaviour = "hang"`.
const HANG: Duration = Duration::from_secs(30);
/// Longest a cancelled stream keeps its slot under `hold_slot_after_cancel`.
const MAX_HOLD: Duration = Duration::from_secs(30);

impl ProfileState {
    /// The slow-down factor of a request admitted now (1 without drift).
    fn drift_factor(&self) -> f64 {
        let now = Instant::now();
        let mut b = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        let idle = self.in_flight.load(Ordering::Relaxed) == 0 && self.queued.load(Ordering::Relaxed) == 0;
        if idle && now.duration_since(b.last_activity) >= DRIFT_IDLE_RESET {
            b.since = now;
        }
        b.last_activity = now;
        let minutes = now.duration_since(b.since).as_secs_f64() / 60.0;
        (1.0 + self.profile.latency_drift_per_minute * minutes).min(DRIFT_MAX_FACTOR)
    }

    fn touch(&self) {
        let mut b = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        b.last_activity = Instant::now();
    }

    /// The `model` field of responses.
    fn reported_model(&self) -> &str {
        self.profile.reported_model.as_deref().unwrap_or(&self.profile.name)
    }
}

/// Counters reported by `/metrics`, updated once per request.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// (model, HTTP status) → requests finished.
    pub requests: BTreeMap<(String, u16), u64>,
    /// (model, fault kind) → faults injected.
    pub faults: BTreeMap<(String, &'static str), u64>,
}

/// Metrics label for requests naming no known model.
pub(crate) const UNKNOWN_MODEL_LABEL: &str = "unknown";

impl MockState {
    pub fn new(config: MockConfig) -> Result<MockState, String> {
        let mut by_name = HashMap::new();
        for (i, p) in config.profiles.iter().enumerate() {
            p.validate()
                .map_err(|(field, message)| format!("model profile {:?}: field `{field}` {message}", p.name))?;
            if by_name.insert(p.name.clone(), i).is_some() {
                return Err(format!("model profile {:?} is defined twice", p.name));
            }
        }
        let profiles = config
            .profiles
            .into_iter()
            .map(|profile| ProfileState {
                slots: profile.slots.map(|n| Arc::new(Semaphore::new(n as usize))),
                profile,
                queued: AtomicU64::new(0),
                in_flight: AtomicU64::new(0),
                tokens_generated: AtomicU64::new(0),
                prompt_tokens: AtomicU64::new(0),
                admitted: AtomicU64::new(0),
                window: Mutex::new(RateWindow {
                    started: Instant::now(),
                    used: 0,
                }),
                busy: Mutex::new(BusyClock {
                    since: Instant::now(),
                    last_activity: Instant::now(),
                }),
            })
            .collect();
        Ok(MockState {
            profiles,
            by_name,
            answers: AnswerKey::new(config.answer_keys),
            seed: config.seed,
            log: RequestLog::default(),
            next_seq: AtomicU64::new(1),
            counters: Mutex::new(Counters::default()),
            started_unix_s: unix_ms() as u64 / 1000,
        })
    }

    fn count_fault(&self, model: &str, kind: &'static str) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        *c.faults.entry((model.to_string(), kind)).or_default() += 1;
    }
}

pub(crate) fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/mock/requests", get(list_requests).delete(clear_requests))
        .fallback(unknown_url)
        .layer(axum::middleware::map_response(server_header))
        .with_state(state)
}

async fn server_header(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
    response
}

async fn chat(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Api::Chat, &headers, &body).await
}

async fn completions(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Api::Completions, &headers, &body).await
}

async fn models(State(state): State<Shared>) -> Response {
    let data: Vec<serde_json::Value> = state
        .profiles
        .iter()
        .filter(|p| !p.profile.unlisted)
        .map(|p| {
            serde_json::json!({
                "id": p.profile.name,
                "object": "model",
                "created": state.started_unix_s,
                "owned_by": "bakeoff-mock",
                "max_model_len": p.profile.context_length,
            })
        })
        .collect();
    axum::Json(serde_json::json!({ "object": "list", "data": data })).into_response()
}

/// Whether every profile served sets a server-wide trait (an empty mock has none).
fn all_profiles(state: &MockState, trait_set: impl Fn(&ModelProfile) -> bool) -> bool {
    !state.profiles.is_empty() && state.profiles.iter().all(|p| trait_set(&p.profile))
}

async fn health(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    if all_profiles(&state, |p| p.no_health) {
        return unknown_url(method, uri).await;
    }
    axum::Json(serde_json::json!({ "status": "ok", "version": crate::VERSION })).into_response()
}

async fn metrics(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    if all_profiles(&state, |p| p.no_metrics) {
        return unknown_url(method, uri).await;
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        super::metrics::render(&state),
    )
        .into_response()
}

#[derive(Deserialize)]
struct LogQuery {
    model: Option<String>,
    since_seq: Option<u64>,
}

async fn list_requests(State(state): State<Shared>, Query(q): Query<LogQuery>) -> Response {
    axum::Json(state.log.page(q.model.as_deref(), q.since_seq)).into_response()
}

async fn clear_requests(State(state): State<Shared>) -> StatusCode {
    state.log.clear();
    StatusCode::NO_CONTENT
}

async fn unknown_url(method: Method, uri: Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("Unknown request URL: {method} {}.", uri.path()),
        "invalid_request_error",
        None,
        Some("unknown_url"),
    )
    .into_response()
}

/// An error in OpenAI's shape: `{"error":{"message","type","param","code"}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
    retry_after_s: Option<u64>,
}

impl ApiError {
    fn new(
        status: StatusCode,
        message: impl Into<String>,
        kind: &'static str,
        param: Option<&'static str>,
        code: Option<&'static str>,
    ) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param,
            code,
            retry_after_s: None,
        }
    }

    fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message, "invalid_request_error", param, None)
    }

    fn rate_limited(message: impl Into<String>, code: &'static str, retry_after_s: u64) -> ApiError {
        ApiError {
            retry_after_s: Some(retry_after_s),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, message, "requests", None, Some(code))
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "message": self.message, "type": self.kind, "param": self.param, "code": self.code }
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after_s {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

/// A request after parsing and checking, before any model logic.
struct Parsed {
    model: String,
    stream: bool,
    include_usage: bool,
    prompt_tokens: u32,
    max_tokens: Option<u32>,
    min_tokens: u32,
    ignore_eos: bool,
    /// The text answers are matched on: last user message (chat) or the prompt (completions).
    match_text: Option<String>,
}

#[derive(Deserialize)]
struct RawRequest {
    model: Option<String>,
    messages: Option<Vec<RawMessage>>,
    prompt: Option<serde_json::Value>,
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    min_tokens: Option<i64>,
    ignore_eos: Option<bool>,
    n: Option<i64>,
}

#[derive(Deserialize)]
struct RawMessage {
    role: String,
    #[serde(default)]
    content: serde_json::Value,
}

#[derive(Deserialize)]
struct RawStreamOptions {
    #[serde(default)]
    include_usage: bool,
}

fn parse_request(api: Api, body: &[u8]) -> Result<Parsed, ApiError> {
    let raw: RawRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("We could not parse the JSON body of your request: {e}."), None))?;
    let model = raw
        .model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid("You must provide a model parameter.", Some("model")))?;
    if raw.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid(
            "The mock generates one choice per request; `n` must be 1.",
            Some("n"),
        ));
    }
    let max_param = if raw.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max_tokens = match raw.max_completion_tokens.or(raw.max_tokens) {
        None => None,
        Some(m) if m >= 1 => Some(u32::try_from(m).unwrap_or(u32::MAX)),
        Some(m) => {
            return Err(ApiError::invalid(
                format!(
                    "Invalid '{max_param}': integer below minimum value. Expected a value >= 1, but got {m} instead."
                ),
                Some(max_param),
            ));
        }
    };
    let min_tokens = match raw.min_tokens {
        Some(m) if m < 0 => return Err(ApiError::invalid("`min_tokens` must be >= 0.", Some("min_tokens"))),
        Some(m) => u32::try_from(m).unwrap_or(u32::MAX),
        None => 0,
    };
    let (prompt_tokens, match_text) = match api {
        Api::Chat => {
            let messages = raw
                .messages
                .filter(|m| !m.is_empty())
                .ok_or_else(|| ApiError::invalid("`messages` must be a non-empty array.", Some("messages")))?;
            let mut contents = Vec::with_capacity(messages.len());
            for m in &messages {
                contents.push(message_text(&m.content)?);
            }
            let last_user = messages
                .iter()
                .zip(&contents)
                .rev()
                .find(|(m, _)| m.role == "user")
                .map(|(_, c)| c.clone());
            (count_chat_tokens(contents.iter().map(String::as_str)), last_user)
        }
        Api::Completions => prompt_of(raw.prompt)?,
    };
    Ok(Parsed {
        model,
        stream: raw.stream.unwrap_or(false),
        include_usage: raw.stream_options.is_some_and(|o| o.include_usage),
        prompt_tokens,
        max_tokens,
        min_tokens,
        ignore_eos: raw.ignore_eos.unwrap_or(false),
        match_text,
    })
}

/// A message's text: a string, or the text parts of a content array.
fn message_text(content: &serde_json::Value) -> Result<String, ApiError> {
    match content {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Null => Ok(String::new()),
        serde_json::Value::Array(parts) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
            .collect::<Vec<_>>()
            .join("")),
        _ => Err(ApiError::invalid(
            "A message's `content` must be a string or an array of content parts.",
            Some("messages"),
        )),
    }
}

/// Prompt tokens and matchable text of a completions `prompt` (one string, or one token array).
fn prompt_of(prompt: Option<serde_json::Value>) -> Result<(u32, Option<String>), ApiError> {
    let refuse = || {
        ApiError::invalid(
            "`prompt` must be one string or one array of token ids (the mock serves one prompt per request).",
            Some("prompt"),
        )
    };
    match prompt.ok_or_else(|| ApiError::invalid("You must provide a prompt.", Some("prompt")))? {
        serde_json::Value::String(s) => Ok((count_tokens(&s), Some(s))),
        serde_json::Value::Array(items) => match items.as_slice() {
            [serde_json::Value::String(s)] => Ok((count_tokens(s), Some(s.clone()))),
            ids if !ids.is_empty() && ids.iter().all(serde_json::Value::is_u64) => {
                Ok((u32::try_from(ids.len()).unwrap_or(u32::MAX), None))
            }
            _ => Err(refuse()),
        },
        _ => Err(refuse()),
    }
}

/// A fixed one-minute request window per profile.
struct RateWindow {
    started: Instant,
    used: u32,
}

struct RateStatus {
    allowed: bool,
    limit: u32,
    remaining: u32,
    reset: Duration,
}

const RATE_WINDOW: Duration = Duration::from_secs(60);

fn admit(ps: &ProfileState) -> RateStatus {
    let limit = ps.profile.requests_per_minute;
    let mut w = ps.window.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if now.duration_since(w.started) >= RATE_WINDOW {
        w.started = now;
        w.used = 0;
    }
    let allowed = w.used < limit;
    if allowed {
        w.used += 1;
    }
    RateStatus {
        allowed,
        limit,
        remaining: limit - w.used,
        reset: RATE_WINDOW.saturating_sub(now.duration_since(w.started)),
    }
}

fn rate_headers(response: &mut Response, rate: &RateStatus) {
    let h = response.headers_mut();
    h.insert("x-ratelimit-limit-requests", HeaderValue::from(rate.limit));
    h.insert("x-ratelimit-remaining-requests", HeaderValue::from(rate.remaining));
    if let Ok(v) = HeaderValue::from_str(&format!("{}s", rate.reset.as_secs_f64().ceil() as u64)) {
        h.insert("x-ratelimit-reset-requests", v);
    }
}

/// Follows one request from receipt to its record in the log; a request dropped before it
/// finished (the client went away) is recorded as such.
struct Tracker {
    state: Shared,
    profile: Option<usize>,
    received: Instant,
    record: RequestRecord,
    done: bool,
}

impl Tracker {
    fn new(state: Shared, api: Api, headers: &HeaderMap) -> Tracker {
        let seq = state.next_seq.fetch_add(1, Ordering::Relaxed);
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Completions => "cmpl",
        };
        let client_request_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.chars().take(200).collect());
        Tracker {
            state,
            profile: None,
            received: Instant::now(),
            record: RequestRecord {
                seq,
                id: format!("{prefix}-mock-{seq}"),
                client_request_id,
                endpoint: api.as_str(),
                received_unix_ms: unix_ms(),
                ..RequestRecord::default()
            },
            done: false,
        }
    }

    fn ms_since_received(&self) -> f64 {
        self.received.elapsed().as_secs_f64() * 1000.0
    }

    fn queue_done(&mut self) {
        self.record.queue_wait_ms = self.ms_since_received();
    }

    /// `n` tokens (reasoning or content) were just handed to the connection.
    fn sent(&mut self, n: u32, reasoning: bool, chunks: u32, malformed: bool) {
        if n == 0 {
            return;
        }
        let now = self.ms_since_received();
        let r = &mut self.record;
        r.first_token_ms.get_or_insert(now);
        if !reasoning {
            r.first_content_ms.get_or_insert(now);
        }
        r.last_token_ms = Some(now);
        r.tokens_sent += n;
        if reasoning {
            r.reasoning_tokens_sent += n;
        }
        r.token_chunks_sent += chunks;
        r.malformed_chunks += u32::from(malformed);
        if let Some(p) = self.profile {
            self.state.profiles[p]
                .tokens_generated
                .fetch_add(u64::from(n), Ordering::Relaxed);
        }
    }

    fn finish(&mut self, status: u16, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        self.record.status = status;
        self.record.outcome = outcome;
        self.record.end_ms = self.ms_since_received();
        let label = match self.profile {
            Some(p) => self.state.profiles[p].profile.name.clone(),
            None => UNKNOWN_MODEL_LABEL.to_string(),
        };
        {
            let mut c = self.state.counters.lock().unwrap_or_else(|p| p.into_inner());
            *c.requests.entry((label, status)).or_default() += 1;
        }
        let record = std::mem::take(&mut self.record);
        self.state.log.push(record);
    }

    fn reject(mut self, error: ApiError) -> Response {
        self.record.error_code = Some(error.code.unwrap_or(error.kind).to_string());
        self.finish(error.status.as_u16(), Outcome::Error);
        error.into_response()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if !self.done {
            // 499: nginx's "client closed request"; a stream's 200 had already gone out.
            let status = if self.record.stream { 200 } else { 499 };
            self.finish(status, Outcome::ClientDisconnected);
        }
    }
}

/// Holding a generation slot; counted as in flight until dropped.
struct Slot {
    state: Shared,
    profile: usize,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let ps = &self.state.profiles[self.profile];
        ps.in_flight.fetch_sub(1, Ordering::Relaxed);
        ps.touch();
    }
}

/// Counted in the queue depth while waiting for a slot (also when the wait is abandoned).
struct Queued<'a>(&'a AtomicU64);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits (FIFO: tokio's semaphore is fair) for one of the profile's slots.
async fn acquire_slot(state: &Shared, profile: usize) -> Slot {
    let ps = &state.profiles[profile];
    let permit = match &ps.slots {
        Some(slots) => {
            ps.queued.fetch_add(1, Ordering::Relaxed);
            let _queued = Queued(&ps.queued);
            // The semaphore is never closed; a closed one would just mean "no limit".
            slots.clone().acquire_owned().await.ok()
        }
        None => None,
    };
    ps.in_flight.fetch_add(1, Ordering::Relaxed);
    Slot {
        state: state.clone(),
        profile,
        _permit: permit,
    }
}

/// Both completion endpoints: check, decide faults and the answer, then respond.
async fn handle(state: Shared, api: Api, headers: &HeaderMap, body: &[u8]) -> Response {
    let mut tracker = Tracker::new(state.clone(), api, headers);
    let req = match parse_request(api, body) {
        Ok(r) => r,
        Err(mut e) => {
            // The profile named in the body (if any) decides how invalid requests are answered.
            let named = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("model").and_then(|m| m.as_str()).map(str::to_string))
                .and_then(|m| state.by_name.get(&m).copied());
            if let Some(p) = named {
                let status = state.profiles[p].profile.invalid_param_status;
                e.status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
                if e.status.is_server_error() {
                    e.kind = "server_error";
                }
            }
            return tracker.reject(e);
        }
    };
    tracker.record.model = req.model.clone();
    tracker.record.stream = req.stream;
    tracker.record.prompt_tokens = req.prompt_tokens;
    let Some(&p) = state.by_name.get(&req.model) else {
        let error = ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "The model `{}` does not exist or you do not have access to it.",
                req.model
            ),
            "invalid_request_error",
            Some("model"),
            Some("model_not_found"),
        );
        // Not found is not a stream: nothing was sent.
        tracker.record.stream = false;
        return tracker.reject(error);
    };
    tracker.profile = Some(p);
    let ps = &state.profiles[p];
    let profile = &ps.profile;

    let mut prompt_tokens = req.prompt_tokens;
    if let Err(mut e) = check_context(profile, api, req.prompt_tokens, req.max_tokens) {
        match profile.overlong_prompt_behaviour {
            OverlongBehaviour::Reject => {}
            OverlongBehaviour::ServerError => {
                e.status = StatusCode::INTERNAL_SERVER_ERROR;
                e.kind = "server_error";
                e.code = None;
                e.param = None;
            }
            OverlongBehaviour::Hang => {
                state.count_fault(&profile.name, "overlong_hang");
                tokio::time::sleep(HANG).await;
                e = ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "Upstream timed out.",
                    "server_error",
                    None,
                    None,
                );
            }
            OverlongBehaviour::Truncate => {
                state.count_fault(&profile.name, "overlong_truncate");
                // Keep the end of the prompt that fits beside the completion, and say nothing.
                let room = profile
                    .context_length
                    .saturating_sub(req.max_tokens.unwrap_or(profile.default_max_tokens))
                    .max(1);
                prompt_tokens = req.prompt_tokens.min(room);
            }
        }
        if prompt_tokens == req.prompt_tokens {
            tracker.record.stream = false;
            return tracker.reject(e);
        }
    }
    tracker.record.prompt_tokens = prompt_tokens;
    let rate = admit(ps);
    let rate_headers_on = !profile.no_rate_limit_headers;
    let with_rate = |mut response: Response| {
        if rate_headers_on {
            rate_headers(&mut response, &rate);
        }
        response
    };
    let refuse = |mut tracker: Tracker, error: ApiError| {
        tracker.record.stream = false;
        with_rate(tracker.reject(error))
    };
    if !rate.allowed {
        let error = ApiError::rate_limited(
            format!(
                "Rate limit reached for {} on requests per minute: limit {}.",
                profile.name, rate.limit
            ),
            "rate_limit_exceeded",
            rate.reset.as_secs_f64().ceil() as u64,
        );
        return refuse(tracker, error);
    }
    let n = ps.admitted.fetch_add(1, Ordering::Relaxed);
    let seed = state.seed.to_le_bytes();
    let mut rng = SplitMix::new(stable_hash(&[&seed, profile.name.as_bytes(), &n.to_le_bytes()]));
    let roll = rng.next_f64();
    if roll < profile.error_429_rate {
        state.count_fault(&profile.name, "error_429");
        let error = ApiError::rate_limited(
            "Rate limit reached (injected by the mock's error_429_rate).",
            "rate_limit_exceeded",
            u64::from(profile.retry_after_s),
        );
        return refuse(tracker, error);
    }
    if roll < profile.error_429_rate + profile.error_500_rate {
        state.count_fault(&profile.name, "error_500");
        let error = ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "The server had an error while processing your request. Sorry about that! (injected by the mock's error_500_rate)",
            "server_error",
            None,
            None,
        );
        return refuse(tracker, error);
    }
    if let (Some(limit), Some(_)) = (profile.max_queue, ps.slots.as_ref())
        && ps.queued.load(Ordering::Relaxed) >= u64::from(limit)
    {
        let error = ApiError::rate_limited(
            format!("{} is overloaded: {limit} requests are already queued.", profile.name),
            "queue_full",
            u64::from(profile.retry_after_s),
        );
        return refuse(tracker, error);
    }

    let case: Option<CaseRef> = req.match_text.as_deref().and_then(|text| match api {
        Api::Chat => state.answers.find_chat(text),
        Api::Completions => state.answers.find_prompt(text),
    });
    // A separate generator, so an inconsistent profile draws its faults exactly as before.
    let flip = profile.inconsistency > 0.0
        && SplitMix::new(stable_hash(&[
            &seed,
            profile.name.as_bytes(),
            &n.to_le_bytes(),
            b"inconsistency",
        ]))
        .chance(profile.inconsistency);
    let answer = case.map(|c| {
        let usual = state.answers.answer(c, state.seed, &profile.name, profile.accuracy);
        if flip {
            let opposite = if usual.correct { 0.0 } else { 1.0 };
            state.answers.answer(c, state.seed, &profile.name, opposite)
        } else {
            usual
        }
    });
    tracker.record.case = answer.as_ref().map(|a| CaseTruth {
        set: a.set.clone(),
        case_id: a.case_id.clone(),
        correct: a.correct,
    });
    let max_tokens = match req.max_tokens {
        Some(m) if profile.ignore_max_tokens => m.saturating_mul(2).saturating_add(1),
        Some(m) => m,
        None => profile
            .default_max_tokens
            .min(profile.context_length.saturating_sub(prompt_tokens).max(1)),
    };
    let limits = Limits {
        max_tokens,
        min_tokens: req.min_tokens,
        ignore_eos: req.ignore_eos,
    };
    let filler_seed = stable_hash(&[
        &seed,
        profile.name.as_bytes(),
        req.match_text.as_deref().unwrap_or_default().as_bytes(),
    ]);
    // A prompt that is no case may be a judge prompt (`llm-judge` graders against the mock).
    let text = answer
        .map(|a| a.text)
        .or_else(|| req.match_text.as_deref().and_then(super::generate::judge_reply));
    let plan = Plan::new(profile, api == Api::Chat, text, limits, filler_seed);
    let mut schedule = Schedule::new(profile, prompt_tokens, plan.total(), &mut rng);
    schedule.slow_down(ps.drift_factor());
    if let Some((_, pause)) = schedule.stall {
        state.count_fault(&profile.name, "stall");
        tracker.record.stall_ms = Some(pause.as_secs_f64() * 1000.0);
    }
    if schedule.cut_after.is_some() {
        state.count_fault(&profile.name, "cut");
    }
    if schedule.malformed_at.is_some() {
        state.count_fault(&profile.name, "malformed");
    }
    ps.prompt_tokens.fetch_add(u64::from(prompt_tokens), Ordering::Relaxed);
    let created = unix_ms() as u64 / 1000;
    let renderer = Renderer::new(api, &tracker.record.id, created, ps.reported_model());
    let generator = Generator::new(plan, schedule, rng, Instant::now());
    let id = tracker.record.id.clone();
    let mut response = if req.stream {
        stream_response(Streamer {
            state: state.clone(),
            profile: p,
            api,
            tracker,
            renderer,
            generator,
            include_usage: req.include_usage && !profile.no_usage_in_stream,
            prompt_tokens,
            slot: None,
            phase: Phase::Start,
        })
    } else {
        whole_response(state.clone(), p, api, tracker, generator, prompt_tokens, created).await
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    with_rate(response)
}

fn check_context(profile: &ModelProfile, api: Api, prompt: u32, max_tokens: Option<u32>) -> Result<(), ApiError> {
    let limit = profile.context_length;
    let (param, what) = match api {
        Api::Chat => ("messages", "messages"),
        Api::Completions => ("prompt", "prompt"),
    };
    let message = match max_tokens {
        Some(m) if u64::from(prompt) + u64::from(m) > u64::from(limit) => format!(
            "This model's maximum context length is {limit} tokens. However, you requested {} tokens ({prompt} in the {what}, {m} in the completion). Please reduce the length of the {what} or completion.",
            u64::from(prompt) + u64::from(m)
        ),
        None if prompt >= limit => format!(
            "This model's maximum context length is {limit} tokens. However, your {what} resulted in {prompt} tokens. Please reduce the length of the {what}."
        ),
        _ => return Ok(()),
    };
    Err(ApiError::new(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        Some(param),
        Some("context_length_exceeded"),
    ))
}

enum Phase {
    Start,
    Tokens,
    Usage,
    Done,
    End,
}

/// One streaming response: polled by the connection's own task (no task or channel per stream).
struct Streamer {
    state: Shared,
    profile: usize,
    api: Api,
    tracker: Tracker,
    renderer: Renderer,
    generator: Generator,
    include_usage: bool,
    prompt_tokens: u32,
    slot: Option<Slot>,
    phase: Phase,
}

impl Streamer {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            match self.phase {
                Phase::Start => {
                    self.slot = Some(acquire_slot(&self.state, self.profile).await);
                    self.tracker.queue_done();
                    self.generator.begin(Instant::now());
                    self.phase = Phase::Tokens;
                    if self.api == Api::Chat {
                        return Some(self.renderer.role());
                    }
                }
                Phase::Tokens => match self.generator.next().await {
                    Step::Tokens {
                        start,
                        end,
                        reasoning,
                        malformed,
                    } => {
                        let plan = &self.generator.plan;
                        let chunk = self
                            .renderer
                            .tokens((start..end).map(|i| plan.piece(i)), reasoning, malformed);
                        self.tracker.sent(end - start, reasoning, 1, malformed);
                        return Some(chunk);
                    }
                    Step::Cut => {
                        self.slot = None;
                        self.phase = Phase::End;
                        self.tracker.finish(200, Outcome::Cut);
                        return None;
                    }
                    Step::Finished => {
                        self.slot = None;
                        let reason = self.generator.plan.finish_reason;
                        self.tracker.record.finish_reason = Some(reason);
                        self.phase = if self.include_usage { Phase::Usage } else { Phase::Done };
                        return Some(self.renderer.finish(reason));
                    }
                },
                Phase::Usage => {
                    self.phase = Phase::Done;
                    let r = &self.tracker.record;
                    let usage = usage_json(self.prompt_tokens, r.tokens_sent, r.reasoning_tokens_sent);
                    return Some(self.renderer.usage(&usage));
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    self.tracker.finish(200, Outcome::Completed);
                    return Some(Renderer::done());
                }
                Phase::End => return None,
            }
        }
    }
}

impl Drop for Streamer {
    /// A stream abandoned mid-generation frees its slot at once, unless the profile keeps
    /// generating for nobody (`hold_slot_after_cancel`).
    fn drop(&mut self) {
        if !matches!(self.phase, Phase::Tokens) || !self.state.profiles[self.profile].profile.hold_slot_after_cancel {
            return;
        }
        let (Some(slot), Ok(runtime)) = (self.slot.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        self.state
            .count_fault(&self.state.profiles[self.profile].profile.name, "held_after_cancel");
        let hold = self.generator.remaining().min(MAX_HOLD);
        runtime.spawn(async move {
            tokio::time::sleep(hold).await;
            drop(slot);
        });
    }
}

fn stream_response(streamer: Streamer) -> Response {
    let body = futures_util::stream::unfold(streamer, |mut s| async move {
        s.next_chunk().await.map(|chunk| (Ok::<_, Infallible>(chunk), s))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A non-streaming response: generate on the same schedule, then send everything at once.
async fn whole_response(
    state: Shared,
    profile: usize,
    api: Api,
    mut tracker: Tracker,
    mut generator: Generator,
    prompt_tokens: u32,
    created: u64,
) -> Response {
    let slot = acquire_slot(&state, profile).await;
    tracker.queue_done();
    generator.begin(Instant::now());
    let (mut reasoning, mut content) = (String::new(), String::new());
    let (mut reasoning_n, mut content_n, mut malformed) = (0, 0, false);
    let cut = loop {
        match generator.next().await {
            Step::Tokens {
                start,
                end,
                reasoning: is_reasoning,
                malformed: m,
            } => {
                let (text, n) = if is_reasoning {
                    (&mut reasoning, &mut reasoning_n)
                } else {
                    (&mut content, &mut content_n)
                };
                for i in start..end {
                    text.push_str(generator.plan.piece(i));
                }
                *n += end - start;
                malformed |= m;
            }
            Step::Cut => break true,
            Step::Finished => break false,
        }
    };
    drop(slot);
    tracker.sent(reasoning_n, true, 0, false);
    tracker.sent(content_n, false, 0, malformed);
    let finish_reason = generator.plan.finish_reason;
    let usage = usage_json(prompt_tokens, reasoning_n + content_n, reasoning_n);
    let model = state.profiles[profile].reported_model();
    let body = match api {
        Api::Chat => {
            let mut message = serde_json::json!({ "role": "assistant", "content": content });
            if reasoning_n > 0 {
                message["reasoning_content"] = serde_json::Value::String(reasoning);
            }
            serde_json::json!({
                "id": tracker.record.id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason }],
                "usage": usage,
                "system_fingerprint": SERVER_HEADER,
            })
        }
        Api::Completions => serde_json::json!({
            "id": tracker.record.id, "object": "text_completion", "created": created, "model": model,
            "choices": [{ "index": 0, "text": content, "logprobs": null, "finish_reason": finish_reason }],
            "usage": usage,
            "system_fingerprint": SERVER_HEADER,
        }),
    };
    let mut bytes = body.to_string().into_bytes();
    let body = if cut {
        // The connection drops half-way through the body.
        tracker.finish(200, Outcome::Cut);
        bytes.truncate(bytes.len() / 2);
        let head = futures_util::stream::iter([Ok(Bytes::from(bytes))]);
        // The pause lets the first half reach the client before the connection is dropped.
        let failure = futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err(std::io::Error::other("connection cut (injected by the mock)"))
        });
        Body::from_stream(futures_util::StreamExt::chain(head, failure))
    } else {
        if malformed {
            // The closing brace goes missing: the body is not valid JSON.
            bytes.pop();
        }
        tracker.record.finish_reason = Some(finish_reason);
        tracker.finish(200, Outcome::Completed);
        Body::from(bytes)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}
