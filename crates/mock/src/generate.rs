//! What a request generates (the plan: reasoning, answer, filler, finish reason), when each
//! token is due (the schedule: prefill, inter-token delays, jitter, injected faults), and how
//! chunks are rendered as bytes. No I/O but the timer.
use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::profile::ModelProfile;
use super::rng::SplitMix;
use super::tokens::{filler_token, token_spans};

/// Seed offset so reasoning filler reads differently from content filler.
const REASONING_SEED: u64 = 0x5245_4153_4f4e;

/// The tokens a request will produce, in order: reasoning, then answer, then filler.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub reasoning: u32,
    answer: String,
    answer_spans: Vec<Range<usize>>,
    filler: u32,
    filler_seed: u64,
    /// Reasoning goes in the content: its first and last tokens carry `<think>` and
    /// `</think>\n\n` (the texts of those two tokens, tags included).
    think_tags: Option<(String, String)>,
    /// `length` when the output reached its max_tokens budget, else `stop` (`tool_calls` for
    /// calls).
    pub finish_reason: &'static str,
    /// Native tool calls: the answer is their arguments one after another; (name, end byte of
    /// its arguments in the answer) per call.
    tool_calls: Vec<(String, usize)>,
}

/// Output limits from the request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
}

impl Plan {
    /// `answer` None means an unknown prompt: filler up to max_tokens.
    pub fn new(
        profile: &ModelProfile,
        with_reasoning: bool,
        answer: Option<String>,
        limits: Limits,
        filler_seed: u64,
    ) -> Plan {
        let wanted_reasoning = if with_reasoning { profile.reasoning_tokens } else { 0 };
        let (reasoning, budget) = if profile.reasoning_counts_toward_max_tokens {
            let r = wanted_reasoning.min(limits.max_tokens);
            (r, limits.max_tokens - r)
        } else {
            (wanted_reasoning, limits.max_tokens)
        };
        let (answer, answer_spans, filler) = match answer {
            None => (String::new(), Vec::new(), budget),
            Some(text) => {
                let mut spans: Vec<Range<usize>> = token_spans(&text).collect();
                spans.truncate(budget as usize);
                let n = spans.len() as u32;
                let room = budget - n;
                let filler = if limits.ignore_eos {
                    room
                } else {
                    limits.min_tokens.saturating_sub(n).min(room)
                };
                (text, spans, filler)
            }
        };
        let content = answer_spans.len() as u32 + filler;
        let think_tags = (profile.reasoning_in_content && reasoning > 0).then(|| {
            let piece = |i| filler_token(filler_seed ^ REASONING_SEED, i);
            let last = reasoning - 1;
            let first = format!("<think>{}", piece(0));
            let close = format!("{}</think>\n\n", piece(last));
            if last == 0 {
                (format!("<think>{}</think>\n\n", piece(0)), close)
            } else {
                (first, close)
            }
        });
        Plan {
            reasoning,
            answer,
            answer_spans,
            filler,
            filler_seed,
            think_tags,
            finish_reason: if content == budget { "length" } else { "stop" },
            tool_calls: Vec::new(),
        }
    }

    /// This plan's answer is the arguments of `calls` (name, arguments text), sent as native
    /// tool calls.
    pub fn with_tool_calls(mut self, calls: &[(String, String)]) -> Plan {
        let mut end = 0;
        self.tool_calls = calls
            .iter()
            .map(|(name, args)| {
                end += args.len();
                (name.clone(), end)
            })
            .collect();
        if self.finish_reason == "stop" {
            self.finish_reason = "tool_calls";
        }
        self
    }

    /// The native tool calls' (name, end byte) (empty: the answer is text).
    pub fn tool_calls(&self) -> &[(String, usize)] {
        &self.tool_calls
    }

    /// The byte range of answer token `index` within the answer (None: reasoning or filler).
    pub fn answer_range(&self, index: u32) -> Option<Range<usize>> {
        let i = index.checked_sub(self.reasoning)? as usize;
        self.answer_spans.get(i).cloned()
    }

    /// The answer text (for native tool calls: their arguments one after another).
    pub fn answer(&self) -> &str {
        &self.answer
    }

    /// Tokens to send before a cut halfway through the answer's first call: its native
    /// arguments, or its `<tool_call>` block in the text (None: the answer has no call).
    pub fn tokens_before_mid_first_call(&self) -> Option<u32> {
        let end = match self.tool_calls.first() {
            Some((_, end)) => *end,
            None => self.answer.find("</tool_call>")? + "</tool_call>".len(),
        };
        let start = if self.tool_calls.is_empty() {
            self.answer.find("<tool_call>")?
        } else {
            0
        };
        let middle = start + (end - start) / 2;
        let whole = self.answer_spans.iter().take_while(|s| s.end <= middle).count() as u32;
        // At least one token of the call is sent, and never the whole answer.
        let sent = whole
            .max(1)
            .min((self.answer_spans.len() as u32).saturating_sub(1).max(1));
        Some(self.reasoning + sent)
    }

    pub fn total(&self) -> u32 {
        self.reasoning + self.answer_spans.len() as u32 + self.filler
    }

    pub fn is_reasoning(&self, index: u32) -> bool {
        index < self.reasoning
    }

    /// Whether the reasoning is sent inside the content (`<think>…</think>`).
    pub fn reasoning_in_content(&self) -> bool {
        self.think_tags.is_some()
    }

    /// The text of token `index` (a slice of the answer or a static filler word).
    pub fn piece(&self, index: u32) -> &str {
        if index < self.reasoning {
            if let Some((first, last)) = &self.think_tags {
                if index == 0 {
                    return first;
                }
                if index + 1 == self.reasoning {
                    return last;
                }
            }
            return filler_token(self.filler_seed ^ REASONING_SEED, index);
        }
        let i = (index - self.reasoning) as usize;
        if let Some(span) = self.answer_spans.get(i) {
            return &self.answer[span.clone()];
        }
        let j = (i - self.answer_spans.len()) as u32;
        // After an answer the filler continues the text, so it keeps its leading space.
        filler_token(self.filler_seed, j + u32::from(!self.answer_spans.is_empty()))
    }
}

/// When tokens are due and which faults strike, drawn once per request from its seeded rng.
#[derive(Debug, Clone)]
pub struct Schedule {
    prefill: Duration,
    inter_token: Duration,
    jitter: f64,
    tokens_per_chunk: u32,
    batch_first_chunk: bool,
    /// (token index the pause comes before, pause).
    pub stall: Option<(u32, Duration)>,
    /// Tokens sent before the stream is cut.
    pub cut_after: Option<u32>,
    /// The chunk holding this token is sent as invalid JSON.
    pub malformed_at: Option<u32>,
}

impl Schedule {
    pub fn new(profile: &ModelProfile, prompt_tokens: u32, total: u32, rng: &mut SplitMix) -> Schedule {
        // Draw every decision even when unused, so one fault's setting never shifts another's.
        let stall = rng.chance(profile.stall_probability);
        let stall_at = rng.range(1, total.max(2));
        let cut = rng.chance(profile.cut_probability);
        let cut_after = if total >= 2 { rng.range(1, total) } else { 0 };
        let malformed = rng.chance(profile.malformed_probability);
        let malformed_at = rng.range(0, total.max(1));
        Schedule {
            prefill: profile.prefill(prompt_tokens),
            inter_token: profile.inter_token(),
            jitter: profile.jitter,
            tokens_per_chunk: profile.tokens_per_chunk.max(1),
            batch_first_chunk: profile.batch_first_chunk,
            stall: (stall && total >= 2).then(|| (stall_at, Duration::from_secs_f64(profile.stall_ms / 1000.0))),
            cut_after: cut.then_some(cut_after),
            malformed_at: (malformed && total >= 1).then_some(malformed_at),
        }
    }

    /// Stretches the inter-token delay by `factor` (≥ 1): constrained decoding's cost.
    pub fn slow_decode(&mut self, factor: f64) {
        if factor.is_finite() && factor > 1.0 {
            self.inter_token = self.inter_token.mul_f64(factor);
        }
    }

    /// Stretches every delay by `factor` (≥ 1): a server slowing down under sustained load.
    pub fn slow_down(&mut self, factor: f64) {
        if factor.is_finite() && factor > 1.0 {
            self.prefill = self.prefill.mul_f64(factor);
            self.inter_token = self.inter_token.mul_f64(factor);
        }
    }
}

/// What the generator produced next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Tokens `start..end`, all reasoning or all content, due now.
    Tokens {
        start: u32,
        end: u32,
        reasoning: bool,
        malformed: bool,
    },
    /// The injected cut: the response ends here.
    Cut,
    /// Every token was produced.
    Finished,
}

/// Walks a plan on its schedule. Deadlines are absolute (each token is due one delay after the
/// previous one was due), so timer rounding does not add up; when the server falls more than
/// two gaps behind, it re-anchors on the present instead of sending a catch-up burst.
pub struct Generator {
    pub plan: Plan,
    pub schedule: Schedule,
    rng: SplitMix,
    next: u32,
    due: Instant,
}

impl Generator {
    /// `start` is when generation begins (the slot was granted).
    pub fn new(plan: Plan, schedule: Schedule, rng: SplitMix, start: Instant) -> Generator {
        Generator {
            plan,
            schedule,
            rng,
            next: 0,
            due: start,
        }
    }

    /// Restarts the clock: generation begins now (after the queue).
    pub fn begin(&mut self, start: Instant) {
        self.due = start;
    }

    /// How long the tokens not yet sent would still take (before jitter).
    pub fn remaining(&self) -> Duration {
        let left = self.plan.total().saturating_sub(self.next);
        self.schedule.inter_token * left
    }

    fn jittered(&mut self, base: Duration) -> Duration {
        if self.schedule.jitter == 0.0 || base.is_zero() {
            return base;
        }
        let factor = 1.0 + self.schedule.jitter * (2.0 * self.rng.next_f64() - 1.0);
        base.mul_f64(factor)
    }

    /// Waits until the next chunk is due and says what it holds.
    pub async fn next(&mut self) -> Step {
        let total = self.plan.total();
        let limit = self.schedule.cut_after.map_or(total, |c| c.min(total));
        let start = self.next;
        if start >= limit {
            return if limit < total { Step::Cut } else { Step::Finished };
        }
        let reasoning = self.plan.is_reasoning(start);
        let mut end = start + 1;
        // The first token goes alone (as real servers flush it at once) unless the profile
        // batches it too; later chunks batch.
        if start > 0 || self.schedule.batch_first_chunk {
            while end < limit
                && end - start < self.schedule.tokens_per_chunk
                && self.plan.is_reasoning(end) == reasoning
            {
                end += 1;
            }
        }
        let mut wait = Duration::ZERO;
        for i in start..end {
            let base = if i == 0 {
                self.schedule.prefill
            } else {
                self.schedule.inter_token
            };
            wait += self.jittered(base);
            if let Some((at, pause)) = self.schedule.stall
                && at == i
            {
                wait += pause;
            }
        }
        self.due += wait;
        tokio::time::sleep_until(self.due).await;
        let now = Instant::now();
        let slack = (self.schedule.inter_token * 2).max(Duration::from_millis(5));
        if now > self.due + slack {
            self.due = now;
        }
        self.next = end;
        let malformed = self.schedule.malformed_at.is_some_and(|m| (start..end).contains(&m));
        Step::Tokens {
            start,
            end,
            reasoning,
            malformed,
        }
    }
}

/// Which API a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completions,
    /// OpenAI's Responses API (`POST /v1/responses`), streamed as named events.
    Responses,
    /// Anthropic's Messages API (`POST /v1/messages`), streamed as named events.
    Messages,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
            Api::Messages => "messages",
        }
    }
}

/// Renders SSE chunks from prefixes built once per request.
pub struct Renderer {
    api: Api,
    id: String,
    model: String,
    /// `{"id":…,"object":…,"created":…,"model":…`
    meta: String,
    /// `data: ` + meta + `,"choices":[{"index":0,`
    head: String,
}

const CHUNK_TAIL_CHAT: &[u8] = b"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
const CHUNK_TAIL_TEXT: &[u8] = b",\"logprobs\":null,\"finish_reason\":null}]}\n\n";

impl Renderer {
    pub fn new(api: Api, id: &str, created: u64, model: &str) -> Renderer {
        let object = match api {
            Api::Chat => "chat.completion.chunk",
            Api::Completions => "text_completion",
            Api::Responses => "response",
            Api::Messages => "message",
        };
        let meta = format!(
            "{{\"id\":{},\"object\":\"{object}\",\"created\":{created},\"model\":{}",
            json_str(id),
            json_str(model)
        );
        let head = format!("data: {meta},\"choices\":[{{\"index\":0,");
        Renderer {
            api,
            id: id.to_string(),
            model: model.to_string(),
            meta,
            head,
        }
    }

    /// The role-only first chunk of a chat stream.
    pub fn role(&self) -> Bytes {
        self.with_head(
            b"\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        )
    }

    /// The Responses API's first event: `response.created`, the response in progress.
    pub fn created(&self) -> Bytes {
        Bytes::from(format!(
            "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{},\"status\":\"in_progress\",\"output\":[]}}}}\n\n",
            self.meta
        ))
    }

    /// The Responses API's last event: `response.completed` (or `response.incomplete` when the
    /// output reached its limit) with the usage.
    pub fn completed(&self, finish_reason: &str, usage: &serde_json::Value) -> Bytes {
        let (kind, status, details) = if finish_reason == "length" {
            (
                "response.incomplete",
                "incomplete",
                ",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}",
            )
        } else {
            ("response.completed", "completed", "")
        };
        Bytes::from(format!(
            "event: {kind}\ndata: {{\"type\":\"{kind}\",\"response\":{},\"status\":\"{status}\"{details},\"usage\":{usage}}}}}\n\n",
            self.meta
        ))
    }

    /// One chunk carrying `pieces`; when `malformed`, the JSON is cut short after the text.
    pub fn tokens<'a>(&self, pieces: impl Iterator<Item = &'a str> + Clone, reasoning: bool, malformed: bool) -> Bytes {
        match self.api {
            Api::Responses => return responses_delta(pieces, reasoning, malformed),
            Api::Messages => return messages_delta(pieces, reasoning, malformed),
            Api::Chat | Api::Completions => {}
        }
        let text_len: usize = pieces.clone().map(str::len).sum();
        let mut buf = Vec::with_capacity(self.head.len() + text_len + 80);
        buf.extend_from_slice(self.head.as_bytes());
        match (self.api, reasoning) {
            (Api::Chat, false) => buf.extend_from_slice(b"\"delta\":{\"content\":"),
            (Api::Chat, true) => buf.extend_from_slice(b"\"delta\":{\"reasoning_content\":"),
            (Api::Completions | Api::Responses | Api::Messages, _) => buf.extend_from_slice(b"\"text\":"),
        }
        write_json_str(&mut buf, pieces);
        if malformed {
            buf.extend_from_slice(b"\n\n");
        } else {
            buf.extend_from_slice(match self.api {
                Api::Chat => CHUNK_TAIL_CHAT,
                Api::Completions | Api::Responses | Api::Messages => CHUNK_TAIL_TEXT,
            });
        }
        Bytes::from(buf)
    }

    /// One chat chunk carrying the answer tokens `range` of a plan of native tool calls, as
    /// `delta.tool_calls` pieces: a token that spans two calls is split between them, and a
    /// call's first piece carries its `id`, `type` and name. Tokens past the calls (filler) are
    /// sent as content.
    pub fn tool_tokens(&self, plan: &Plan, range: Range<u32>, malformed: bool) -> Bytes {
        if self.api == Api::Messages {
            // The Messages stream sends tool cases' calls as text (no tool_use blocks).
            return self.tokens(range.map(|i| plan.piece(i)), false, malformed);
        }
        let calls = plan.tool_calls();
        // (call, byte range) pieces, consecutive ones of the same call merged.
        let mut parts: Vec<(usize, Range<usize>)> = Vec::new();
        for i in range.clone() {
            let Some(mut r) = plan.answer_range(i) else { continue };
            while r.start < r.end {
                let Some(call) = calls.iter().position(|(_, end)| r.start < *end) else {
                    break;
                };
                let cut = r.end.min(calls[call].1);
                match parts.last_mut() {
                    Some((c, last)) if *c == call && last.end == r.start => last.end = cut,
                    _ => parts.push((call, r.start..cut)),
                }
                r.start = cut;
            }
        }
        if parts.is_empty() {
            return self.tokens(range.map(|i| plan.piece(i)), false, malformed);
        }
        let answer = plan.answer();
        let mut buf = Vec::with_capacity(self.head.len() + 160 * parts.len());
        buf.extend_from_slice(self.head.as_bytes());
        buf.extend_from_slice(b"\"delta\":{\"tool_calls\":[");
        for (n, (call, r)) in parts.iter().enumerate() {
            if n > 0 {
                buf.push(b',');
            }
            let start = if *call == 0 { 0 } else { calls[call - 1].1 };
            buf.extend_from_slice(format!("{{\"index\":{call},").as_bytes());
            if r.start == start {
                let id = format!("call_{call}");
                buf.extend_from_slice(
                    format!(
                        "\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":",
                        json_str(&id),
                        json_str(&calls[*call].0)
                    )
                    .as_bytes(),
                );
            } else {
                buf.extend_from_slice(b"\"function\":{\"arguments\":");
            }
            write_json_str(&mut buf, std::iter::once(&answer[r.clone()]));
            buf.extend_from_slice(b"}}");
        }
        buf.push(b']');
        if malformed {
            buf.extend_from_slice(b"\n\n");
        } else {
            buf.extend_from_slice(CHUNK_TAIL_CHAT);
        }
        Bytes::from(buf)
    }

    /// The chunk carrying finish_reason.
    pub fn finish(&self, finish_reason: &str) -> Bytes {
        let body = match self.api {
            Api::Chat => format!("\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"{finish_reason}\"}}]}}\n\n"),
            Api::Completions | Api::Responses | Api::Messages => {
                format!("\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"{finish_reason}\"}}]}}\n\n")
            }
        };
        self.with_head(body.as_bytes())
    }

    /// The `stream_options.include_usage` chunk: no choices, only usage.
    pub fn usage(&self, usage: &serde_json::Value) -> Bytes {
        Bytes::from(format!("data: {},\"choices\":[],\"usage\":{usage}}}\n\n", self.meta))
    }

    /// The Messages stream's opening: `message_start` (with the prompt's usage) and the first
    /// content block's start.
    pub fn message_start(&self, usage: &serde_json::Value) -> Bytes {
        Bytes::from(format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":{},\"type\":\"message\",\"role\":\"assistant\",\"model\":{},\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{usage}}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n",
            json_str(&self.id),
            json_str(&self.model)
        ))
    }

    /// The Messages stream's close: the block's stop, `message_delta` (stop reason, output
    /// tokens) and `message_stop`.
    pub fn message_end(&self, finish_reason: &str, output_tokens: u32) -> Bytes {
        Bytes::from(format!(
            "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{}\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{output_tokens}}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
            stop_reason(finish_reason)
        ))
    }

    pub fn done() -> Bytes {
        Bytes::from_static(b"data: [DONE]\n\n")
    }

    fn with_head(&self, rest: &[u8]) -> Bytes {
        let mut buf = Vec::with_capacity(self.head.len() + rest.len());
        buf.extend_from_slice(self.head.as_bytes());
        buf.extend_from_slice(rest);
        Bytes::from(buf)
    }
}

/// `usage` as OpenAI reports it.
/// A Responses API delta event: answer text, or a reasoning summary's.
fn responses_delta<'a>(pieces: impl Iterator<Item = &'a str> + Clone, reasoning: bool, malformed: bool) -> Bytes {
    let kind = if reasoning {
        "response.reasoning_summary_text.delta"
    } else {
        "response.output_text.delta"
    };
    let mut buf = format!(
        "event: {kind}\ndata: {{\"type\":\"{kind}\",\"output_index\":{},\"content_index\":0,\"delta\":",
        u8::from(!reasoning)
    )
    .into_bytes();
    write_json_str(&mut buf, pieces);
    buf.extend_from_slice(if malformed { b"\n\n" } else { b"}\n\n" });
    Bytes::from(buf)
}

/// A Messages `content_block_delta`: answer text, or thinking.
fn messages_delta<'a>(pieces: impl Iterator<Item = &'a str> + Clone, reasoning: bool, malformed: bool) -> Bytes {
    let (kind, field) = if reasoning {
        ("thinking_delta", "thinking")
    } else {
        ("text_delta", "text")
    };
    let mut buf = format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"{kind}\",\"{field}\":"
    )
    .into_bytes();
    write_json_str(&mut buf, pieces);
    buf.extend_from_slice(if malformed { b"\n\n" } else { b"}}\n\n" });
    Bytes::from(buf)
}

/// Anthropic's stop reason for an OpenAI finish reason.
pub fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        _ => "end_turn",
    }
}

/// `usage` as the Messages API reports it: `input_tokens` excludes the tokens read from and
/// written to the prompt cache (`prefix_cache`).
pub fn messages_usage_json(prompt_tokens: u32, read: u32, written: u32, output_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "input_tokens": prompt_tokens.saturating_sub(read).saturating_sub(written),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": output_tokens,
    })
}

/// `usage` as the Responses API reports it.
pub fn responses_usage_json(input_tokens: u32, output_tokens: u32, reasoning_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "output_tokens_details": { "reasoning_tokens": reasoning_tokens },
    })
}

/// `usage` as OpenAI reports it; no `reasoning_tokens` (None) gives null details, as a server
/// that does not know its model reasoned (reasoning left in the content) reports them.
pub fn usage_json(prompt_tokens: u32, completion_tokens: u32, reasoning_tokens: Option<u32>) -> serde_json::Value {
    serde_json::json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens_details": reasoning_tokens.map(|n| serde_json::json!({ "reasoning_tokens": n })),
    })
}

fn json_str(s: &str) -> String {
    let mut buf = Vec::with_capacity(s.len() + 2);
    write_json_str(&mut buf, std::iter::once(s));
    String::from_utf8(buf).unwrap_or_default()
}

/// Writes the concatenation of `pieces` as one JSON string literal.
fn write_json_str<'a>(buf: &mut Vec<u8>, pieces: impl Iterator<Item = &'a str>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.push(b'"');
    for piece in pieces {
        let bytes = piece.as_bytes();
        let mut plain = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let escaped: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0..=0x1f => &[],
                _ => continue,
            };
            buf.extend_from_slice(&bytes[plain..i]);
            if escaped.is_empty() {
                buf.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ]);
            } else {
                buf.extend_from_slice(escaped);
            }
            plain = i + 1;
        }
        buf.extend_from_slice(&bytes[plain..]);
    }
    buf.push(b'"');
}

/// The mock's answer to a judge prompt (as `domain::grading::judge_prompt` writes it), so runs
/// with `llm-judge` graders work against the mock: deterministic, from the quoted texts alone.
/// With a reference, a response equal to it (trimmed, case and whitespace folded) scores 5, one
/// containing it 4, anything else 2; without one, a non-empty response scores 4 and an empty
/// one 1. On the pass-fail scale, 4 and 5 pass. None when `prompt` is not a judge prompt.
pub fn judge_reply(prompt: &str) -> Option<String> {
    let block = |name: &str| {
        let open = format!("<<<{name}\n");
        let start = prompt.find(&open)? + open.len();
        let end = start + prompt[start..].find(&format!("\n{name}>>>"))?;
        Some(&prompt[start..end])
    };
    let response = block("RESPONSE")?;
    let pass_fail = prompt.contains("VERDICT: PASS");
    if !pass_fail && !prompt.contains("SCORE: <1-5>") {
        return None;
    }
    let fold = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let (score, why) = match block("REFERENCE").map(fold) {
        Some(reference) if fold(response) == reference => (5, "The response matches the reference."),
        Some(reference) if !reference.is_empty() && fold(response).contains(&reference) => {
            (4, "The response contains the reference answer.")
        }
        Some(_) => (2, "The response does not give the reference answer."),
        None if response.trim().is_empty() => (1, "The response is empty."),
        None => (4, "The response answers the input."),
    };
    Some(if pass_fail {
        format!("{why}\nVERDICT: {}", if score >= 4 { "PASS" } else { "FAIL" })
    } else {
        format!("{why}\nSCORE: {score}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_prompts_get_a_deterministic_verdict() {
        use crate::domain::grading::{JudgeScale, judge_prompt, parse_judge_reply};
        let reply = |scale, output: &str, expected: Option<&str>| {
            judge_reply(&judge_prompt(scale, "Is it right?", "2+2?", output, expected)).unwrap()
        };
        assert_eq!(
            reply(JudgeScale::OneToFive, " Four ", Some("four")),
            "The response matches the reference.\nSCORE: 5"
        );
        assert!(reply(JudgeScale::OneToFive, "It is four.", Some("four")).ends_with("SCORE: 4"));
        assert!(reply(JudgeScale::PassFail, "five", Some("four")).ends_with("VERDICT: FAIL"));
        assert!(reply(JudgeScale::PassFail, "four", None).ends_with("VERDICT: PASS"));
        // What bakeoff reads back from it.
        let g = parse_judge_reply(
            JudgeScale::OneToFive,
            None,
            &reply(JudgeScale::OneToFive, "five", Some("four")),
        );
        assert_eq!((g.score, g.passed), (0.25, false));
        assert_eq!(judge_reply("What is 2+2?"), None);
    }

    fn limits(max_tokens: u32) -> Limits {
        Limits {
            max_tokens,
            min_tokens: 0,
            ignore_eos: false,
        }
    }

    fn text(plan: &Plan, from: u32) -> String {
        (from..plan.total()).map(|i| plan.piece(i)).collect()
    }

    #[test]
    fn answers_stop_or_hit_length() {
        let p = ModelProfile::named("m");
        let plan = Plan::new(&p, false, Some("hello big world".into()), limits(10), 1);
        assert_eq!((plan.total(), plan.finish_reason), (3, "stop"));
        assert_eq!(text(&plan, 0), "hello big world");
        let cut = Plan::new(&p, false, Some("hello big world".into()), limits(2), 1);
        assert_eq!(
            (cut.total(), cut.finish_reason, text(&cut, 0).as_str()),
            (2, "length", "hello big")
        );
        // Unknown prompt: filler of exactly max_tokens.
        let filler = Plan::new(&p, false, None, limits(37), 1);
        assert_eq!((filler.total(), filler.finish_reason), (37, "length"));
        assert_eq!(super::super::tokens::count_tokens(&text(&filler, 0)), 37);
    }

    #[test]
    fn ignore_eos_and_min_tokens_pad_with_filler() {
        let p = ModelProfile::named("m");
        let l = Limits {
            max_tokens: 20,
            min_tokens: 0,
            ignore_eos: true,
        };
        let plan = Plan::new(&p, false, Some("yes".into()), l, 1);
        assert_eq!((plan.total(), plan.finish_reason), (20, "length"));
        assert!(text(&plan, 0).starts_with("yes "));
        let l = Limits {
            max_tokens: 20,
            min_tokens: 5,
            ignore_eos: false,
        };
        let plan = Plan::new(&p, false, Some("yes".into()), l, 1);
        assert_eq!((plan.total(), plan.finish_reason), (5, "stop"));
    }

    #[test]
    fn reasoning_comes_first_and_may_count_toward_max_tokens() {
        let mut p = ModelProfile::named("m");
        p.reasoning_tokens = 4;
        let plan = Plan::new(&p, true, Some("ok".into()), limits(3), 1);
        assert_eq!((plan.reasoning, plan.total(), plan.finish_reason), (4, 5, "stop"));
        assert!(plan.is_reasoning(3) && !plan.is_reasoning(4));
        assert_eq!(plan.piece(4), "ok");
        p.reasoning_counts_toward_max_tokens = true;
        let plan = Plan::new(&p, true, Some("ok".into()), limits(3), 1);
        assert_eq!((plan.reasoning, plan.total(), plan.finish_reason), (3, 3, "length"));
        assert_eq!(Plan::new(&p, false, Some("ok".into()), limits(3), 1).reasoning, 0);
    }

    #[test]
    fn chunks_render_valid_json_unless_malformed() {
        let r = Renderer::new(Api::Chat, "id-1", 7, "m\"x");
        let chunk = r.tokens(["a\"b", "\n\u{1}c"].into_iter(), false, false);
        let s = std::str::from_utf8(&chunk).unwrap();
        let v: serde_json::Value = serde_json::from_str(s.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        assert_eq!(v["choices"][0]["delta"]["content"], "a\"b\n\u{1}c");
        assert_eq!(v["model"], "m\"x");
        let bad = r.tokens(["a"].into_iter(), false, true);
        let s = std::str::from_utf8(&bad).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(s.strip_prefix("data: ").unwrap().trim_end()).is_err());
        assert!(s.ends_with("\n\n"));
        let usage = r.usage(&usage_json(3, 4, Some(1)));
        let s = std::str::from_utf8(&usage).unwrap();
        let v: serde_json::Value = serde_json::from_str(s.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        assert_eq!(v["usage"]["total_tokens"], 7);
        assert_eq!(v["choices"].as_array().map(Vec::len), Some(0));
    }

    #[tokio::test]
    async fn generator_batches_chunks_and_honours_the_cut() {
        let mut p = ModelProfile::named("m");
        p.tokens_per_chunk = 3;
        p.ttft_ms = 20.0;
        p.inter_token_ms = Some(5.0);
        let plan = Plan::new(&p, false, None, limits(7), 1);
        let mut rng = SplitMix::new(1);
        let schedule = Schedule::new(&p, 0, plan.total(), &mut rng);
        let start = Instant::now();
        let mut g = Generator::new(plan.clone(), schedule, rng.clone(), start);
        let mut sizes = Vec::new();
        loop {
            match g.next().await {
                Step::Tokens { start, end, .. } => sizes.push(end - start),
                Step::Finished => break,
                Step::Cut => panic!("no cut configured"),
            }
        }
        assert_eq!(sizes, vec![1, 3, 3]);
        // Timers never fire early; the upper bound is only a sanity check on a noisy machine.
        let elapsed = Instant::now() - start;
        assert!(
            elapsed >= Duration::from_millis(50) && elapsed < Duration::from_secs(10),
            "{elapsed:?}"
        );

        let mut schedule = Schedule::new(&p, 0, plan.total(), &mut rng);
        schedule.cut_after = Some(2);
        let mut g = Generator::new(plan, schedule, rng, Instant::now());
        assert!(matches!(g.next().await, Step::Tokens { start: 0, end: 1, .. }));
        assert!(matches!(g.next().await, Step::Tokens { start: 1, end: 2, .. }));
        assert_eq!(g.next().await, Step::Cut);
    }
}
