//! The streaming client: sends one prepared request and measures it exactly as DESIGN.md
//! "Measurement" defines. Every outcome, including every failure, ends within the timeouts.
//!
//! Clock: `t0` is taken just before the request is handed to the connection (after bakeoff's
//! own queue). Offsets are microseconds from `t0` on a monotonic clock; `sent_at_us` is the
//! wall clock at `t0`. All events found in one network read share that read's arrival time:
//! through the stamped client (`http` and `https`, see `h1` and `tls`) the kernel's receive time
//! of the read's last packet, otherwise (behind a proxy) the time the read returned. Every
//! record says which (`RequestRecord::clock`).
//!
//! Non-streamed requests have a single "chunk": the whole body. Its arrival is recorded as the
//! first chunk, first token (reasoning and/or content), last token and end, so their TTFT equals
//! their E2E latency; the run's `stream` setting is part of the figure's identity.
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use tokio::time::{Instant, timeout_at};

use super::failure::{Failure, classify_status, classify_transport, excerpt};
use super::h1::{self, Connecting};
use super::protocol::{PreparedRequest, StreamDecoder, StreamUpdate, ToolPiece, Usage};
use super::provider::{parse_completion, stream_decoder};
use super::sse::{SseEvent, SseParser};
use crate::domain::candidate::{CandidateSpec, ProviderKind, Secret};
use crate::domain::rate_limit::{RateLimit, is_rate_limit_header};
use crate::domain::reasoning::{ReasoningInContent, Recognised, Splitter};
use crate::domain::retry::parse_retry_after;
use crate::domain::run::{ErrorClass, Phase, RecordTexts, RequestRecord, RunConfig, TimingClock, TokenSource};
use crate::domain::tool_calls::{CallAssembler, ToolTurn};
use crate::kernel_stamps::wall_clock_ns;

/// Most bytes read from an error response (only an excerpt is kept).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// Most bytes accepted in a non-streamed response.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Longest connect (DNS + TCP + TLS) allowed, whatever the total timeout.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long each stage of a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// DNS + TCP + TLS of a new connection.
    pub connect: Duration,
    /// Send → first token (reasoning or content) of a stream. A non-streamed response has
    /// nothing before its whole body, which only `total` bounds.
    pub first_token: Duration,
    /// Longest silence between two token-bearing chunks once a stream has started (classed
    /// `stall_timeout`), so a server that stops mid-answer is given up on long before `total`.
    pub stall: Duration,
    /// Send → end of stream.
    pub total: Duration,
}

impl Timeouts {
    /// From the run's settings: the whole-request timeout, the first-token and stall timeouts
    /// (their defaults when unset, each at most the whole-request one), the connect at most
    /// 10 s of it.
    pub fn for_run(config: &RunConfig) -> Self {
        let total = Duration::from_secs(u64::from(config.timeout_secs.max(1)));
        let secs = |s: u32| Duration::from_secs(u64::from(s.max(1)));
        Timeouts {
            connect: total.min(MAX_CONNECT_TIMEOUT),
            first_token: secs(config.first_token_timeout()).min(total),
            stall: secs(config.stall_timeout()).min(total),
            total,
        }
    }
}

/// Who an attempt belongs to; everything in a record that is not measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordIdentity {
    pub run_id: i64,
    pub candidate_id: i64,
    pub case_id: String,
    pub phase: Phase,
    pub repetition: u32,
    pub attempt: u32,
    pub concurrency: u32,
    pub is_warmup: bool,
}

/// Bytes of text one token-bearing chunk carried: (reasoning bytes, answer bytes). Kept beside a
/// record until its counts are completed, then dropped (the text itself is in the record).
pub type ChunkText = (u32, u32);

/// Everything measured about one attempt (see `RequestRecord` for each field's meaning).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exchange {
    pub sent_at_us: i64,
    pub client_queue_us: i64,
    pub connect_us: Option<i64>,
    pub connection_reused: Option<bool>,
    pub headers_us: Option<i64>,
    pub first_chunk_us: Option<i64>,
    pub first_reasoning_us: Option<i64>,
    pub first_content_us: Option<i64>,
    pub last_token_us: Option<i64>,
    pub end_us: Option<i64>,
    pub chunks: Vec<(i64, u32)>,
    pub http_status: Option<u16>,
    pub finish_reason: Option<String>,
    pub input_tokens: Option<u32>,
    pub output_tokens: Option<u32>,
    pub output_tokens_source: Option<TokenSource>,
    pub reasoning_tokens: Option<u32>,
    pub output: String,
    pub reasoning: String,
    pub failure: Option<Failure>,
    /// Bytes of (reasoning, answer) text each entry of `chunks` carried, so the tokenizer can
    /// apportion token counts per chunk after the stream (not stored).
    pub chunk_text: Vec<ChunkText>,
    /// The wait an error response's `Retry-After` asked for, from its arrival (not stored: the
    /// retry's own send time shows it).
    pub retry_after: Option<Duration>,
    /// Which clock timed the events: the kernel's stamps only when every read that timed one
    /// carried a stamp.
    pub clock: Option<TimingClock>,
    /// Reasoning recognised at the start of the content (moved from `output` to `reasoning`).
    pub content_reasoning: Option<Recognised>,
    /// What the response's rate-limit headers said.
    pub rate_limit: Option<RateLimit>,
    /// The tool calls of the answer (None when it made none; the executor marks a tool case's
    /// record with its mode even then).
    pub tool_turn: Option<ToolTurn>,
    /// What the server's usage said of its prompt cache.
    pub prompt_cache: Option<crate::domain::conversation::PromptCache>,
}

impl Exchange {
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }

    /// The stored record (without grades, which the executor adds). Token counts are as the
    /// stream gave them; `into_parts` keeps what `tokenizer::complete_counts` needs.
    pub fn into_record(self, id: RecordIdentity) -> RequestRecord {
        self.into_parts(id).0
    }

    /// The record and the per-chunk text sizes, to complete the counts off the hot path.
    pub fn into_parts(mut self, id: RecordIdentity) -> (RequestRecord, Vec<ChunkText>) {
        let chunk_text = std::mem::take(&mut self.chunk_text);
        (self.record(id), chunk_text)
    }

    fn record(self, id: RecordIdentity) -> RequestRecord {
        let (error_class, error_detail) = match self.failure {
            Some(f) => (Some(f.class), Some(f.detail)),
            None => (None, None),
        };
        RequestRecord {
            run_id: id.run_id,
            candidate_id: id.candidate_id,
            case_id: id.case_id.into(),
            phase: id.phase,
            repetition: id.repetition,
            attempt: id.attempt,
            concurrency: id.concurrency,
            is_warmup: id.is_warmup,
            sent_at_us: self.sent_at_us,
            client_queue_us: self.client_queue_us,
            connect_us: self.connect_us.into(),
            connection_reused: self.connection_reused,
            headers_us: self.headers_us.into(),
            first_chunk_us: self.first_chunk_us.into(),
            first_reasoning_us: self.first_reasoning_us.into(),
            first_content_us: self.first_content_us.into(),
            last_token_us: self.last_token_us.into(),
            end_us: self.end_us.into(),
            chunks: self.chunks.into(),
            http_status: self.http_status,
            finish_reason: self.finish_reason.map(Into::into),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            output_tokens_source: self.output_tokens_source,
            reasoning_tokens: self.reasoning_tokens,
            canonical_tokens: None,
            output_chars: u32::try_from(self.output.chars().count()).unwrap_or(u32::MAX),
            texts: RecordTexts {
                output: self.output,
                reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
                error_detail,
                chunk_text: Default::default(),
                content_reasoning: self.content_reasoning,
                tool_turn: self.tool_turn,
            }
            .into(),
            error_class,
            grades: Vec::new(),
            chunk_attribution: None,
            clock: self.clock,
            rate_limit: self.rate_limit.map(Box::new),
            turn: None,
            prompt_cache: self.prompt_cache,
            cut: None,
        }
    }
}

/// One HTTP client per candidate, shared by all its requests, so connections are pooled and
/// the pool never holds fewer idle connections than the run's concurrency.
#[derive(Clone)]
pub struct CandidateClient {
    /// reqwest, for what the stamped client does not carry (a proxied scheme, the reference
    /// client). Built on first use: building it loads the system's CA bundle (native-tls does
    /// even when told to trust nothing), ~45 ms of CPU a run on loopback never needs.
    http: Arc<LazyHttp>,
    /// The kernel-stamped client for `http` and `https` URLs, unless a proxy is configured.
    h1: Option<Arc<h1::Pool>>,
    /// The schemes it carries: those no proxy is configured for.
    h1_schemes: Vec<&'static str>,
    provider: ProviderKind,
    key: Option<Secret>,
    timeouts: Timeouts,
    reasoning_in_content: ReasoningInContent,
    /// Secret header values, redacted like the key from every failure's detail.
    header_secrets: Vec<Secret>,
}

impl CandidateClient {
    /// HTTP/1.1 only (one request per connection, so `concurrency` means connections and no
    /// HTTP/2 multiplexing changes the load), no redirects (a redirected API URL is a
    /// misconfiguration to show, not follow), Nagle off.
    ///
    /// Refused (nothing is ever sent) when the deployment restricts candidates to some origins
    /// and `spec` points elsewhere (`domain::candidate::origin_refused`).
    pub fn new(spec: &CandidateSpec, concurrency: u32, timeouts: Timeouts) -> Result<Self, String> {
        let schemes = ["http", "https"]
            .into_iter()
            .filter(|s| stamped_reads_allowed(s))
            .collect();
        Self::build(spec, concurrency, timeouts, schemes)
    }

    /// The reference client alone: every request through reqwest, timed in user space, as a
    /// candidate behind a proxy is (for `calibrate`'s comparison and its own tests).
    pub fn reference(spec: &CandidateSpec, concurrency: u32, timeouts: Timeouts) -> Result<Self, String> {
        Self::build(spec, concurrency, timeouts, Vec::new())
    }

    fn build(
        spec: &CandidateSpec,
        concurrency: u32,
        timeouts: Timeouts,
        h1_schemes: Vec<&'static str>,
    ) -> Result<Self, String> {
        if let Some(why) = crate::domain::candidate::origin_refused(&spec.base_url) {
            return Err(format!("the base URL {why}"));
        }
        let ca_file = spec.tls_ca_file.as_deref().map(std::path::Path::new);
        // The system's roots are read and parsed only for a candidate that can use them: a
        // plain-http endpoint's run (every benchmark on loopback) does without.
        let tls = if is_https(&spec.base_url) || ca_file.is_some() {
            Some(super::tls::client_config(ca_file)?)
        } else {
            None
        };
        let mut roots = Vec::new();
        if let Some(path) = ca_file {
            // The same trust behind a proxy, where reqwest carries the request; read and checked
            // now, so a bad file fails the run before anything is sent.
            let pem = std::fs::read(path).map_err(|e| format!("TLS CA file {}: {e}", path.display()))?;
            roots = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("TLS CA file {}: {e}", path.display()))?;
        }
        let http = Arc::new(LazyHttp {
            client: OnceLock::new(),
            never_tls: never_tls(&spec.base_url),
            roots,
            concurrency,
            connect_timeout: timeouts.connect,
        });
        let scheme = spec.base_url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if !scheme.is_some_and(|s| h1_schemes.contains(&s.as_str())) {
            // reqwest carries this candidate's requests: built now, not inside the first one's timing.
            http.client().map_err(|f| f.detail)?;
        }
        let h1 = (!h1_schemes.is_empty()).then(|| h1::Pool::new(concurrency as usize, timeouts.connect, tls));
        Ok(CandidateClient {
            http,
            h1,
            h1_schemes,
            provider: spec.provider,
            key: spec.resolve_api_key(),
            timeouts,
            reasoning_in_content: spec.wire.reasoning_in_content,
            header_secrets: spec.wire.secrets().cloned().collect(),
        })
    }

    pub fn api_key(&self) -> Option<&Secret> {
        self.key.as_ref()
    }

    /// Ends a connection session (`PreparedRequest::session`): its idle connection goes back to
    /// the shared pool. (Requests through reqwest, behind a proxy, share its pool: no sessions.)
    pub fn end_session(&self, session: u32) {
        if let Some(pool) = &self.h1 {
            pool.end_session(session);
        }
    }

    /// Sends `request` and measures it. Never fails: a failure is part of the result.
    pub async fn send(&self, request: &PreparedRequest, client_queue_us: i64) -> Exchange {
        let probe = ConnectProbe::default();
        let sent_at_us = wall_clock_us();
        let mut m = Measure {
            t0: Instant::now(),
            latest_us: 0,
            x: Exchange {
                sent_at_us,
                client_queue_us,
                ..Default::default()
            },
            usage: None,
            reasoning_chunks: 0,
            timeouts: self.timeouts,
            streamed: true,
            stamped_path: false,
            unstamped: false,
            splitter: Splitter::new(self.reasoning_in_content),
            undecided_since: None,
            tools: CallAssembler::new(),
        };
        let outcome = CONNECT_PROBE
            .scope(probe.clone(), self.exchange(request, &mut m, &probe))
            .await;
        m.finish(outcome.err().map(|f| {
            let f = f.redact(self.key.as_ref());
            self.header_secrets.iter().fold(f, |f, s| f.redact(Some(s)))
        }))
    }

    async fn exchange(&self, req: &PreparedRequest, m: &mut Measure, probe: &ConnectProbe) -> Result<(), Failure> {
        let total_deadline = m.t0 + self.timeouts.total;
        // A non-streamed answer's headers usually come with its body: only `total` bounds it.
        let first_deadline = if req.stream {
            m.t0 + self.timeouts.first_token.min(self.timeouts.total)
        } else {
            total_deadline
        };
        m.streamed = req.stream;
        let started = timeout_at(first_deadline, self.start(req, probe)).await;
        // Known whatever came of it: a request that failed on a kept-alive connection says so.
        m.x.connect_us = probe.connect_us();
        m.x.connection_reused = Some(probe.reused());
        m.stamped_path = self.stamped(req);
        let mut response = match started {
            Err(_) if probe.connecting() => {
                return Err(Failure::new(
                    ErrorClass::ConnectTimeout,
                    format!(
                        "no connection (DNS, TCP, TLS) within {:.1} s",
                        m.t0.elapsed().as_secs_f64()
                    ),
                ));
            }
            Err(_) => return Err(m.timeout_failure()),
            Ok(response) => response?,
        };
        m.x.headers_us = Some(m.arrival(response.arrived_ns));
        let status = response.status;
        m.x.http_status = Some(status);
        m.x.rate_limit = RateLimit::from_headers(
            response.rate_limit.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            std::time::SystemTime::now(),
        );
        let content_type = response.content_type.take();

        if !(200..300).contains(&status) {
            m.x.retry_after = response
                .retry_after
                .as_deref()
                .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
            // The status decides the class; the body only adds detail, so a body that never
            // ends costs at most the remaining total time.
            let (body, _) = read_body(&mut response.body, total_deadline, MAX_ERROR_BODY_BYTES).await;
            return Err(classify_status(
                status,
                content_type.as_deref(),
                &String::from_utf8_lossy(&body),
            ));
        }
        let ct = content_type.as_deref().unwrap_or_default();
        if ct.contains("html") {
            let (body, _) = read_body(&mut response.body, total_deadline, MAX_ERROR_BODY_BYTES).await;
            return Err(Failure::new(
                ErrorClass::NonJsonResponse,
                format!(
                    "HTTP {status} answered with an HTML page: {}",
                    excerpt(&String::from_utf8_lossy(&body))
                ),
            ));
        }
        // A server that ignores `stream: true` answers with one JSON body: measure it as such.
        if !req.stream || ct.contains("json") {
            return self.read_whole(response, m, total_deadline).await;
        }
        self.read_stream(response.body, m, first_deadline, total_deadline).await
    }

    /// Whether `req` goes through the stamped client.
    fn stamped(&self, req: &PreparedRequest) -> bool {
        let scheme = req.url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        self.h1.is_some() && scheme.is_some_and(|s| self.h1_schemes.contains(&s.as_str()))
    }

    /// Sends the request and reads the response head, through the stamped client when it can.
    async fn start(&self, req: &PreparedRequest, probe: &ConnectProbe) -> Result<Response, Failure> {
        if let Some(pool) = &self.h1
            && let Ok(url) = url::Url::parse(&req.url)
            && self.h1_schemes.contains(&url.scheme())
        {
            let (head, body) = pool
                .post(&url, &req.headers, &req.body, req.session, &|state| probe.report(state))
                .await
                .map_err(|e| e.failure())?;
            return Ok(Response {
                status: head.status,
                content_type: head.content_type,
                retry_after: head.retry_after,
                rate_limit: head.rate_limit,
                arrived_ns: head.arrived_ns,
                body: ResponseBody::H1(body),
            });
        }
        let response = self
            .http
            .client()?
            .post(&req.url)
            .headers(req.headers.clone())
            .body(req.body.clone())
            .send()
            .await
            .map_err(|e| classify_transport(&e))?;
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Ok(Response {
            status: response.status().as_u16(),
            content_type: header(CONTENT_TYPE).map(|v| v.to_ascii_lowercase()),
            retry_after: header(RETRY_AFTER),
            rate_limit: response
                .headers()
                .iter()
                .filter(|(name, _)| is_rate_limit_header(name.as_str()))
                .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
                .collect(),
            arrived_ns: None,
            body: ResponseBody::Pooled(response.bytes_stream().boxed()),
        })
    }

    async fn read_whole(&self, mut response: Response, m: &mut Measure, deadline: Instant) -> Result<(), Failure> {
        let (body, error) = read_body(&mut response.body, deadline, MAX_BODY_BYTES).await;
        match error {
            Some(BodyError::Timeout) => return Err(m.timeout_failure()),
            Some(BodyError::Transport(f)) => return Err(f),
            Some(BodyError::TooLarge) => {
                return Err(Failure::new(
                    ErrorClass::Other,
                    format!("response body larger than {MAX_BODY_BYTES} bytes"),
                ));
            }
            None => {}
        }
        let at = m.arrival(response.body.last_arrival());
        m.x.first_chunk_us = Some(at);
        let completion = parse_completion(self.provider, &String::from_utf8_lossy(&body))?;
        if !completion.tool_calls.is_empty() {
            m.x.first_content_us.get_or_insert(at);
            m.x.tool_turn = Some(ToolTurn {
                calls: completion.tool_calls,
                ..Default::default()
            });
        }
        let update = StreamUpdate {
            reasoning: completion.reasoning,
            content: completion.content,
            finish_reason: completion.finish_reason,
            usage: completion.usage,
            done: true,
            tool_piece: None,
        };
        m.apply(update, at);
        // One chunk holding the whole output: its token count is known when usage is.
        if let (Some(last), Some(n)) = (m.x.chunks.last_mut(), m.usage.and_then(|u| u.output_tokens)) {
            last.1 = n;
        }
        m.x.end_us = Some(at);
        Ok(())
    }

    async fn read_stream(
        &self,
        mut body: ResponseBody,
        m: &mut Measure,
        first_deadline: Instant,
        total_deadline: Instant,
    ) -> Result<(), Failure> {
        let mut decoder = stream_decoder(self.provider);
        let mut parser = SseParser::new();
        let mut events_seen = 0usize;
        let mut head = Vec::new(); // the first bytes, to show when the body is no event stream
        let mut completed = false;
        // One timer for the whole stream. Before the first token it is the first-token deadline;
        // after, the earlier of the total deadline and the last token + the stall timeout. It is
        // re-armed lazily: when it fires early (tokens came since it was set) it is moved on,
        // so a stream costs one timer reset per stall period, not one per chunk.
        let mut armed = first_deadline;
        let timer = tokio::time::sleep_until(armed);
        tokio::pin!(timer);
        let mut events = Vec::new();
        loop {
            // Biased to the read, as `timeout_at` polls its future before its deadline.
            let next = tokio::select! {
                biased;
                next = body.next() => next,
                () = &mut timer => {
                    let deadline = m.deadline(first_deadline, total_deadline);
                    if deadline > armed {
                        armed = deadline;
                        timer.as_mut().reset(deadline);
                        continue;
                    }
                    return Err(m.timeout_failure());
                }
            };
            let (read, arrived_ns) = match next {
                None => break,
                Some(read) => read?,
            };
            let at = m.arrival(arrived_ns);
            if head.len() < 300 {
                head.extend_from_slice(&read[..read.len().min(300 - head.len())]);
            }
            parser
                .push_into(&read, &mut events)
                .map_err(|e| Failure::new(ErrorClass::MalformedChunk, e.to_string()))?;
            let had_token = m.first_token_seen();
            for event in events.drain(..) {
                events_seen += 1;
                if m.on_event(decoder.as_mut(), &event, at)? {
                    m.x.end_us = Some(at);
                    body.finish().await;
                    return Ok(());
                }
                completed |= m.x.finish_reason.is_some();
                parser.recycle(event.data);
            }
            // The first token moves the deadline from the first-token one to the (usually
            // earlier) stall one; later tokens only move it on, which the lazy re-arm handles.
            if !had_token && m.first_token_seen() {
                armed = m.deadline(first_deadline, total_deadline);
                timer.as_mut().reset(armed);
            }
        }
        let at = m.arrival(body.last_arrival());
        if let Some(event) = parser.finish() {
            events_seen += 1;
            completed |= m.on_event(decoder.as_mut(), &event, at)?;
            completed |= m.x.finish_reason.is_some();
        }
        m.x.end_us = Some(at);
        if events_seen == 0 && !head.is_empty() {
            return Err(Failure::new(
                ErrorClass::NonJsonResponse,
                format!(
                    "response is not an event stream: {}",
                    excerpt(&String::from_utf8_lossy(&head))
                ),
            ));
        }
        if !completed {
            return Err(Failure::new(
                ErrorClass::StreamCut,
                format!(
                    "stream ended without a finish reason or end marker after {} token chunks",
                    m.x.chunks.len()
                ),
            ));
        }
        Ok(())
    }
}

/// The measurement in progress.
struct Measure {
    t0: Instant,
    /// The latest offset `arrival` gave, so events never go back in time.
    latest_us: i64,
    x: Exchange,
    usage: Option<Usage>,
    reasoning_chunks: u32,
    timeouts: Timeouts,
    /// Whether the request asked for a stream (a non-streamed one has no first-token timeout).
    streamed: bool,
    /// The request went through the stamped client.
    stamped_path: bool,
    /// An arrival was timed without a kernel stamp.
    unstamped: bool,
    /// Classes the content's bytes as reasoning or answer (`domain::reasoning`).
    splitter: Splitter,
    /// When the first bytes the splitter could not yet class (the content's start) arrived.
    undecided_since: Option<i64>,
    /// The streamed tool calls, assembled piece by piece (`domain::tool_calls`).
    tools: CallAssembler,
}

impl Measure {
    fn now(&self) -> i64 {
        micros(self.t0.elapsed())
    }

    /// When bytes read now reached this machine, as an offset from `t0`: the kernel's receive
    /// time when the read carried one, else now; never before an earlier event.
    fn arrival(&mut self, kernel_ns: Option<i64>) -> i64 {
        let now = self.now();
        self.unstamped |= kernel_ns.is_none();
        let at = match kernel_ns {
            Some(ns) => {
                let wall_us = wall_clock_ns() / 1_000;
                super::read_lag::note(ns / 1_000, wall_us);
                now - (wall_us - ns / 1_000).clamp(0, now)
            }
            None => now,
        };
        self.latest_us = at.max(self.latest_us);
        self.latest_us
    }

    fn first_token_seen(&self) -> bool {
        self.x.first_reasoning_us.is_some() || self.x.first_content_us.is_some()
    }

    /// The instant the stream times out at, as things stand (see `read_stream`).
    fn deadline(&self, first_deadline: Instant, total_deadline: Instant) -> Instant {
        match self.x.last_token_us {
            Some(last) if self.first_token_seen() => {
                let stalled = self.t0 + Duration::from_micros(u64::try_from(last).unwrap_or(0)) + self.timeouts.stall;
                stalled.min(total_deadline)
            }
            _ => first_deadline,
        }
    }

    /// Whether the stall timeout, not the total, is what ran out.
    fn stalled(&self) -> bool {
        let Some(last) = self.x.last_token_us else {
            return false;
        };
        let since_last = Duration::from_micros(u64::try_from(self.now() - last).unwrap_or(0));
        since_last >= self.timeouts.stall && self.t0.elapsed() < self.timeouts.total
    }

    /// Applies one event; true when the protocol said the stream is complete.
    fn on_event(&mut self, decoder: &mut dyn StreamDecoder, event: &SseEvent, at: i64) -> Result<bool, Failure> {
        self.x.first_chunk_us.get_or_insert(at);
        let update = decoder.decode(event)?;
        let done = update.done;
        self.apply(update, at);
        Ok(done)
    }

    /// A piece of a tool call. A piece carrying a name or argument text is the answer arriving:
    /// it times the first token and keeps the stall timer moving, but adds no token chunk (the
    /// chunks and their text sizes are the text's, which a tool call has none of).
    fn tool_piece(&mut self, piece: ToolPiece, at: i64) {
        let carried = match piece {
            ToolPiece::OpenAi(pieces) => self.tools.push_openai(&pieces, at),
            ToolPiece::Anthropic(event) => self.tools.push_anthropic(&event, at),
        };
        if carried {
            self.x.first_content_us.get_or_insert(at);
            self.x.last_token_us = Some(at);
        }
    }

    fn apply(&mut self, mut update: StreamUpdate, at: i64) {
        if let Some(piece) = update.tool_piece.take() {
            self.tool_piece(*piece, at);
        }
        // Every chunk with text carried a token, whatever its bytes turn out to be.
        let carried = update.carries_tokens();
        // Reasoning at the start of the content is reasoning. Bytes the splitter holds back
        // (leading whitespace, a tag's start) arrived now: what they turn out to be began then.
        let (mut reasoning_at, mut answer_at, mut markup) = (at, at, false);
        if !update.content.is_empty() && !self.splitter.passing_through() {
            let undecided = self.splitter.undecided();
            let pieces = self.splitter.feed(&update.content);
            if undecided {
                let began = *self.undecided_since.get_or_insert(at);
                (reasoning_at, answer_at) = (began, began);
            }
            markup = pieces.delimiter_bytes > 0;
            update.reasoning.push_str(&pieces.reasoning);
            update.content = pieces.answer;
        }
        if carried {
            let bytes = |s: &str| u32::try_from(s.len()).unwrap_or(u32::MAX);
            self.x
                .chunk_text
                .push((bytes(&update.reasoning), bytes(&update.content)));
        }
        if markup || !update.reasoning.is_empty() {
            self.x.first_reasoning_us.get_or_insert(reasoning_at);
            self.x.reasoning.push_str(&update.reasoning);
            self.reasoning_chunks += 1;
        }
        if !update.content.is_empty() {
            self.x.first_content_us.get_or_insert(answer_at);
            self.x.output.push_str(&update.content);
        }
        if carried {
            // The per-chunk token count is not reported by OpenAI-style streams: 1 per chunk.
            self.x.chunks.push((at, 1));
            self.x.last_token_us = Some(at);
        }
        if update.finish_reason.is_some() {
            self.x.finish_reason = update.finish_reason;
        }
        if let Some(u) = update.usage {
            self.usage.get_or_insert_with(Usage::default).merge(u);
        }
    }

    fn timeout_failure(&self) -> Failure {
        let secs = |d: Duration| d.as_secs_f64();
        if self.first_token_seen() && self.stalled() {
            Failure::new(
                ErrorClass::StallTimeout,
                format!(
                    "stream stalled: no token for {:.1} s after {} token chunks",
                    secs(self.timeouts.stall),
                    self.x.chunks.len()
                ),
            )
        } else if self.first_token_seen() || !self.streamed {
            Failure::new(
                ErrorClass::TotalTimeout,
                if self.streamed {
                    format!(
                        "stream still open after {:.1} s ({} token chunks received)",
                        secs(self.timeouts.total),
                        self.x.chunks.len()
                    )
                } else {
                    format!("no complete response within {:.1} s", secs(self.timeouts.total))
                },
            )
        } else {
            let stage = if self.x.headers_us.is_some() {
                "response headers arrived but"
            } else {
                "no response headers and"
            };
            Failure::new(
                ErrorClass::FirstTokenTimeout,
                format!(
                    "{stage} no token within {:.1} s",
                    secs(self.timeouts.first_token.min(self.timeouts.total))
                ),
            )
        }
    }

    /// Token counts, the empty-output check and the end time; the finished exchange.
    fn finish(mut self, failure: Option<Failure>) -> Exchange {
        let at = self.now();
        self.x.clock = Some(if self.stamped_path && !self.unstamped {
            TimingClock::KernelStamp
        } else {
            TimingClock::UserSpace
        });
        self.x.end_us.get_or_insert(at);
        self.finish_content();
        let usage = self.usage.unwrap_or_default();
        self.x.input_tokens = usage.input_tokens;
        self.x.prompt_cache = usage.prompt_cache();
        if let Some(n) = usage.output_tokens {
            self.x.output_tokens = Some(n);
            self.x.output_tokens_source = Some(TokenSource::Usage);
            self.x.reasoning_tokens = usage.reasoning_tokens;
        } else if !self.x.chunks.is_empty() || failure.is_none() {
            // Provisional: the tokenizer replaces it (source `tokenizer`) after the stream.
            self.x.output_tokens = Some(self.x.chunks.iter().map(|c| c.1).sum());
            self.x.output_tokens_source = Some(TokenSource::Chunks);
            self.x.reasoning_tokens = (self.reasoning_chunks > 0).then_some(self.reasoning_chunks);
        }
        let unclosed = match self.x.content_reasoning {
            Some(r) if !r.closed => format!("; {}", r.describe()),
            _ => String::new(),
        };
        if self.tools.has_calls() {
            // Cut: the stream failed, or the answer hit its token limit mid-call.
            let finished = super::tools::calls_finished(failure.is_none(), self.x.finish_reason.as_deref());
            self.x.tool_turn = Some(std::mem::take(&mut self.tools).finish(finished));
        }
        let called = self.x.tool_turn.as_ref().is_some_and(|t| !t.calls.is_empty());
        self.x.failure = failure.or_else(|| {
            (self.x.output.trim().is_empty() && !called).then(|| {
                Failure::new(
                    ErrorClass::EmptyOutput,
                    format!(
                        "no answer text (finish reason {}, {} reasoning characters{unclosed})",
                        self.x.finish_reason.as_deref().unwrap_or("none"),
                        self.x.reasoning.chars().count()
                    ),
                )
            })
        });
        self.x
    }

    /// The end of the content: what the splitter still held (a tag's start, leading
    /// whitespace) is decided and added to the last token chunk's text.
    fn finish_content(&mut self) {
        let rest = self.splitter.finish();
        self.x.content_reasoning = self.splitter.recognised();
        if rest.reasoning.is_empty() && rest.answer.is_empty() {
            return;
        }
        let bytes = |s: &str| u32::try_from(s.len()).unwrap_or(u32::MAX);
        let at = self.undecided_since.or(self.x.last_token_us);
        if let Some(last) = self.x.chunk_text.last_mut() {
            last.0 = last.0.saturating_add(bytes(&rest.reasoning));
            last.1 = last.1.saturating_add(bytes(&rest.answer));
        }
        if !rest.reasoning.is_empty() {
            if let Some(at) = at {
                self.x.first_reasoning_us.get_or_insert(at);
            }
            self.x.reasoning.push_str(&rest.reasoning);
        }
        if !rest.answer.is_empty() {
            if let Some(at) = at {
                self.x.first_content_us.get_or_insert(at);
            }
            self.x.output.push_str(&rest.answer);
        }
    }
}

enum BodyError {
    Timeout,
    TooLarge,
    Transport(Failure),
}

/// A response whose head has been read.
struct Response {
    status: u16,
    content_type: Option<String>,
    retry_after: Option<String>,
    /// The rate-limit headers, name and value (only those: nothing else of the head is kept).
    rate_limit: Vec<(String, String)>,
    /// The kernel's receive time of the head (ns since the Unix epoch), when known.
    arrived_ns: Option<i64>,
    body: ResponseBody,
}

enum ResponseBody {
    /// Through reqwest's pool: behind a proxy, or `BAKEOFF_WIRE_CLIENT=reqwest`.
    Pooled(BoxStream<'static, reqwest::Result<Bytes>>),
    /// Through the kernel-stamped client.
    H1(h1::Body),
}

impl ResponseBody {
    /// The next bytes and their kernel receive time when known; a broken body is `StreamCut`.
    async fn next(&mut self) -> Option<Result<(Bytes, Option<i64>), Failure>> {
        match self {
            ResponseBody::Pooled(stream) => stream.next().await.map(|read| {
                read.map(|bytes| (bytes, None))
                    .map_err(|e| Failure::new(ErrorClass::StreamCut, classify_transport(&e).detail))
            }),
            ResponseBody::H1(body) => body.next().await.map(|read| {
                read.map_err(|e| Failure::new(ErrorClass::StreamCut, format!("the response broke off: {e}")))
            }),
        }
    }

    /// Reads what follows a stream's end marker (a chunked body's last bytes, usually just
    /// behind it), so its connection is reused: the measurement is over.
    async fn finish(self) {
        match self {
            ResponseBody::H1(body) => body.finish(h1::FINISH_WAIT).await,
            // hyper pools a connection only once its body was read to the end: a stream dropped
            // at its end marker, before the chunked body's last bytes, cost a connection each.
            ResponseBody::Pooled(mut stream) => {
                let _ = tokio::time::timeout(h1::FINISH_WAIT, async {
                    let mut read = 0;
                    while let Some(Ok(bytes)) = stream.next().await {
                        read += bytes.len();
                        if read > MAX_ERROR_BODY_BYTES {
                            return;
                        }
                    }
                })
                .await;
            }
        }
    }

    /// The kernel's receive time of the body's last bytes, when known.
    fn last_arrival(&self) -> Option<i64> {
        match self {
            ResponseBody::Pooled(_) => None,
            ResponseBody::H1(body) => body.last_arrival(),
        }
    }
}

/// Reads a body until it ends, the deadline passes or `limit` bytes arrived; returns what came.
async fn read_body(body: &mut ResponseBody, deadline: Instant, limit: usize) -> (Vec<u8>, Option<BodyError>) {
    let mut out = Vec::new();
    loop {
        match timeout_at(deadline, body.next()).await {
            Err(_) => return (out, Some(BodyError::Timeout)),
            Ok(None) => return (out, None),
            Ok(Some(Err(f))) => return (out, Some(BodyError::Transport(f))),
            Ok(Some(Ok((bytes, _)))) => {
                let room = limit.saturating_sub(out.len());
                out.extend_from_slice(&bytes[..bytes.len().min(room)]);
                if bytes.len() > room {
                    return (out, Some(BodyError::TooLarge));
                }
            }
        }
    }
}

/// Whether `http` and `https` candidates may use the kernel-stamped client: not when a proxy is
/// configured (reqwest honours it), nor when `BAKEOFF_WIRE_CLIENT=reqwest` asks for the
/// reference client (to compare the two in `calibrate`).
fn stamped_reads_allowed(scheme: &str) -> bool {
    !proxied(scheme) && std::env::var("BAKEOFF_WIRE_CLIENT").as_deref() != Ok("reqwest")
}

/// A candidate's reqwest client, built the first time a request needs it.
struct LazyHttp {
    client: OnceLock<Result<reqwest::Client, String>>,
    never_tls: bool,
    roots: Vec<reqwest::Certificate>,
    concurrency: u32,
    connect_timeout: Duration,
}

impl LazyHttp {
    fn client(&self) -> Result<&reqwest::Client, Failure> {
        self.client
            .get_or_init(|| self.build())
            .as_ref()
            .map_err(|detail| Failure::new(ErrorClass::Tls, format!("building the HTTP client: {detail}")))
    }

    fn build(&self) -> Result<reqwest::Client, String> {
        let mut http = reqwest::Client::builder();
        if self.never_tls {
            http = http.tls_certs_only(std::iter::empty());
        }
        for cert in &self.roots {
            http = http.add_root_certificate(cert.clone());
        }
        http.http1_only()
            .pool_max_idle_per_host(self.concurrency.max(1) as usize)
            .pool_idle_timeout(Duration::from_secs(90))
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(format!("bakeoff/{}", crate::VERSION))
            .connector_layer(ConnectTimerLayer)
            .build()
            .map_err(|e| e.to_string())
    }
}

fn is_https(url: &str) -> bool {
    url.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("https:"))
}

/// Whether a client of `base_url` never speaks TLS: plain http, no proxy (no redirect is ever
/// followed). Such a client need not load the system's roots (a few milliseconds of CPU and a
/// megabyte or two for each client built).
pub(crate) fn never_tls(base_url: &str) -> bool {
    !is_https(base_url) && !proxied("http") && !proxied("https")
}

/// Whether the environment names a proxy for `scheme` (reqwest would then carry its requests).
fn proxied(scheme: &str) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let own = format!("{scheme}_proxy");
    [own.as_str(), &own.to_ascii_uppercase(), "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|n| set(n))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Microseconds since the Unix epoch.
pub fn wall_clock_us() -> i64 {
    wall_clock_ns() / 1_000
}

// --- connect timing -------------------------------------------------------------------------
//
// reqwest does not say whether a request got a pooled connection. A connector layer times every
// new connection (DNS + TCP + TLS) and reports it to the request that caused it through a
// task-local probe: hyper opens the connection while polling that request's future. No report
// before the response headers means the request reused a pooled connection.

tokio::task_local! {
    static CONNECT_PROBE: ConnectProbe;
}

/// Connect state shared with the connector: 0 = no new connection (a pooled one), -1 =
/// connecting, -2 = a connect failed, n > 0 = connected in n − 1 µs.
#[derive(Clone, Default)]
struct ConnectProbe(Arc<AtomicI64>);

impl ConnectProbe {
    const CONNECTING: i64 = -1;
    const FAILED: i64 = -2;

    /// The request went out on a pooled connection (no new one was tried).
    fn reused(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    fn connect_us(&self) -> Option<i64> {
        match self.0.load(Ordering::Acquire) {
            n if n > 0 => Some(n - 1),
            _ => None,
        }
    }

    /// A new connection for this request was started and has not finished.
    fn connecting(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::CONNECTING
    }

    fn report(&self, event: Connecting) {
        let state = match event {
            Connecting::Started => Self::CONNECTING,
            Connecting::Made(took) => micros(took) + 1,
            Connecting::Failed => Self::FAILED,
        };
        self.0.store(state, Ordering::Release);
    }
}

#[derive(Clone, Copy)]
struct ConnectTimerLayer;

impl<S> tower::Layer<S> for ConnectTimerLayer {
    type Service = ConnectTimer<S>;
    fn layer(&self, inner: S) -> ConnectTimer<S> {
        ConnectTimer(inner)
    }
}

#[derive(Clone)]
struct ConnectTimer<S>(S);

impl<S, R> tower::Service<R> for ConnectTimer<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let probe = CONNECT_PROBE.try_with(|p| p.clone()).ok();
        if let Some(p) = &probe {
            p.report(Connecting::Started);
        }
        let started = std::time::Instant::now();
        let connecting = self.0.call(request);
        Box::pin(async move {
            let result = connecting.await;
            if let Some(probe) = probe {
                probe.report(match result {
                    Ok(_) => Connecting::Made(started.elapsed()),
                    Err(_) => Connecting::Failed,
                });
            }
            result
        })
    }
}
