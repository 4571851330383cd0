//! Ground truth: what the mock did for each request, with server-side timestamps, kept in a
//! bounded ring buffer and served at `GET /mock/requests`.
use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;

/// Requests kept; older ones are dropped first.
pub const LOG_CAPACITY: usize = 10_000;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Completed with a finish_reason (and `[DONE]` when streaming).
    #[default]
    Completed,
    /// Refused or failed with an error status (see `status` and `error_code`).
    Error,
    /// Injected: the stream ended mid-way without finish_reason or `[DONE]`.
    Cut,
    /// The client went away before the response was complete.
    ClientDisconnected,
}

/// Which eval case a request was recognised as, and whether the mock answered it right.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseTruth {
    pub set: String,
    pub case_id: String,
    pub correct: bool,
    /// A tool case: the tool-call mistake the answer makes (`tool_faults` kinds, or
    /// `wrong_value`); None when its calls are right.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_fault: Option<&'static str>,
    /// A tool case: how its calls were sent (`native`, `in_text` or `prompt`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_mode: Option<&'static str>,
    /// A conversation turn (1-based); `case_id` is its conversation case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// A conversation turn: whether every earlier reply in the history it was sent was right.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_right: Option<bool>,
    /// A conversation turn: whether it is within the profile's `memory_turns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remembers: Option<bool>,
    /// Asked with `response_format`: `valid` (the answer is the case's expected JSON) or
    /// `invalid_json` (`invalid_json_rate`: its last character dropped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<&'static str>,
}

/// One request as the server saw it. Times are milliseconds since the request was received;
/// a token is "sent" when its chunk is handed to the HTTP connection (for non-streaming
/// responses, when the body is).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct RequestRecord {
    /// Increasing over the server's life; `?since_seq=` returns later ones only.
    pub seq: u64,
    /// The response's `id` (also sent as the `x-request-id` header).
    pub id: String,
    /// The `x-request-id` header the client sent, if any.
    pub client_request_id: Option<String>,
    pub model: String,
    /// `chat`, `completions`, `responses` or `messages`.
    pub endpoint: &'static str,
    /// Which credential header the request carried (`authorization`, `api-key`, `x-api-key`);
    /// never its value.
    pub auth_header: Option<&'static str>,
    /// Names of the other `x-…` headers the client sent (custom headers), never their values.
    pub header_names: Vec<String>,
    /// The `api-version` of a request on an Azure-shaped path
    /// (`/openai/deployments/{deployment}/chat/completions`).
    pub api_version: Option<String>,
    pub stream: bool,
    /// Wall-clock receive time, milliseconds since the Unix epoch.
    pub received_unix_ms: f64,
    /// The client's address and port the request came from (`127.0.0.1:53120`): requests of one
    /// keep-alive connection share it. None where the serving side does not tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The connection the request came on, numbered by the mock from 1 as it accepts them (a
    /// port may be reused by a later connection; this number never is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<u64>,
    pub status: u16,
    pub outcome: Outcome,
    pub error_code: Option<String>,
    pub prompt_tokens: u32,
    /// The `max_tokens` (or `max_completion_tokens`, `max_output_tokens`) the request asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Prompt tokens served from the profile's prefix cache (`prefix_cache`), reported as
    /// `usage.prompt_tokens_details.cached_tokens`; None without a prefix cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_prompt_tokens: Option<u32>,
    /// Prompt tokens written to the prefix cache (its whole blocks after the cached ones),
    /// reported as Anthropic's `cache_creation_input_tokens`; None without a prefix cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u32>,
    /// Waiting for a slot (FIFO queue).
    pub queue_wait_ms: f64,
    /// First token (reasoning or content) sent: the server-side TTFT, queue wait included.
    pub first_token_ms: Option<f64>,
    /// First content (answer) token sent.
    pub first_content_ms: Option<f64>,
    pub last_token_ms: Option<f64>,
    /// Response finished (or abandoned).
    pub end_ms: f64,
    /// Completion tokens sent, reasoning included.
    pub tokens_sent: u32,
    pub reasoning_tokens_sent: u32,
    /// The reasoning went inside `content`, wrapped in `<think>…</think>\n\n` (so
    /// `first_content_ms` is the first answer token's, after the closing tag).
    pub reasoning_in_content: bool,
    /// SSE chunks sent that carried tokens.
    pub token_chunks_sent: u32,
    pub finish_reason: Option<&'static str>,
    /// Injected pause, if any.
    pub stall_ms: Option<f64>,
    /// Chunks sent as invalid JSON (injected).
    pub malformed_chunks: u32,
    pub case: Option<CaseTruth>,
}

/// The ring buffer.
#[derive(Debug)]
pub struct RequestLog {
    inner: Mutex<LogInner>,
    capacity: usize,
}

impl Default for RequestLog {
    fn default() -> Self {
        RequestLog::with_capacity(LOG_CAPACITY)
    }
}

#[derive(Debug, Default)]
struct LogInner {
    records: VecDeque<RequestRecord>,
    dropped: u64,
}

/// `GET /mock/requests` body.
#[derive(Debug, Serialize)]
pub struct LogPage {
    pub capacity: usize,
    /// Records dropped since the last clear because the buffer was full.
    pub dropped: u64,
    /// Oldest first.
    pub requests: Vec<RequestRecord>,
}

impl RequestLog {
    /// Keeps the latest `capacity` records (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        RequestLog {
            inner: Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    pub fn push(&self, record: RequestRecord) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.records.len() >= self.capacity {
            inner.records.pop_front();
            inner.dropped += 1;
        }
        inner.records.push_back(record);
    }

    /// Records of `model` (all when None) with `seq > since`, oldest first.
    pub fn page(&self, model: Option<&str>, since: Option<u64>) -> LogPage {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let requests = inner
            .records
            .iter()
            .filter(|r| model.is_none_or(|m| r.model == m))
            .filter(|r| since.is_none_or(|s| r.seq > s))
            .cloned()
            .collect();
        LogPage {
            capacity: self.capacity,
            dropped: inner.dropped,
            requests,
        }
    }

    pub fn clear(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.records.clear();
        inner.dropped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, model: &str) -> RequestRecord {
        RequestRecord {
            seq,
            model: model.to_string(),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn bounded_filtered_and_clearable() {
        let log = RequestLog::default();
        for seq in 0..(LOG_CAPACITY as u64 + 5) {
            log.push(record(seq, if seq % 2 == 0 { "a" } else { "b" }));
        }
        let all = log.page(None, None);
        assert_eq!((all.requests.len(), all.dropped), (LOG_CAPACITY, 5));
        assert_eq!(all.requests.first().unwrap().seq, 5);
        assert_eq!(all.requests.last().unwrap().seq, LOG_CAPACITY as u64 + 4);
        assert!(log.page(Some("a"), None).requests.iter().all(|r| r.model == "a"));
        assert_eq!(log.page(None, Some(LOG_CAPACITY as u64 + 2)).requests.len(), 2);
        log.clear();
        assert!(log.page(None, None).requests.is_empty());

        let small = RequestLog::with_capacity(3);
        for seq in 0..5 {
            small.push(record(seq, "a"));
        }
        let page = small.page(None, None);
        assert_eq!((page.capacity, page.requests.len(), page.dropped), (3, 3, 2));
        assert_eq!(page.requests[0].seq, 2);
    }
}
