//! Bookkeeping of one request for `/metrics` and `/mock/requests`.
use std::sync::atomic::Ordering;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::request::ApiError;
use super::{Received, Shared, UNKNOWN_MODEL_LABEL};
use crate::generate::Api;
use crate::log::{Outcome, RequestRecord};

/// Follows one request from receipt (when it reached the machine, `Received`) to its record in
/// the log; a request dropped before it finished (the client went away) is recorded as such.
pub(super) struct Tracker {
    state: Shared,
    pub(super) profile: Option<usize>,
    received: Instant,
    pub(super) record: RequestRecord,
    done: bool,
    /// KV-cache tokens this request holds in the simulated engine.
    kv_held: u64,
}

impl Tracker {
    pub(super) fn new(state: Shared, api: Api, received: Received, headers: &HeaderMap) -> Tracker {
        let seq = state.next_seq.fetch_add(1, Ordering::Relaxed);
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Completions => "cmpl",
            Api::Responses => "resp",
            Api::Messages => "msg",
        };
        let client_request_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.chars().take(200).collect());
        Tracker {
            state,
            profile: None,
            received: received.at,
            record: RequestRecord {
                seq,
                id: format!("{prefix}-mock-{seq}"),
                client_request_id,
                endpoint: api.as_str(),
                auth_header: ["authorization", "api-key", "x-api-key"]
                    .into_iter()
                    .find(|h| headers.contains_key(*h)),
                header_names: headers
                    .keys()
                    .map(|k| k.as_str())
                    .filter(|k| k.starts_with("x-") && *k != "x-request-id")
                    .map(str::to_string)
                    .collect(),
                received_unix_ms: received.unix_ms,
                peer: received.peer.map(|a| a.to_string()),
                connection: received.connection,
                ..RequestRecord::default()
            },
            done: false,
            kv_held: 0,
        }
    }

    fn ms_since_received(&self) -> f64 {
        self.received.elapsed().as_secs_f64() * 1000.0
    }

    pub(super) fn queue_done(&mut self) {
        self.record.queue_wait_ms = self.ms_since_received();
        self.grow_kv(u64::from(self.record.prompt_tokens));
    }

    fn grow_kv(&mut self, n: u64) {
        if let Some(p) = self.profile {
            let ps = &self.state.profiles[p];
            self.kv_held = ps.sim.grow(self.kv_held, n, ps.profile.kv_cache_tokens);
        }
    }

    /// `n` tokens (reasoning or content) were just handed to the connection.
    pub(super) fn sent(&mut self, n: u32, reasoning: bool, chunks: u32, malformed: bool) {
        if n == 0 {
            return;
        }
        let now = self.ms_since_received();
        if self.record.first_token_ms.is_none()
            && let Some(p) = self.profile
        {
            self.state.profiles[p].sim.first_token(now);
        }
        self.grow_kv(u64::from(n));
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

    pub(super) fn finish(&mut self, status: u16, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(p) = self.profile {
            self.state.profiles[p].sim.release(std::mem::take(&mut self.kv_held));
        }
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

    pub(super) fn reject(mut self, error: ApiError) -> Response {
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
