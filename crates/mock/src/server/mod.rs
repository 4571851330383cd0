//! The HTTP side: router, shared state and the small endpoints. A completion request goes
//! through `completion::handle`: parsed (`request`), admitted (`admission`), given its injected
//! faults (`faults`) and answered streaming (`streaming`) or whole (`whole`), followed from
//! receipt to the log by a `tracker::Tracker`.
mod admission;
mod completion;
mod faults;
mod request;
pub(crate) mod simulated;
mod streaming;
mod tracker;
mod whole;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::answers::AnswerKey;
use super::generate::Api;
use super::listener::LastRead;
use super::log::RequestLog;
use super::metrics::{Counters, ProfileGauges};
use super::profile::ModelProfile;
use super::rng::stable_hash;
use super::{MockConfig, SERVER_HEADER};
use crate::kernel_stamps::wall_clock_ns;
use admission::RateWindow;
use completion::handle;
use request::ApiError;

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
    /// What a serving engine would report about itself (`simulated`).
    pub sim: simulated::Simulated,
    /// Admitted requests per request text (its stable hash → times seen): with the text it keys
    /// every draw of a request, so what a case gets never depends on arrival order, threads or
    /// other profiles' traffic.
    seen: Mutex<HashMap<u64, u64>>,
    /// Requests admitted so far, in arrival order: numbers the faults `rate_limit_requests` and
    /// `cut_requests` place (they name requests, not texts).
    pub admitted: AtomicU64,
    window: Mutex<RateWindow>,
    /// When the current stretch of continuous load began (for `latency_drift_per_minute`).
    busy: Mutex<BusyClock>,
    /// The profile's prefix cache, when it has one (`prefix_cache`).
    pub(crate) prefix: Option<crate::prefix_cache::PrefixCache>,
}

/// Continuous load: since when, and when the profile last saw a request start or end.
struct BusyClock {
    since: Instant,
    last_activity: Instant,
}

/// Distinct request texts a profile remembers for [`ProfileState::draw_key`].
const SEEN_CAPACITY: usize = 100_000;

/// Quiet time after which a drifting profile is fresh again.
const DRIFT_IDLE_RESET: Duration = Duration::from_secs(2);
/// Most a drifting profile slows down (×).
const DRIFT_MAX_FACTOR: f64 = 20.0;

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

    /// The key of every seeded draw for a request with `text` (the case's prompt): the seed,
    /// this profile, the text and how many times this profile was sent that text before. The
    /// first send of a case and its retries thus always get the same draws, whatever else is in
    /// flight; only identical texts in flight together share their draws by arrival.
    fn draw_key(&self, seed: u64, text: &str) -> u64 {
        let text_hash = stable_hash(&[text.as_bytes()]);
        let occurrence = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            // Bounded memory for endless distinct prompts; only such runs see counts restart.
            if seen.len() >= SEEN_CAPACITY && !seen.contains_key(&text_hash) {
                seen.clear();
            }
            let count = seen.entry(text_hash).or_insert(0);
            let occurrence = *count;
            *count += 1;
            occurrence
        };
        stable_hash(&[
            &seed.to_le_bytes(),
            self.profile.name.as_bytes(),
            &text_hash.to_le_bytes(),
            &occurrence.to_le_bytes(),
        ])
    }

    /// Whether this profile was sent `text` before the request `draw_key` just counted (a
    /// prefix-cache hit of the simulated engine).
    fn seen_before(&self, text: &str) -> bool {
        let text_hash = stable_hash(&[text.as_bytes()]);
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(&text_hash).is_some_and(|n| *n > 1)
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
                prefix: profile.prefix_cache.then(|| {
                    crate::prefix_cache::PrefixCache::new(
                        profile.prefix_cache_block_tokens,
                        profile
                            .prefix_cache_ttl_ms
                            .map(|ms| Duration::from_secs_f64(ms / 1000.0)),
                        profile.prefix_cache_entries as usize,
                    )
                }),
                slots: profile.slots.map(|n| Arc::new(Semaphore::new(n as usize))),
                profile,
                queued: AtomicU64::new(0),
                in_flight: AtomicU64::new(0),
                tokens_generated: AtomicU64::new(0),
                prompt_tokens: AtomicU64::new(0),
                sim: simulated::Simulated::default(),
                seen: Mutex::new(HashMap::new()),
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

    /// Each profile's gauges, as `/metrics` reports them.
    fn gauges(&self) -> Vec<ProfileGauges> {
        self.profiles
            .iter()
            .map(|p| {
                let (ttft_cumulative, ttft_sum_s) = p.sim.ttft_cumulative();
                let in_flight = p.in_flight.load(Ordering::Relaxed);
                let gpu = simulated::gpu_utilisation(in_flight, p.profile.slots);
                ProfileGauges {
                    model: p.profile.name.clone(),
                    in_flight: p.in_flight.load(Ordering::Relaxed),
                    queued: p.queued.load(Ordering::Relaxed),
                    slots: p.profile.slots.map_or(0, u64::from),
                    tokens_generated: p.tokens_generated.load(Ordering::Relaxed),
                    prompt_tokens: p.prompt_tokens.load(Ordering::Relaxed),
                    kv_usage: p.profile.kv_cache_tokens.map_or(0.0, |c| {
                        (p.sim.kv_tokens.load(Ordering::Relaxed) as f64 / f64::from(c)).min(1.0)
                    }),
                    kv_tokens: p.sim.kv_tokens.load(Ordering::Relaxed),
                    preemptions: p.sim.preemptions.load(Ordering::Relaxed),
                    prefix_queries: p.sim.prefix_queries.load(Ordering::Relaxed),
                    prefix_hits: p.sim.prefix_hits.load(Ordering::Relaxed),
                    ttft_cumulative,
                    ttft_sum_s,
                    gpu_utilisation: gpu,
                    gpu_power_watts: p.profile.gpu_idle_watts
                        + (p.profile.gpu_busy_watts - p.profile.gpu_idle_watts) * gpu,
                }
            })
            .collect()
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
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/openai/deployments/{deployment}/chat/completions", post(azure_chat))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/mock/gpu/metrics", get(gpu_metrics))
        .route("/mock/requests", get(list_requests).delete(clear_requests))
        .route("/tokenize", post(tokenize))
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

async fn chat(State(state): State<Shared>, connection: Connection, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Api::Chat, received(connection), &headers, &body, None).await
}

/// Anthropic's Messages API (`POST /v1/messages`): the system prompt apart, named stream
/// events, usage with `input_tokens` excluding the cache's read and written tokens.
async fn messages(State(state): State<Shared>, connection: Connection, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Api::Messages, received(connection), &headers, &body, None).await
}

async fn responses(State(state): State<Shared>, connection: Connection, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Api::Responses, received(connection), &headers, &body, None).await
}

#[derive(Deserialize)]
struct AzureQuery {
    #[serde(rename = "api-version")]
    api_version: Option<String>,
}

/// Azure OpenAI's shape: the deployment in the path serves the request (whatever `model` the
/// body names), an `api-version` query is required, and so is an `api-key` header (its value
/// is not checked, nor ever logged).
async fn azure_chat(
    State(state): State<Shared>,
    connection: Connection,
    axum::extract::Path(deployment): axum::extract::Path<String>,
    Query(q): Query<AzureQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = received(connection);
    let Some(version) = q.api_version.filter(|v| !v.is_empty()) else {
        return azure_error(StatusCode::NOT_FOUND, "404", "Resource not found");
    };
    if !headers.contains_key("api-key") {
        return azure_error(
            StatusCode::UNAUTHORIZED,
            "401",
            "Access denied due to missing subscription key. Make sure to include the api-key header.",
        );
    }
    let body = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(serde_json::Value::Object(mut m)) => {
            m.insert("model".into(), serde_json::Value::String(deployment));
            Bytes::from(serde_json::Value::Object(m).to_string())
        }
        _ => body,
    };
    handle(state, Api::Chat, received, &headers, &body, Some(version)).await
}

fn azure_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": { "code": code, "message": message } })),
    )
        .into_response()
}

async fn completions(State(state): State<Shared>, connection: Connection, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Api::Completions, received(connection), &headers, &body, None).await
}

/// The connection a request came on (known whenever the router is served by `mock::spawn`).
type Connection = Option<Extension<ConnectInfo<LastRead>>>;

/// When the request (read whole by now) reached the machine; now without a kernel stamp.
fn received(connection: Connection) -> Received {
    let (now, now_ns) = (Instant::now(), wall_clock_ns());
    let conn = connection.map(|c| c.0.0);
    let ns = conn.as_ref().and_then(LastRead::kernel_ns).unwrap_or(now_ns);
    let ago = Duration::from_nanos(u64::try_from(now_ns - ns).unwrap_or(0));
    Received {
        at: now.checked_sub(ago).unwrap_or(now),
        unix_ms: ns as f64 / 1e6,
        peer: conn.as_ref().and_then(|c| c.peer),
        connection: conn.map(|c| c.connection).filter(|&n| n > 0),
    }
}

/// A request's receipt on both clocks: the monotonic one its durations are taken on, and the
/// wall clock its record places it on; and the connection it came on, when known.
#[derive(Clone, Copy)]
pub(crate) struct Received {
    pub at: Instant,
    pub unix_ms: f64,
    pub peer: Option<std::net::SocketAddr>,
    pub connection: Option<u64>,
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
        super::metrics::render(
            &state.counters.lock().unwrap_or_else(|p| p.into_inner()),
            &state.gauges(),
        ),
    )
        .into_response()
}

/// The simulated GPUs, as a DCGM exporter would show them.
async fn gpu_metrics(State(state): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        super::metrics::render_gpu(&state.gauges()),
    )
        .into_response()
}

#[derive(Deserialize)]
struct TokenizeRequest {
    content: String,
}

/// llama.cpp's `POST /tokenize` shape (`{"content": …}` → `{"tokens": [ids]}`), counted with the
/// mock's own tokenizer, the one its streams are cut by: a server tokenizer whose counts are
/// the ground truth of every answer the mock sends. Adds no special tokens.
async fn tokenize(body: Bytes) -> Response {
    match serde_json::from_slice::<TokenizeRequest>(&body) {
        Ok(r) => {
            let ids: Vec<u32> = (0..crate::tokens::count_tokens(&r.content)).collect();
            axum::Json(serde_json::json!({ "tokens": ids })).into_response()
        }
        Err(e) => ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("POST /tokenize expects {{\"content\": \"…\"}}: {e}"),
            "invalid_request_error",
            None,
            None,
        )
        .into_response(),
    }
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

fn unix_ms() -> f64 {
    wall_clock_ns() as f64 / 1e6
}
