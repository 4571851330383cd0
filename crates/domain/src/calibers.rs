//! Every figure bakeoff reports about speed, each with its caliber (DESIGN.md "Measurement",
//! docs/measurement.md), computed from raw request records in one streaming pass with bounded
//! memory: distributions go into log histograms, token arrivals into a coarsening time series,
//! and the measured window needs only the first and last `c` requests. Every page, export and
//! terminal table reads these functions; none computes a figure of its own.
//!
//! Per request (successful final attempts only). N = output tokens, k₁ = tokens of the first
//! token-bearing (content or reasoning) chunk; the first chunk's tokens arrive with the first
//! token, so they are not decode tokens:
//! - TTFT: send → first non-empty token (reasoning or content); TTFA: → first content token;
//! - E2E: send → end of stream;
//! - TPOT: (E2E − TTFT) / (N − k₁) — for one token per chunk that is the familiar
//!   (E2E − TTFT) / (N − 1); not measured when every token came in the first chunk (a
//!   non-streamed response, a one-chunk answer);
//! - ITL: per-token gaps — each later chunk of k tokens contributes its gap since the previous
//!   chunk, split k ways (k samples of gap / k); the first chunk contributes none. So the ITL
//!   samples of a stream number N − k₁ and sum to (last token − first token);
//! - ICL: gaps between successive token-bearing chunks;
//! - decode tok/s per stream: (N − k₁) / (last token − first token);
//! - e2e tok/s per stream: N / E2E; canonical e2e tok/s: o200k tokens / E2E; chars/s: generated
//!   characters (reasoning + answer) / E2E.
//!
//! Per load level (see `Window`):
//! - aggregate tok/s (steady window): output tokens *arriving* (by chunk time) inside the
//!   steady window / its length; likewise canonical tok/s and chars/s. A response whose tokens
//!   all came in one piece (non-streamed) is spread evenly over its time in flight instead;
//! - aggregate tok/s (whole run): all output tokens / (first send → last token);
//! - req/s: successful requests *ending* inside the window / its length; goodput: those that
//!   also met every SLO set;
//! - each aggregate per repetition, their median and their min–max across repetitions;
//! - a level measured in several segments (a run resumed after a crash) takes each window per
//!   segment and adds them up: the downtime between segments is never in a figure.
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use super::capacity::{SaturationSigns, saturation_signs, throughput_flat};
use super::histogram::LogHistogram;
use super::load::{Load, LoadShape};
use super::metrics::Distribution;
use super::run::{
    ClockCounts, ErrorClass, GroupKey, Phase, RecordGroup, RequestRecord, RunConfig, Slo, split_repetition,
};
use super::stats::{ATTAINMENT_BATCHES, Batch, Interval, attainment_interval, batches_of, median};

/// Confidence of every SLO-attainment interval (Wilson).
pub const ATTAINMENT_CONFIDENCE: f64 = 0.95;

/// The published definition of every figure, in words: the "How we measure" page, every
/// column head and `bakeoff measure --json` take them from here, beside the code they describe.
pub mod definitions {
    pub const TTFT: &str = "send → first non-empty token, reasoning or content";
    pub const TTFA: &str = "send → first non-empty content (answer) token; differs from TTFT for reasoning models";
    pub const E2E: &str = "send → end of stream; the client queue time is reported beside it";
    pub const ICL: &str = "gaps between successive token-bearing chunks";
    pub const ITL: &str = "per-token gaps: each chunk after the first, of k tokens, contributes its gap since the \
                           previous chunk split k ways; the first chunk's tokens came with the first token and give \
                           none. Not measured for non-streamed responses";
    pub const TPOT: &str = "(E2E − TTFT) / (output tokens − tokens of the first chunk): excludes TTFT and the first \
                            chunk's tokens, so (E2E − TTFT) / (N − 1) for one token per chunk. Not measured for \
                            non-streamed responses";
    pub const DECODE_PER_STREAM: &str = "(output tokens − tokens of the first chunk) / (last token − first token). Not \
                                         measured for non-streamed responses";
    pub const E2E_PER_STREAM: &str = "output tokens / E2E";
    pub const CANONICAL_E2E_PER_STREAM: &str = "o200k tokens of the output (reasoning + answer) / E2E";
    pub const CHARS_PER_STREAM: &str = "characters generated (reasoning + answer) / E2E";
    pub const AGGREGATE_STEADY: &str = "steady window: output tokens arriving inside the measured window / its length; \
        the window leaves ramp-up and drain out (closed loop: from the moment each of the first c requests has its first \
        token to the first end among the last c; open loop: first token of the first request to the last scheduled \
        send). A non-streamed response's tokens are spread evenly over its time in flight (send → end) and it counts as \
        busy from its send. Median over repetitions; a resumed run's windows are taken per segment, downtime excluded";
    pub const AGGREGATE_WHOLE_RUN: &str = "whole run: all output tokens / (first send → last token), ramp-up and drain \
        included; median over repetitions; per segment when resumed";
    pub const REQUEST_THROUGHPUT: &str = "successful requests ending inside the steady window per second; goodput \
        counts only those meeting every SLO";
    pub const CHUNK_ATTRIBUTION: &str = "how a stream's output tokens were attributed to its chunks (ITL, TPOT and \
        decode rest on it): as-streamed (the chunks' counts sum to the total), single-chunk, one-per-chunk (the server \
        tokenizer's total equals the chunks), server-prefixes (the server tokenizer counted the text at every chunk \
        boundary), server-prefixes-grouped (at 32 evenly spaced boundaries, o200k proportions within), \
        o200k-proportional (each chunk's o200k share of the total: an estimate)";
    pub const OUTPUT_TOKENS: &str = "server usage when reported, else the server's own tokenize endpoint when declared \
        (source `server-tokenizer`, counted after the measured load), else o200k count of the output (source \
        `tokenizer`), else content chunks (source `chunks`)";
}

/// "usage 20/20" or "server-tokenizer 20/20 · per chunk: server-prefixes 18, one-per-chunk 2":
/// where output tokens came from and, for streams of several chunks, how they were attributed
/// to chunks. Every page and export that shows token sources shows it this way.
pub fn token_caliber(sources: &BTreeMap<String, u64>, attribution: &BTreeMap<String, u64>, of: u64) -> String {
    let mut text = sources
        .iter()
        .map(|(k, v)| format!("{k} {v}/{of}"))
        .collect::<Vec<_>>()
        .join(", ");
    if !attribution.is_empty() {
        let mut by_count: Vec<(&String, &u64)> = attribution.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let per: Vec<String> = by_count.iter().map(|(k, v)| format!("{k} {v}")).collect();
        text.push_str(&format!(" · per chunk: {}", per.join(", ")));
    }
    text
}

/// The figures of one successful request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFigures {
    pub ttft_ms: f64,
    pub ttfa_ms: Option<f64>,
    pub e2e_ms: f64,
    pub tpot_ms: Option<f64>,
    pub decode_tok_s: Option<f64>,
    pub e2e_tok_s: Option<f64>,
    pub canonical_e2e_tok_s: Option<f64>,
    pub chars_per_s: Option<f64>,
    pub output_tokens: u32,
    pub canonical_tokens: Option<u32>,
    pub chars: u64,
    /// The conversation turn (1-based) the request was; None for a single request.
    pub turn: Option<u32>,
}

/// Characters generated: answer plus reasoning.
pub fn generated_chars(r: &RequestRecord) -> u64 {
    u64::from(r.output_chars) + u64::from(r.reasoning_chars())
}

/// Tokens of the first token-bearing chunk, on the scale of the record's output-token count
/// (per-chunk counts are apportioned to sum to it; when they do not, they are scaled). A record
/// without per-chunk counts is taken to have had one token in its first chunk.
pub fn first_chunk_tokens(r: &RequestRecord) -> f64 {
    let n = f64::from(r.output_tokens.unwrap_or(0));
    let Some(k1) = r.chunks.first_tokens() else {
        return n.min(1.0);
    };
    let sum = r.chunks.tokens();
    if sum == 0 {
        return n.min(1.0);
    }
    f64::from(k1) * n / sum as f64
}

/// Decode tokens: those that arrived after the first token-bearing chunk (N − k₁). None when
/// there are none (every token came at once: a non-streamed response, a one-chunk answer).
pub fn decode_tokens(r: &RequestRecord) -> Option<f64> {
    let n = f64::from(r.output_tokens?);
    let decode = n - first_chunk_tokens(r);
    // Half a token of slack: apportioned counts are whole numbers.
    (decode >= 0.5).then_some(decode)
}

/// Whether all of a response's tokens arrived in one piece (non-streamed, or a stream whose
/// answer came in a single chunk): then the aggregate spreads them over the request's time in
/// flight, since counting them at their arrival would put a whole response on one instant.
pub fn arrived_at_once(r: &RequestRecord) -> bool {
    r.chunks.len() <= 1
}

impl RequestFigures {
    /// Whether these figures meet every objective of `slo` set (a TPOT objective is met by an
    /// answer that has no TPOT: one token, or every token in one piece).
    pub fn meets(&self, slo: &Slo) -> bool {
        // A later conversation turn is held to the SLO's later-turn limits where it has them.
        let slo = &slo.limits_for_turn(self.turn);
        let within = |limit: Option<f64>, value: Option<f64>| match (limit, value) {
            (Some(l), Some(v)) => v <= l,
            _ => true,
        };
        within(slo.ttft_ms, Some(self.ttft_ms))
            // An answer without any answer token misses a TTFA objective.
            && slo.ttfa_ms.is_none_or(|l| self.ttfa_ms.is_some_and(|v| v <= l))
            && within(slo.tpot_ms, self.tpot_ms)
            && within(slo.e2e_ms, Some(self.e2e_ms))
    }

    /// None for a failed request or one without a first token or an end.
    pub fn of(r: &RequestRecord) -> Option<RequestFigures> {
        if !r.succeeded() {
            return None;
        }
        let ttft = r.ttft_us()?;
        let e2e = r.end_us.get()?;
        let n = r.output_tokens.unwrap_or(0);
        let ms = |us: i64| us as f64 / 1000.0;
        let per_s = |count: f64, us: i64| (us > 0).then(|| count / (us as f64 / 1e6));
        let decode_n = decode_tokens(r);
        let decode = match (r.last_token_us.get(), decode_n) {
            (Some(last), Some(d)) if last > ttft => per_s(d, last - ttft),
            _ => None,
        };
        let tpot = match decode_n {
            Some(d) if e2e > ttft => Some(ms(e2e - ttft) / d),
            _ => None,
        };
        let chars = generated_chars(r);
        Some(RequestFigures {
            ttft_ms: ms(ttft),
            ttfa_ms: r.first_content_us.get().map(ms),
            e2e_ms: ms(e2e),
            tpot_ms: tpot,
            decode_tok_s: decode,
            e2e_tok_s: per_s(f64::from(n), e2e),
            canonical_e2e_tok_s: r.canonical_tokens.and_then(|c| per_s(f64::from(c), e2e)),
            chars_per_s: per_s(chars as f64, e2e),
            output_tokens: n,
            canonical_tokens: r.canonical_tokens,
            chars,
            turn: r.turn.as_ref().map(|t| t.turn),
        })
    }
}

/// Per-token gaps in ms as (gap / k, k): see the module comment. The first token-bearing chunk
/// gives none, so a non-streamed response gives none.
pub fn itl_ms(r: &RequestRecord) -> Vec<(f64, u32)> {
    let mut out = Vec::with_capacity(r.chunks.len());
    let mut prev: Option<i64> = None;
    for (at, k) in &r.chunks {
        match prev {
            None => prev = Some(at),
            Some(p) if k > 0 => {
                out.push(((at - p) as f64 / 1000.0 / f64::from(k), k));
                prev = Some(at);
            }
            Some(_) => {}
        }
    }
    out
}

/// Gaps between successive token-bearing chunks, in ms.
pub fn icl_ms(r: &RequestRecord) -> impl Iterator<Item = f64> + '_ {
    let mut offsets = r.chunks.iter().map(|(at, _)| at);
    let first = offsets.next().unwrap_or_default();
    offsets.scan(first, |prev, at| {
        let gap = (at - *prev) as f64 / 1000.0;
        *prev = at;
        Some(gap)
    })
}

/// The part of a level's time that steady-window aggregates are computed over (wall clock, µs
/// since epoch).
///
/// - Closed loop at concurrency c: from the moment every one of the first c requests has its
///   first token (all streams are generating) to the moment the first of the last c requests
///   ends (a worker has no more work: the drain begins). A request whose tokens arrived in one
///   piece (non-streamed) counts as busy from its send, since its tokens are spread over its
///   time in flight.
/// - Open loop: from the first token of the first request (the server has started answering)
///   to the last scheduled send (after it, load only decreases).
///
/// When that span is empty (too few requests for a steady state), the whole span from first
/// send to last end is used and the window says so (`steady: false`).
///
/// Either span is then narrowed to whole bins of the timelines (`whole_bins`: milliseconds, wider
/// for a span too long for `MAX_BINS` of them), so every event counted in it is wholly inside.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub start_us: i64,
    pub end_us: i64,
    /// False when the whole span was used because no steady state was reached.
    pub steady: bool,
}

impl Window {
    pub fn secs(&self) -> f64 {
        (self.end_us - self.start_us) as f64 / 1e6
    }

    /// Narrowed to whole bins of `width_us` (start rounded up, end down), unless that leaves
    /// nothing. A partial bin at an edge would be counted pro rata, as if its events were spread
    /// evenly over it — and streams in lockstep (a closed loop's workers start together; a
    /// batching server hands every stream its token in the same decode step) put a burst of
    /// chunks in the very bins the window's edges fall in: 8-token chunks read up to +0.9 % at
    /// c = 16 that way.
    fn whole_bins(self, width_us: i64) -> Window {
        let start_us = (self.start_us + width_us - 1).div_euclid(width_us) * width_us;
        let end_us = self.end_us.div_euclid(width_us) * width_us;
        if end_us > start_us {
            Window {
                start_us,
                end_us,
                ..self
            }
        } else {
            self
        }
    }
}

/// Events (tokens, characters, completions) binned by wall-clock time, so the count inside
/// any window can be read afterwards. Bins start at 1 ms and double in width whenever the span
/// would need more than `MAX_BINS`, which bounds memory for any run length.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    origin_us: i64,
    width_us: i64,
    bins: Vec<f64>,
}

const MAX_BINS: usize = 1 << 16;
/// A timeline's first bin width (wider only when a span needs more than `MAX_BINS`).
const BIN_US: i64 = 1000;

impl Timeline {
    /// Spreads `amount` evenly over [from, to] (at 1 ms steps, at most 1,000 of them).
    pub fn add_spread(&mut self, from_us: i64, to_us: i64, amount: f64) {
        if to_us <= from_us {
            self.add(to_us, amount);
            return;
        }
        let steps = ((to_us - from_us) / 1000).clamp(1, 1000);
        let width = (to_us - from_us) as f64 / steps as f64;
        for i in 0..steps {
            let at = from_us + (width * (i as f64 + 0.5)) as i64;
            self.add(at, amount / steps as f64);
        }
    }

    pub fn add(&mut self, at_us: i64, amount: f64) {
        if amount == 0.0 {
            return;
        }
        if self.bins.is_empty() {
            self.width_us = BIN_US;
            // Leave room before the first event: later events may be earlier. Bin edges sit on
            // multiples of the width (from the epoch), so they do not depend on which event came
            // first: a window's partial bins, and so every figure, are the same in any order.
            self.origin_us = (at_us - BIN_US * 1024).div_euclid(BIN_US) * BIN_US;
            self.bins.push(0.0);
        }
        while at_us < self.origin_us {
            // Extend to the left by one block of bins.
            let grow = 1024.min(MAX_BINS.saturating_sub(self.bins.len())).max(1);
            if self.bins.len() + grow > MAX_BINS {
                self.coarsen();
                continue;
            }
            let mut front = vec![0.0; grow];
            front.append(&mut self.bins);
            self.bins = front;
            self.origin_us -= grow as i64 * self.width_us;
        }
        let mut at = ((at_us - self.origin_us) / self.width_us) as usize;
        while at >= MAX_BINS {
            self.coarsen();
            at = ((at_us - self.origin_us) / self.width_us) as usize;
        }
        if at >= self.bins.len() {
            if at >= self.bins.capacity() {
                // An eighth more (at least a second of 1 ms bins), not double: a level's
                // timelines (five a repetition) are most of what its figures hold, and doubling
                // left up to half of each unused.
                let len = self.bins.len();
                self.bins.reserve_exact(at + 1 - len + (len / 8).max(1024));
            }
            self.bins.resize(at + 1, 0.0);
        }
        self.bins[at] += amount;
    }

    fn coarsen(&mut self) {
        // Keep the edges on multiples of the doubled width (see `add`).
        if self.origin_us.rem_euclid(2 * self.width_us) != 0 {
            self.bins.insert(0, 0.0);
            self.origin_us -= self.width_us;
        }
        let merged: Vec<f64> = self.bins.chunks(2).map(|p| p.iter().sum()).collect();
        self.bins = merged;
        self.width_us *= 2;
    }

    /// The amount inside [start, end), partial bins counted pro rata.
    pub fn sum_between(&self, start_us: i64, end_us: i64) -> f64 {
        if self.bins.is_empty() || end_us <= start_us {
            return 0.0;
        }
        let mut total = 0.0;
        for (i, &v) in self.bins.iter().enumerate() {
            if v == 0.0 {
                continue;
            }
            let lo = self.origin_us + i as i64 * self.width_us;
            let hi = lo + self.width_us;
            let overlap = hi.min(end_us) - lo.max(start_us);
            if overlap > 0 {
                total += v * (overlap as f64 / self.width_us as f64).min(1.0);
            }
        }
        total
    }

    pub fn total(&self) -> f64 {
        self.bins.iter().sum()
    }
}

/// Requests by send time, keeping only the first and last `keep` (for the window).
#[derive(Debug, Default)]
struct Edges {
    keep: usize,
    /// Max-heap by send: the `keep` earliest sends (largest on top, to evict).
    first: BinaryHeap<(i64, i64, i64)>,
    /// Min-heap by send (negated): the `keep` latest sends.
    last: BinaryHeap<(i64, i64, i64)>,
}

impl Edges {
    /// A request sent at `send`, busy generating from `first` (its first token) and ended at `end`.
    fn add(&mut self, send: i64, first: i64, end: i64) {
        self.first.push((send, first, end));
        if self.first.len() > self.keep {
            self.first.pop();
        }
        self.last.push((-send, first, end));
        if self.last.len() > self.keep {
            self.last.pop();
        }
    }
}

/// Accumulates one segment of one repetition of one load level.
#[derive(Debug, Default)]
struct Pass {
    edges: Edges,
    tokens: Timeline,
    canonical: Timeline,
    chars: Timeline,
    completions: Timeline,
    /// Completions that met the run's objectives (empty when it set none).
    good: Timeline,
    /// Their output tokens, at their end (empty when no objective is set).
    good_tokens: Timeline,
    earliest_send: Option<i64>,
    latest_send: Option<i64>,
    earliest_first_token: Option<(i64, i64)>,
    latest_end: Option<i64>,
    latest_token: Option<i64>,
    output_tokens: f64,
    /// Set once the pass was read whole: its window and the amounts inside it, taken then (its
    /// timelines and edges let go). The inner None: the pass had no window.
    sealed: Option<Option<WindowSums>>,
}

/// A pass's window and the amounts its timelines hold inside it: all a repetition's figures
/// read of a pass's timelines.
#[derive(Debug, Clone, Copy)]
struct WindowSums {
    window: Window,
    tokens: f64,
    canonical: f64,
    chars: f64,
    completions: f64,
    good: f64,
    good_tokens: f64,
}

/// The lowest and highest of the per-repetition aggregates: their spread, not a confidence
/// interval (three repetitions cannot give one worth the name).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub max: f64,
    pub repetitions: u32,
}

/// The figures of one load level (one load, one prompt bin), every caliber labelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelFigures {
    pub load: Load,
    /// Prompt-length bin (o200k tokens of the synthetic prompt), when the level has one.
    pub prompt_tokens: Option<u32>,
    /// Requests (final attempts, warm-ups excluded).
    pub requests: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Attempts after the first (each retry is its own record; never in the figures).
    pub retries: u64,
    /// Final failures by error class (`ErrorClass::as_str`, the names of `records[].error_class`).
    pub errors: BTreeMap<String, u64>,
    /// Successful requests by where their output-token count came from.
    pub token_sources: BTreeMap<String, u64>,
    /// Successful streamed requests by how their tokens were attributed to chunks
    /// (`ChunkAttribution::as_str`): what ITL, TPOT and decode tok/s rest on.
    #[serde(default)]
    pub chunk_attribution: BTreeMap<String, u64>,
    /// Which clock timed the level's requests (absent in figures stored before it was).
    #[serde(default)]
    pub clocks: ClockCounts,
    pub ttft_ms: Option<Distribution>,
    pub ttfa_ms: Option<Distribution>,
    pub e2e_ms: Option<Distribution>,
    pub tpot_ms: Option<Distribution>,
    pub itl_ms: Option<Distribution>,
    pub icl_ms: Option<Distribution>,
    pub client_queue_ms: Option<Distribution>,
    pub decode_tok_s_per_stream: Option<Distribution>,
    pub e2e_tok_s_per_stream: Option<Distribution>,
    pub canonical_e2e_tok_s_per_stream: Option<Distribution>,
    pub chars_per_s_per_stream: Option<Distribution>,
    pub output_tokens: u64,
    pub canonical_tokens: u64,
    /// Per repetition, in repetition order.
    pub repetitions: Vec<RepetitionFigures>,
    /// Steady window (ramp-up and drain left out): median across repetitions of the
    /// per-repetition aggregates. The figure threshold rules and the knee use.
    pub aggregate_tok_s: Option<f64>,
    /// Min–max of the per-repetition steady-window aggregates (two repetitions or more).
    pub aggregate_tok_s_spread: Option<Spread>,
    /// Whole run: median across repetitions of all output tokens / (first send → last token),
    /// ramp-up and drain included (the figure most other tools print).
    pub whole_run_tok_s: Option<f64>,
    pub aggregate_canonical_tok_s: Option<f64>,
    pub aggregate_chars_per_s: Option<f64>,
    pub req_per_s: Option<f64>,
    /// SLO-meeting requests per second in the window (None without SLOs).
    pub goodput_req_per_s: Option<f64>,
    /// Output tokens per second of the requests counted by `goodput_req_per_s` (None without SLOs).
    #[serde(default)]
    pub goodput_tok_s: Option<f64>,
    /// Share of the level's requests that met every SLO (None without SLOs): failed requests
    /// (errors, timeouts) count as misses; warm-ups are never counted (`docs/capacity.md`).
    pub slo_attainment: Option<f64>,
    /// 95 % interval of `slo_attainment`: the hull of the Wilson interval and the batch-means
    /// interval over `slo_attainment_batches` (`stats::attainment_interval`), because the
    /// requests of a level under load are not independent: one queue burst makes many
    /// neighbours miss together, and Wilson alone then claims far more certainty than there is.
    #[serde(default)]
    pub slo_attainment_interval: Option<Interval>,
    /// The level's outcomes in send order cut into [`ATTAINMENT_BATCHES`] contiguous batches of
    /// (requests, met): what the interval is taken over (empty without SLOs).
    #[serde(default)]
    pub slo_attainment_batches: Vec<Batch>,
    /// Signs that the server's queue was growing within the level (TTFT trending up from its
    /// first third to its last) or across levels (throughput flat while load rose): its
    /// figures then describe a transient and are labelled "past saturation".
    #[serde(default)]
    pub saturation: SaturationSigns,
    /// Requests that met every SLO (the numerator of `slo_attainment`; its denominator is
    /// `requests`).
    #[serde(default)]
    pub slo_met: u64,
    pub slo: Slo,
    /// Segments the level was measured in: more than one when the run was resumed after an
    /// interruption; every aggregate is then taken per segment and the downtime left out.
    #[serde(default = "one")]
    pub segments: u32,
    /// Seconds between segments (last end before the interruption → first send after), left
    /// out of every aggregate.
    #[serde(default)]
    pub downtime_s: f64,
    /// Prompt-cache figures (`prompt_cache::COUNTING_RULE`): token hit rate, requests with a
    /// hit, TTFT cold vs warm; `reported` 0 when the server's usage carries no cache field.
    #[serde(default)]
    pub prompt_cache: crate::prompt_cache::CacheFigures,
}

fn one() -> u32 {
    1
}

/// The aggregates of one repetition, over its own measured window (per segment when resumed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepetitionFigures {
    pub repetition: u32,
    /// The steady window of the repetition's first segment (the only one unless resumed).
    pub window: Option<Window>,
    /// The window of every segment, in order.
    #[serde(default)]
    pub windows: Vec<Window>,
    pub aggregate_tok_s: Option<f64>,
    /// Output tokens / Σ per segment (first send → last token).
    #[serde(default)]
    pub whole_run_tok_s: Option<f64>,
    pub aggregate_canonical_tok_s: Option<f64>,
    pub aggregate_chars_per_s: Option<f64>,
    pub req_per_s: Option<f64>,
    pub goodput_req_per_s: Option<f64>,
    #[serde(default)]
    pub goodput_tok_s: Option<f64>,
}

/// Successful requests' (send time, TTFT) a level keeps for its TTFT trend.
pub const TTFT_SAMPLES: usize = 4096;

/// Streams records of one load level in and figures out.
#[derive(Debug)]
pub struct LevelAccumulator {
    load: Load,
    prompt_tokens: Option<u32>,
    slo: Slo,
    retries_allowed: u32,
    /// Wall-clock instants (µs) the run was resumed at, ascending: segment boundaries.
    resumes: Vec<i64>,
    /// By (repetition, segment).
    passes: BTreeMap<(u32, u32), Pass>,
    /// Which clock timed the requests counted.
    clocks: ClockCounts,
    requests: u64,
    succeeded: u64,
    failed: u64,
    retries: u64,
    errors: BTreeMap<String, u64>,
    sources: BTreeMap<String, u64>,
    attribution: BTreeMap<String, u64>,
    met_slo: u64,
    /// (requests, met) by 100 ms of send time, while an SLO is set: the level's outcomes in send
    /// order, coarse enough to keep for any level, for the batch-means interval of attainment.
    slo_by_send: BTreeMap<i64, (u64, u64)>,
    /// (send time µs, TTFT ms) of successful requests, one in `ttft_stride` kept (the stride
    /// doubles whenever [`TTFT_SAMPLES`] are held): the level's TTFT trend, in bounded memory.
    ttft_by_send: Vec<(i64, f64)>,
    ttft_stride: u64,
    ttft_seen: u64,
    output_tokens: u64,
    canonical_tokens: u64,
    h: Histograms,
    cache: crate::prompt_cache::CacheAccumulator,
    /// A successful record came for a pass already sealed (see [`LevelAccumulator::seal`]).
    read_after_sealing: bool,
}

#[derive(Debug, Default)]
struct Histograms {
    ttft: LogHistogram,
    ttfa: LogHistogram,
    e2e: LogHistogram,
    tpot: LogHistogram,
    itl: LogHistogram,
    icl: LogHistogram,
    queue: LogHistogram,
    decode: LogHistogram,
    e2e_tok_s: LogHistogram,
    canonical: LogHistogram,
    chars: LogHistogram,
}

impl LevelAccumulator {
    /// `retries_allowed` is the run's retry budget: a failed attempt below it with a
    /// retryable class was retried, so it is not a final failure.
    pub fn new(load: Load, prompt_tokens: Option<u32>, slo: Slo, retries_allowed: u32) -> Self {
        LevelAccumulator {
            load,
            prompt_tokens,
            slo,
            retries_allowed,
            resumes: Vec::new(),
            passes: BTreeMap::new(),
            requests: 0,
            succeeded: 0,
            failed: 0,
            retries: 0,
            errors: BTreeMap::new(),
            sources: BTreeMap::new(),
            attribution: BTreeMap::new(),
            clocks: ClockCounts::default(),
            met_slo: 0,
            slo_by_send: BTreeMap::new(),
            ttft_by_send: Vec::new(),
            ttft_stride: 1,
            ttft_seen: 0,
            output_tokens: 0,
            canonical_tokens: 0,
            h: Histograms::default(),
            cache: Default::default(),
            read_after_sealing: false,
        }
    }

    /// Seals every pass of `repetition` (each segment's): all of its records were added, so each
    /// keeps its window's sums and lets its timelines go. A record added to a sealed pass later
    /// counts in no figure: [`LevelAccumulator::read_after_sealing`] tells.
    pub fn seal(&mut self, repetition: u32) {
        let load = self.load;
        for (_, pass) in self.passes.range_mut((repetition, 0)..=(repetition, u32::MAX)) {
            pass.seal(load);
        }
    }

    /// Whether a record came for a pass after it was sealed: the figures then miss it.
    pub fn read_after_sealing(&self) -> bool {
        self.read_after_sealing
    }

    /// The instants (wall clock, µs) the run was resumed at: a request sent after one belongs to
    /// a later segment, and every window is taken per segment.
    pub fn with_resumes(mut self, resumes: &[i64]) -> Self {
        self.resumes = resumes.to_vec();
        self.resumes.sort_unstable();
        self
    }

    fn keep(&self) -> usize {
        match self.load {
            Load::Concurrency { concurrency } => concurrency.max(1) as usize,
            Load::Rate { .. } | Load::Replay { .. } => 1,
        }
    }

    /// One final outcome against the SLO (a failure is a miss), by its send time.
    fn count_outcome(&mut self, sent_at_us: i64, met: bool) {
        if self.slo.is_set() {
            let slot = self.slo_by_send.entry(sent_at_us.div_euclid(100_000)).or_default();
            slot.0 += 1;
            slot.1 += u64::from(met);
        }
    }

    fn segment_of(&self, send_us: i64) -> u32 {
        self.resumes.iter().take_while(|&&at| at <= send_us).count() as u32
    }

    /// Adds one attempt. `repetition` is the repetition within the level (records of one
    /// repetition share a window). Warm-ups must not be passed.
    pub fn add(&mut self, r: &RequestRecord, repetition: u32) {
        if r.attempt > 0 {
            self.retries += 1;
        }
        if !r.succeeded() {
            let retried = r.attempt < self.retries_allowed && r.error_class.is_some_and(ErrorClass::is_retryable);
            if !retried {
                self.requests += 1;
                self.failed += 1;
                self.clocks.add(r.clock);
                let class = r.error_class.map_or("other", |c| c.as_str());
                *self.errors.entry(class.to_string()).or_default() += 1;
                self.count_outcome(r.sent_at_us, false);
            }
            return;
        }
        let Some(f) = RequestFigures::of(r) else {
            return;
        };
        self.requests += 1;
        self.succeeded += 1;
        self.clocks.add(r.clock);
        if let Some(src) = r.output_tokens_source {
            *self.sources.entry(src.as_str().to_string()).or_default() += 1;
        }
        if let Some(how) = r.chunk_attribution.filter(|_| r.chunks.len() > 1) {
            *self.attribution.entry(how.as_str().to_string()).or_default() += 1;
        }
        if self.ttft_seen.is_multiple_of(self.ttft_stride) {
            self.ttft_by_send.push((r.sent_at_us, f.ttft_ms));
            if self.ttft_by_send.len() >= TTFT_SAMPLES {
                let mut i = 0;
                self.ttft_by_send.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.ttft_stride *= 2;
            }
        }
        self.ttft_seen += 1;
        self.cache.add(r, Some(f.ttft_ms));
        let h = &mut self.h;
        h.ttft.record(f.ttft_ms);
        if let Some(v) = f.ttfa_ms {
            h.ttfa.record(v);
        }
        h.e2e.record(f.e2e_ms);
        h.queue.record(r.client_queue_us as f64 / 1000.0);
        for (v, target) in [
            (f.tpot_ms, &mut h.tpot),
            (f.decode_tok_s, &mut h.decode),
            (f.e2e_tok_s, &mut h.e2e_tok_s),
            (f.canonical_e2e_tok_s, &mut h.canonical),
            (f.chars_per_s, &mut h.chars),
        ] {
            if let Some(v) = v {
                target.record(v);
            }
        }
        for (gap, k) in itl_ms(r) {
            h.itl.record_n(gap, u64::from(k));
        }
        for gap in icl_ms(r) {
            h.icl.record(gap);
        }
        let met = f.meets(&self.slo);
        if met {
            self.met_slo += 1;
        }
        self.count_outcome(r.sent_at_us, met);
        self.output_tokens += u64::from(f.output_tokens);
        self.canonical_tokens += u64::from(f.canonical_tokens.unwrap_or(0));

        let keep = self.keep();
        let segment = self.segment_of(r.sent_at_us);
        if self
            .passes
            .get(&(repetition, segment))
            .is_some_and(|p| p.sealed.is_some())
        {
            self.read_after_sealing = true;
            return;
        }
        let pass = self.passes.entry((repetition, segment)).or_insert_with(|| Pass {
            edges: Edges {
                keep,
                ..Edges::default()
            },
            ..Pass::default()
        });
        let send = r.sent_at_us;
        let at_once = arrived_at_once(r);
        let first = send + r.ttft_us().unwrap_or(0);
        let end = send + r.end_us.get().unwrap_or(0);
        let last_token = send + r.last_token_us.get().or(r.end_us.get()).unwrap_or(0);
        // A response delivered in one piece keeps its worker busy from the send on.
        pass.edges.add(send, if at_once { send } else { first }, end);
        pass.earliest_send = Some(pass.earliest_send.map_or(send, |s| s.min(send)));
        pass.latest_send = Some(pass.latest_send.map_or(send, |s| s.max(send)));
        if pass.earliest_first_token.is_none_or(|(s, _)| send < s) {
            pass.earliest_first_token = Some((send, if at_once { send } else { first }));
        }
        pass.latest_end = Some(pass.latest_end.map_or(end, |e| e.max(end)));
        pass.latest_token = Some(pass.latest_token.map_or(last_token, |e| e.max(last_token)));
        pass.output_tokens += f64::from(f.output_tokens);
        // Token arrivals: each chunk at its time; scaled so they sum to the output count.
        let chunk_sum = r.chunks.tokens();
        let n = f64::from(f.output_tokens);
        let canonical_per_token = f.canonical_tokens.map_or(0.0, |c| f64::from(c) / n.max(1.0));
        let chars_per_token = f.chars as f64 / n.max(1.0);
        if at_once || chunk_sum == 0 {
            pass.tokens.add_spread(send, last_token, n);
            pass.canonical.add_spread(send, last_token, n * canonical_per_token);
            pass.chars.add_spread(send, last_token, f.chars as f64);
        } else {
            let scale = n / chunk_sum as f64;
            for (at, k) in &r.chunks {
                let tokens = f64::from(k) * scale;
                pass.tokens.add(send + at, tokens);
                pass.canonical.add(send + at, tokens * canonical_per_token);
                pass.chars.add(send + at, tokens * chars_per_token);
            }
        }
        pass.completions.add(end, 1.0);
        // Goodput is a figure only under an objective: without one every request meets it, and
        // a second timeline of every completion would cost a pass's bins for nothing.
        if met && self.slo.is_set() {
            pass.good.add(end, 1.0);
            pass.good_tokens.add(end, n);
        }
    }

    pub fn finish(self) -> LevelFigures {
        let slo_set = self.slo.is_set();
        let batches = batches_of(self.slo_by_send.values().copied(), ATTAINMENT_BATCHES);
        let mut by_repetition: BTreeMap<u32, Vec<&Pass>> = BTreeMap::new();
        for (&(repetition, _), pass) in &self.passes {
            by_repetition.entry(repetition).or_default().push(pass);
        }
        let repetitions: Vec<RepetitionFigures> = by_repetition
            .iter()
            .map(|(&repetition, segments)| repetition_figures(repetition, segments, self.load, slo_set))
            .collect();
        let segments = self
            .passes
            .keys()
            .map(|k| k.1)
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u32;
        // The run's time away: from the last answer of one segment to the first send of the
        // next, over every repetition (a resume can fall between two repetitions, whose windows
        // then hold no downtime, yet the level was still interrupted for that long).
        let mut spans: BTreeMap<u32, (Option<i64>, Option<i64>)> = BTreeMap::new();
        for (&(_, segment), pass) in &self.passes {
            let span = spans.entry(segment).or_default();
            span.0 = span.0.into_iter().chain(pass.earliest_send).min();
            span.1 = span.1.into_iter().chain(pass.latest_end).max();
        }
        let spans: Vec<_> = spans.into_values().collect();
        let downtime_s: f64 = spans
            .windows(2)
            .filter_map(|w| {
                let (before, after) = (w[0].1?, w[1].0?);
                Some(((after - before) as f64 / 1e6).max(0.0))
            })
            .sum();
        let agg: Vec<f64> = repetitions.iter().filter_map(|r| r.aggregate_tok_s).collect();
        let med = |values: Vec<f64>| {
            let mut v = values;
            (!v.is_empty()).then(|| median(&mut v))
        };
        let spread = (agg.len() >= 2).then(|| Spread {
            min: agg.iter().copied().fold(f64::INFINITY, f64::min),
            max: agg.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            repetitions: agg.len() as u32,
        });
        let h = &self.h;
        LevelFigures {
            load: self.load,
            prompt_tokens: self.prompt_tokens,
            requests: self.requests,
            succeeded: self.succeeded,
            failed: self.failed,
            retries: self.retries,
            errors: self.errors,
            token_sources: self.sources,
            chunk_attribution: self.attribution,
            clocks: self.clocks,
            ttft_ms: Distribution::from_histogram(&h.ttft),
            ttfa_ms: Distribution::from_histogram(&h.ttfa),
            e2e_ms: Distribution::from_histogram(&h.e2e),
            tpot_ms: Distribution::from_histogram(&h.tpot),
            itl_ms: Distribution::from_histogram(&h.itl),
            icl_ms: Distribution::from_histogram(&h.icl),
            client_queue_ms: Distribution::from_histogram(&h.queue),
            decode_tok_s_per_stream: Distribution::from_histogram(&h.decode),
            e2e_tok_s_per_stream: Distribution::from_histogram(&h.e2e_tok_s),
            canonical_e2e_tok_s_per_stream: Distribution::from_histogram(&h.canonical),
            chars_per_s_per_stream: Distribution::from_histogram(&h.chars),
            output_tokens: self.output_tokens,
            canonical_tokens: self.canonical_tokens,
            aggregate_tok_s: med(agg),
            aggregate_tok_s_spread: spread,
            whole_run_tok_s: med(repetitions.iter().filter_map(|r| r.whole_run_tok_s).collect()),
            aggregate_canonical_tok_s: med(repetitions.iter().filter_map(|r| r.aggregate_canonical_tok_s).collect()),
            aggregate_chars_per_s: med(repetitions.iter().filter_map(|r| r.aggregate_chars_per_s).collect()),
            req_per_s: med(repetitions.iter().filter_map(|r| r.req_per_s).collect()),
            goodput_req_per_s: med(repetitions.iter().filter_map(|r| r.goodput_req_per_s).collect()),
            goodput_tok_s: med(repetitions.iter().filter_map(|r| r.goodput_tok_s).collect()),
            slo_attainment: (slo_set && self.requests > 0).then(|| self.met_slo as f64 / self.requests as f64),
            slo_attainment_interval: if slo_set {
                attainment_interval(self.met_slo, self.requests, &batches, ATTAINMENT_CONFIDENCE)
            } else {
                None
            },
            slo_met: self.met_slo,
            slo_attainment_batches: batches,
            saturation: saturation_signs(&self.ttft_by_send, false, None, None),
            slo: self.slo,
            repetitions,
            segments: segments.max(1),
            downtime_s,
            prompt_cache: self.cache.finish(),
        }
    }
}

/// One repetition's aggregates over the windows of its segments: amounts summed over windows,
/// divided by the windows' summed length.
fn repetition_figures(repetition: u32, segments: &[&Pass], load: Load, slo_set: bool) -> RepetitionFigures {
    let windows: Vec<WindowSums> = segments.iter().filter_map(|p| p.window_sums(load)).collect();
    let secs: f64 = windows.iter().map(|w| w.window.secs()).sum();
    let rate = |amount: fn(&WindowSums) -> f64| (secs > 0.0).then(|| windows.iter().map(amount).sum::<f64>() / secs);
    let whole_secs: f64 = segments
        .iter()
        .filter_map(|p| Some((p.latest_token? - p.earliest_send?) as f64 / 1e6))
        .filter(|s| *s > 0.0)
        .sum();
    let tokens: f64 = segments.iter().map(|p| p.output_tokens).sum();
    RepetitionFigures {
        repetition,
        window: windows.first().map(|w| w.window),
        windows: windows.iter().map(|w| w.window).collect(),
        aggregate_tok_s: rate(|w| w.tokens),
        whole_run_tok_s: (whole_secs > 0.0).then(|| tokens / whole_secs),
        aggregate_canonical_tok_s: rate(|w| w.canonical),
        aggregate_chars_per_s: rate(|w| w.chars),
        req_per_s: rate(|w| w.completions),
        goodput_req_per_s: if slo_set { rate(|w| w.good) } else { None },
        goodput_tok_s: if slo_set { rate(|w| w.good_tokens) } else { None },
    }
}

impl Pass {
    /// The pass's window and the amounts inside it (as sealed, once it is).
    fn window_sums(&self, load: Load) -> Option<WindowSums> {
        if let Some(sealed) = self.sealed {
            return sealed;
        }
        let window = self.window(load)?;
        let inside = |t: &Timeline| t.sum_between(window.start_us, window.end_us);
        Some(WindowSums {
            window,
            tokens: inside(&self.tokens),
            canonical: inside(&self.canonical),
            chars: inside(&self.chars),
            completions: inside(&self.completions),
            good: inside(&self.good),
            good_tokens: inside(&self.good_tokens),
        })
    }

    /// Keeps the window's sums and what the level's other figures read of the pass (its spans,
    /// its whole-run rate); lets the timelines, the edges and what found the window go.
    fn seal(&mut self, load: Load) {
        let sealed = Some(self.window_sums(load));
        *self = Pass {
            earliest_send: self.earliest_send,
            latest_end: self.latest_end,
            latest_token: self.latest_token,
            output_tokens: self.output_tokens,
            sealed,
            ..Pass::default()
        };
    }

    fn window(&self, load: Load) -> Option<Window> {
        let full = Window {
            start_us: self.earliest_send?,
            end_us: self.latest_end?,
            steady: false,
        };
        let steady = match load {
            Load::Concurrency { .. } => {
                let start = self.edges.first.iter().map(|e| e.1).max()?;
                let end = self.edges.last.iter().map(|e| e.2).min()?;
                // Fewer requests than workers: no moment had every worker busy.
                let enough = self.edges.first.len() == self.edges.keep;
                (enough && end > start).then_some((start, end))
            }
            Load::Rate { .. } | Load::Replay { .. } => {
                let start = self.earliest_first_token?.1;
                let end = self.latest_send?;
                (end > start).then_some((start, end))
            }
        };
        let window = match steady {
            Some((start_us, end_us)) => Window {
                start_us,
                end_us,
                steady: true,
            },
            None => (full.end_us > full.start_us).then_some(full)?,
        };
        // Bin edges are multiples of each timeline's width, and the widths are 1 ms doubled: the
        // widest one's edges are edges of all.
        let timelines = [
            &self.tokens,
            &self.canonical,
            &self.chars,
            &self.completions,
            &self.good,
            &self.good_tokens,
        ];
        let width_us = timelines.iter().map(|t| t.width_us).max().unwrap_or(BIN_US).max(BIN_US);
        Some(window.whole_bins(width_us))
    }
}

/// How far the harness itself can be trusted in one run: recorded with every run (the
/// `runs.harness` column) and in `bakeoff measure --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessReport {
    pub bakeoff_version: String,
    pub host: String,
    pub cores: u32,
    /// Wall time of the execution, seconds.
    pub wall_s: f64,
    /// bakeoff's own CPU time (user + system) over the execution; None where not measurable.
    pub cpu_s: Option<f64>,
    /// cpu_s / (wall_s × cores).
    pub cpu_share: Option<f64>,
    /// Output tokens of measured requests.
    pub streamed_tokens: u64,
    pub cpu_s_per_million_tokens: Option<f64>,
    /// Whether the load was open loop (a rate), where lag is measured against a schedule.
    pub open_loop: bool,
    /// Open loop: actual − planned send time of every measured request, ms.
    pub schedule_lag_ms: Option<Distribution>,
    /// Closed loop: time a ready request waited in bakeoff before its send, ms.
    pub client_queue_ms: Option<Distribution>,
    /// How late bakeoff's own event loop woke a 50 ms ticker during the run, ms (timer
    /// resolution is 1 ms): a busy or starved client shows here before anywhere else.
    #[serde(default)]
    pub runtime_lag_ms: Option<Distribution>,
    pub lag_bound_ms: f64,
    /// True when a speed figure of this run must not be trusted; `reasons` says why.
    pub unreliable: bool,
    pub reasons: Vec<String>,
    /// The event loop's lag spikes and the measured requests whose timing overlapped one
    /// (reports stored before spikes were kept read as none observed).
    #[serde(default)]
    pub lag_spikes: LagSpikes,
    /// How far bakeoff's own lag could have moved each reported percentile it touched
    /// (`self_check`); one above its bound is a reason the run is flagged.
    #[serde(default)]
    pub figure_shifts: Vec<crate::self_check::FigureShift>,
    /// CPU seconds of the whole bakeoff process over the execution, every thread included
    /// (`cpu_s` leaves out an in-process mock and page threads).
    #[serde(default)]
    pub process_cpu_s: Option<f64>,
    /// The bakeoff process's peak resident memory since it started (the kernel's high-water
    /// mark), bytes, when the report was made.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
}

impl HarnessReport {
    /// One report for a run measured in several units (one per candidate, maybe on different
    /// workers): times, CPU and tokens summed; each lag distribution the worst unit's (highest
    /// p99), since a figure is only as trustworthy as the client that measured it; unreliable
    /// when any unit was, with every unit's reasons; hosts named. None for no report.
    pub fn combine(reports: &[HarnessReport]) -> Option<HarnessReport> {
        let (first, rest) = reports.split_first()?;
        if rest.is_empty() {
            return Some(first.clone());
        }
        let worst = |pick: fn(&HarnessReport) -> &Option<Distribution>| {
            reports
                .iter()
                .filter_map(|r| pick(r).clone())
                .max_by(|a, b| a.p99.total_cmp(&b.p99))
        };
        let mut hosts: Vec<&str> = reports.iter().map(|r| r.host.as_str()).collect();
        hosts.dedup();
        let wall_s: f64 = reports.iter().map(|r| r.wall_s).sum();
        let cores = reports.iter().map(|r| r.cores).max().unwrap_or(1);
        let cpu_s = reports.iter().map(|r| r.cpu_s).sum::<Option<f64>>();
        let streamed_tokens = reports.iter().map(|r| r.streamed_tokens).sum();
        let mut spikes: Vec<(i64, i64, f64)> = reports.iter().flat_map(|r| r.lag_spikes.spikes.clone()).collect();
        spikes.sort_by_key(|s| s.0);
        spikes.truncate(MAX_LAG_SPIKES);
        let mut reasons: Vec<String> = Vec::new();
        for reason in reports.iter().flat_map(|r| &r.reasons) {
            if !reasons.contains(reason) {
                reasons.push(reason.clone());
            }
        }
        Some(HarnessReport {
            bakeoff_version: first.bakeoff_version.clone(),
            host: hosts.join(", "),
            cores,
            wall_s,
            cpu_s,
            cpu_share: cpu_s.map(|c| c / (wall_s * f64::from(cores)).max(f64::MIN_POSITIVE)),
            streamed_tokens,
            cpu_s_per_million_tokens: cpu_s
                .filter(|_| streamed_tokens > 0)
                .map(|c| c / streamed_tokens as f64 * 1e6),
            open_loop: reports.iter().any(|r| r.open_loop),
            schedule_lag_ms: worst(|r| &r.schedule_lag_ms),
            client_queue_ms: worst(|r| &r.client_queue_ms),
            runtime_lag_ms: worst(|r| &r.runtime_lag_ms),
            lag_bound_ms: first.lag_bound_ms,
            unreliable: reports.iter().any(|r| r.unreliable),
            reasons,
            lag_spikes: LagSpikes {
                threshold_ms: first.lag_spikes.threshold_ms,
                spikes,
                measured_requests: reports.iter().map(|r| r.lag_spikes.measured_requests).sum(),
                marked_requests: reports.iter().map(|r| r.lag_spikes.marked_requests).sum(),
            },
            figure_shifts: reports.iter().flat_map(|r| r.figure_shifts.clone()).collect(),
            process_cpu_s: reports.iter().map(|r| r.process_cpu_s).sum::<Option<f64>>(),
            peak_rss_bytes: reports.iter().filter_map(|r| r.peak_rss_bytes).max(),
        })
    }
}

/// Lag spikes of one run: each interval (wall clock, µs since the epoch) in which bakeoff may
/// have stalled (from its last on-time wake-up or read to one later than `threshold_ms`), and the
/// measured requests whose span (send → end) overlapped one — a timestamp taken inside may be
/// late by up to the time since the interval began (`self_check`). The marks are derived from
/// the stored intervals and records, so anyone holding an export can recompute them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LagSpikes {
    pub threshold_ms: f64,
    /// (start µs, end µs, lateness ms), in time order; at most `MAX_LAG_SPIKES`, later ones
    /// merged into the last (which then covers them: more requests marked, never fewer).
    pub spikes: Vec<(i64, i64, f64)>,
    pub measured_requests: u64,
    pub marked_requests: u64,
}

/// Most spike intervals a report keeps.
pub const MAX_LAG_SPIKES: usize = 1000;

impl LagSpikes {
    /// Whether a request spanning [start, end] (µs) overlapped a spike.
    pub fn overlaps(&self, start_us: i64, end_us: i64) -> bool {
        let at = self.spikes.partition_point(|s| s.1 < start_us);
        self.spikes.get(at).is_some_and(|s| s.0 <= end_us)
    }

    /// Whether this measured request (warm-ups and rollout requests never are) overlapped a
    /// spike: its timings are marked on the drill-down and in exports.
    pub fn marks(&self, r: &RequestRecord) -> bool {
        !r.is_warmup && self.overlaps(r.sent_at_us, r.sent_at_us + r.end_us.get().unwrap_or(0).max(0))
    }

    /// "3 of 1,200 requests overlapped a lag spike > 5 ms; their timings are marked".
    pub fn describe(&self) -> String {
        if self.marked_requests == 0 {
            return format!(
                "no request of {} overlapped a lag spike > {} ms",
                super::format::thousands(self.measured_requests),
                super::format::shortest(self.threshold_ms)
            );
        }
        format!(
            "{} of {} requests overlapped a lag spike > {} ms; their timings are marked",
            super::format::thousands(self.marked_requests),
            super::format::thousands(self.measured_requests),
            super::format::shortest(self.threshold_ms)
        )
    }
}

/// The figures of one candidate in one run: one entry per load level × prompt bin, in run
/// order, and the knee of each prompt bin when the run was a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFigures {
    pub levels: Vec<LevelFigures>,
    /// Per prompt bin (None: untagged cases), for sweeps only.
    pub knees: Vec<(Option<u32>, Knee)>,
}

/// Computes `RunFigures` for `candidate_id` from a run's records in one pass. `bin_of` gives a
/// case's prompt-length bin. Warm-ups, rollout requests and other phases are left out.
pub fn run_figures<'a>(
    records: impl IntoIterator<Item = &'a RequestRecord>,
    config: &RunConfig,
    candidate_id: i64,
    bin_of: impl Fn(&str) -> Option<u32>,
) -> RunFigures {
    run_figures_resumed(records, config, candidate_id, bin_of, &[])
}

/// `run_figures` of a run resumed at `resumes` (wall clock µs, see `resumes_of`): every window
/// is taken per segment, so the downtime is in no figure.
pub fn run_figures_resumed<'a>(
    records: impl IntoIterator<Item = &'a RequestRecord>,
    config: &RunConfig,
    candidate_id: i64,
    bin_of: impl Fn(&str) -> Option<u32>,
    resumes: &[i64],
) -> RunFigures {
    let mut levels = RunLevels::new(config, candidate_id, bin_of, resumes);
    records.into_iter().for_each(|r| levels.add(r));
    levels.finish()
}

/// [`run_figures_resumed`] fed a record at a time: any record may be added (another candidate's,
/// warm-ups and other phases are left out), in any order.
pub struct RunLevels<'a, F> {
    config: &'a RunConfig,
    loads: Vec<Load>,
    phase: Phase,
    candidate_id: i64,
    bin_of: F,
    resumes: &'a [i64],
    levels: BTreeMap<(u32, Option<u32>), LevelAccumulator>,
    /// When sealing: the records left to read of each (level, repetition).
    whole: Option<ReadWhole<(u32, u32)>>,
}

impl<'a, F: Fn(&str) -> Option<u32>> RunLevels<'a, F> {
    pub fn new(config: &'a RunConfig, candidate_id: i64, bin_of: F, resumes: &'a [i64]) -> Self {
        RunLevels {
            config,
            loads: match config.load {
                LoadShape::FindCapacity { .. } => Vec::new(),
                _ => config.loads(),
            },
            phase: config.measured_phase(),
            candidate_id,
            bin_of,
            resumes,
            levels: BTreeMap::new(),
            whole: None,
        }
    }

    /// Fed every record of the candidate `groups` counts, in the store's order: each
    /// repetition's passes are sealed as soon as its last record is read, so what the figures
    /// hold no longer grows with the run's length.
    pub fn sealing(mut self, groups: &[RecordGroup]) -> Self {
        let phase = self.phase;
        self.whole = Some(ReadWhole::new(self.candidate_id, groups, |g| {
            (!g.is_warmup && g.phase == phase).then(|| {
                let (level, repetition, _) = split_repetition(g.repetition);
                (level, repetition)
            })
        }));
        self
    }

    pub fn add(&mut self, r: &RequestRecord) {
        let read_whole = self.whole.as_mut().and_then(|w| w.read(r));
        self.take(r);
        if let Some((level, repetition)) = read_whole {
            let bins = self.levels.range_mut((level, None)..=(level, Some(u32::MAX)));
            bins.for_each(|(_, l)| l.seal(repetition));
        }
    }

    /// Whether a record came for a repetition already sealed (see [`RunLevels::sealing`]).
    pub fn read_after_sealing(&self) -> bool {
        self.levels.values().any(LevelAccumulator::read_after_sealing)
    }

    fn take(&mut self, r: &RequestRecord) {
        // A conversation's ramp turns are left out like warm-ups (`conversation::RAMP_RULE`).
        if r.candidate_id != self.candidate_id || r.is_warmup || r.in_ramp() || r.phase != self.phase {
            return;
        }
        let (level, repetition, _) = split_repetition(r.repetition);
        // A find-capacity run's levels are its probes, keyed by their load (`loads` is empty).
        let load = match self.loads.get(level as usize) {
            Some(&load) => load,
            None if self.loads.is_empty() => match self.config.load.level_load(self.config.concurrency, level) {
                Some(load) => load,
                None => return,
            },
            None => return,
        };
        let bin = (self.bin_of)(&r.case_id);
        let (config, resumes) = (self.config, self.resumes);
        // A plain eval run keeps its repetitions in `repetition` itself (level 0, cycle 0).
        self.levels
            .entry((level, bin))
            .or_insert_with(|| {
                LevelAccumulator::new(load, bin, config.effective_slo(), config.retries).with_resumes(resumes)
            })
            .add(r, repetition);
    }

    pub fn finish(self) -> RunFigures {
        let mut levels: Vec<LevelFigures> = self.levels.into_values().map(LevelAccumulator::finish).collect();
        // Throughput flat while load rose: each level against the one before it (same prompt bin).
        for i in 0..levels.len() {
            let this = &levels[i];
            let previous = levels[..i]
                .iter()
                .rev()
                .find(|l| l.prompt_tokens == this.prompt_tokens)
                .and_then(|l| Some((l.load.amount(), l.req_per_s?)));
            let now = this.req_per_s.map(|r| (this.load.amount(), r));
            levels[i].saturation.throughput_flat = throughput_flat(previous, now);
        }
        let knees = knees_of(&levels, &self.config.load);
        RunFigures { levels, knees }
    }
}

/// The knee of each prompt bin of a sweep's levels (none for other load shapes): the one knee
/// search behind the run page, the scorecard's chart marker and `measure`.
pub fn knees_of(levels: &[LevelFigures], load: &LoadShape) -> Vec<(Option<u32>, Knee)> {
    let LoadShape::Sweep {
        ttft_factor, min_gain, ..
    } = *load
    else {
        return Vec::new();
    };
    let mut bins: Vec<Option<u32>> = levels.iter().map(|l| l.prompt_tokens).collect();
    bins.sort();
    bins.dedup();
    let mut knees = Vec::new();
    for bin in bins {
        let points: Vec<SweepPoint> = levels
            .iter()
            .filter(|l| l.prompt_tokens == bin)
            .filter_map(|l| match l.load {
                Load::Concurrency { concurrency } => Some(SweepPoint {
                    concurrency,
                    p95_ttft_ms: l.ttft_ms.as_ref().map(|d| d.p95),
                    aggregate_tok_s: l.aggregate_tok_s,
                }),
                Load::Rate { .. } | Load::Replay { .. } => None,
            })
            .collect();
        if let Some(knee) = find_knee(&points, ttft_factor, min_gain) {
            knees.push((bin, knee));
        }
    }
    knees
}

/// The figures at closed-loop concurrency `c` of one candidate's *final attempts* (the last
/// attempt of each request, warm-ups and staged-start requests excluded), all prompt bins
/// pooled: what a scorecard rule, its chart and a comparison read for a level. Records of
/// other phases than `quality` and `throughput` (soak, judge) are left out. Equal to the run
/// page's level row whenever the level has one prompt bin. None when nothing was measured at c.
pub fn figures_at_concurrency<'a>(
    finals: impl IntoIterator<Item = &'a RequestRecord>,
    c: u32,
    resumes: &[i64],
) -> Option<LevelFigures> {
    let mut levels = ConcurrencyLevels::new(resumes);
    finals
        .into_iter()
        .filter(|r| r.concurrency == c)
        .for_each(|r| levels.add(r));
    levels.finish().remove(&c)
}

/// [`figures_at_concurrency`] of every concurrency at once, fed a final attempt at a time (in
/// any order; warm-ups and phases other than quality and throughput are left out).
pub struct ConcurrencyLevels {
    resumes: Vec<i64>,
    levels: BTreeMap<u32, LevelAccumulator>,
}

impl ConcurrencyLevels {
    pub fn new(resumes: &[i64]) -> Self {
        ConcurrencyLevels {
            resumes: resumes.to_vec(),
            levels: BTreeMap::new(),
        }
    }

    /// Whether `r` is one this takes in (`add` leaves the others out): no warm-up, no
    /// conversation turn of a level's ramp (`conversation::RAMP_RULE`).
    pub fn takes(r: &RequestRecord) -> bool {
        !r.is_warmup && !r.in_ramp() && matches!(r.phase, Phase::Quality | Phase::Throughput)
    }

    pub fn add(&mut self, r: &RequestRecord) {
        if !Self::takes(r) {
            return;
        }
        let resumes = &self.resumes;
        self.levels
            .entry(r.concurrency)
            .or_insert_with(|| {
                LevelAccumulator::new(
                    Load::Concurrency {
                        concurrency: r.concurrency,
                    },
                    None,
                    Slo::default(),
                    0,
                )
                .with_resumes(resumes)
            })
            .add(r, split_repetition(r.repetition).1);
    }

    /// The pass (concurrency, repetition) the records of `group` feed, if they feed one.
    pub fn pass_of(group: &RecordGroup) -> Option<(u32, u32)> {
        let taken = !group.is_warmup && matches!(group.phase, Phase::Quality | Phase::Throughput);
        taken.then(|| (group.concurrency, split_repetition(group.repetition).1))
    }

    /// Seals the passes of `repetition` at `concurrency` (see [`LevelAccumulator::seal`]).
    pub fn seal(&mut self, (concurrency, repetition): (u32, u32)) {
        if let Some(level) = self.levels.get_mut(&concurrency) {
            level.seal(repetition);
        }
    }

    /// Whether a record came for a pass already sealed.
    pub fn read_after_sealing(&self) -> bool {
        self.levels.values().any(LevelAccumulator::read_after_sealing)
    }

    /// Timeline bins held over every level (what sealing lets go).
    #[cfg(test)]
    pub(crate) fn bins_held(&self) -> usize {
        let pass = |p: &Pass| [&p.tokens, &p.canonical, &p.chars, &p.completions, &p.good].map(|t| t.bins.len());
        let level = |l: &LevelAccumulator| l.passes.values().flat_map(pass).sum::<usize>();
        self.levels.values().map(level).sum()
    }

    /// The figures of every concurrency some record was added at.
    pub fn finish(self) -> BTreeMap<u32, LevelFigures> {
        self.levels.into_iter().map(|(c, level)| (c, level.finish())).collect()
    }
}

/// A candidate's stored records counted down as they are read (in any order): names each key
/// `K` of a fold (a level's repetition) once every record that feeds it was read, so that its
/// passes can be sealed — their timelines reduced to their windows' sums and let go.
#[derive(Debug)]
pub struct ReadWhole<K> {
    candidate_id: i64,
    /// Records left to read of each group, and the key it feeds (None: none of the fold's).
    left: HashMap<GroupKey, (u64, Option<K>)>,
    /// Groups not yet read whole of each key.
    open: HashMap<K, usize>,
}

impl<K: Copy + Eq + Hash> ReadWhole<K> {
    /// `groups`: every record of the candidate the reader will read; `key`: what each feeds.
    pub fn new(candidate_id: i64, groups: &[RecordGroup], key: impl Fn(&RecordGroup) -> Option<K>) -> Self {
        let mut whole = ReadWhole {
            candidate_id,
            left: HashMap::new(),
            open: HashMap::new(),
        };
        for g in groups.iter().filter(|g| g.records > 0) {
            let k = key(g);
            whole.left.insert(g.key(), (g.records, k));
            if let Some(k) = k {
                *whole.open.entry(k).or_default() += 1;
            }
        }
        whole
    }

    /// Counts `r` read: the key whose records were all read with it, if any. A record no group
    /// counted (or one more than counted) names none: its pass is then never sealed, or it
    /// comes after its pass was (which the fold tells).
    pub fn read(&mut self, r: &RequestRecord) -> Option<K> {
        if r.candidate_id != self.candidate_id {
            return None;
        }
        let (left, key) = self.left.get_mut(&RecordGroup::key_of(r))?;
        if *left == 0 {
            return None;
        }
        *left -= 1;
        let key = (*left == 0).then_some(*key).flatten()?;
        let open = self.open.get_mut(&key)?;
        *open -= 1;
        (*open == 0).then_some(key)
    }
}

/// A record came for a repetition after every record counted for it had been read: the store's
/// records changed during the read. Figures taken so would miss it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a record was read after every record counted for its repetition had been")]
pub struct ReadAfterSealing;

/// The instants (wall clock, µs) a run was resumed at, from its event log: the executor writes
/// an event starting with `resumed:` each time it picks an interrupted run up again.
pub fn resumes_of<'a>(events: impl IntoIterator<Item = (i64, &'a str)>) -> Vec<i64> {
    let mut out: Vec<i64> = events
        .into_iter()
        .filter(|(_, message)| message.starts_with(RESUMED_EVENT_PREFIX))
        .map(|(at_ms, _)| at_ms * 1000)
        .collect();
    out.sort_unstable();
    out
}

/// How the executor's event for a resumed run begins (see `resumes_of`).
pub const RESUMED_EVENT_PREFIX: &str = "resumed:";

/// One level of a concurrency sweep, as the knee search sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub concurrency: u32,
    pub p95_ttft_ms: Option<f64>,
    pub aggregate_tok_s: Option<f64>,
}

/// Where the sweep's knee is, and which rule found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    pub concurrency: u32,
    /// `ttft` (p95 TTFT left its bound above this level), `throughput` (aggregate tok/s grew by
    /// less than the minimum gain above it), or `none` (neither happened up to the highest level).
    pub rule: String,
    pub explanation: String,
}

/// The knee of a sweep (levels in increasing concurrency): the highest concurrency whose p95
/// TTFT stays within `ttft_factor` × that at the lowest level AND before aggregate tok/s stops
/// growing by at least `min_gain` (e.g. 0.05) from one level to the next. None without levels.
pub fn find_knee(points: &[SweepPoint], ttft_factor: f64, min_gain: f64) -> Option<Knee> {
    let base = points.first()?;
    let base_ttft = base.p95_ttft_ms;
    let mut knee = base.concurrency;
    for pair in points.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        if let (Some(b), Some(t)) = (base_ttft, next.p95_ttft_ms)
            && t > b * ttft_factor
        {
            return Some(Knee {
                concurrency: knee,
                rule: "ttft".into(),
                explanation: format!(
                    "p95 TTFT at c={} is {t:.0} ms, more than {ttft_factor}× the {b:.0} ms at c={}",
                    next.concurrency, base.concurrency
                ),
            });
        }
        if let (Some(a), Some(b)) = (prev.aggregate_tok_s, next.aggregate_tok_s)
            && a > 0.0
            && b / a - 1.0 < min_gain
        {
            return Some(Knee {
                concurrency: knee,
                rule: "throughput".into(),
                explanation: {
                    let change = (b / a - 1.0) * 100.0;
                    let (from, to) = (prev.concurrency, next.concurrency);
                    if change < 0.0 {
                        format!("aggregate tok/s fell {:.1} % from c={from} to c={to}", -change)
                    } else {
                        format!(
                            "aggregate tok/s grew only {change:.1} % from c={from} to c={to} (a knee is a gain under {:.0} %)",
                            min_gain * 100.0
                        )
                    }
                },
            });
        }
        knee = next.concurrency;
    }
    Some(Knee {
        concurrency: knee,
        rule: "none".into(),
        explanation: format!("no limit reached up to c={knee}: sweep higher to find the knee"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{Phase, TokenSource};

    /// A successful streamed record: sent at `send_ms`, chunks at the given ms offsets with
    /// token counts, ending 1 ms after the last chunk.
    fn rec(send_ms: i64, chunks: &[(i64, u32)]) -> RequestRecord {
        let chunks: Vec<(i64, u32)> = chunks.iter().map(|&(t, k)| (t * 1000, k)).collect();
        let n: u32 = chunks.iter().map(|c| c.1).sum();
        let first = chunks.first().map(|c| c.0);
        let last = chunks.last().map(|c| c.0);
        RequestRecord {
            phase: Phase::Throughput,
            sent_at_us: send_ms * 1000,
            client_queue_us: 500,
            connection_reused: Some(true),
            headers_us: first.into(),
            first_chunk_us: first.into(),
            first_content_us: first.into(),
            last_token_us: last.into(),
            end_us: last.map(|l| l + 1000).into(),
            chunks: chunks.into(),
            input_tokens: Some(10),
            output_tokens: Some(n),
            output_tokens_source: Some(TokenSource::Usage),
            canonical_tokens: Some(n * 2),
            output_chars: n * 4,
            ..RequestRecord::test_quality(&format!("c{send_ms}")).with_output(&"x".repeat(n as usize * 4))
        }
    }

    #[test]
    fn per_request_calibers_by_hand() {
        // First token at 100 ms; then chunks of 1, 2 and 3 tokens at 120, 160, 220 ms; end 221.
        let r = rec(0, &[(100, 1), (120, 1), (160, 2), (220, 3)]);
        let f = RequestFigures::of(&r).unwrap();
        assert_eq!(f.ttft_ms, 100.0);
        assert_eq!(f.e2e_ms, 221.0);
        assert_eq!(f.output_tokens, 7);
        // TPOT = (221 − 100) / 6; decode = 6 / 0.120 s; e2e = 7 / 0.221 s.
        assert!((f.tpot_ms.unwrap() - 121.0 / 6.0).abs() < 1e-9);
        assert!((f.decode_tok_s.unwrap() - 50.0).abs() < 1e-9);
        assert!((f.e2e_tok_s.unwrap() - 7.0 / 0.221).abs() < 1e-9);
        assert!((f.canonical_e2e_tok_s.unwrap() - 14.0 / 0.221).abs() < 1e-9);
        assert!((f.chars_per_s.unwrap() - 28.0 / 0.221).abs() < 1e-9);
        // ITL: 20 ms ×1, 40/2 = 20 ms ×2, 60/3 = 20 ms ×3 → six samples of 20 ms.
        assert_eq!(itl_ms(&r), vec![(20.0, 1), (20.0, 2), (20.0, 3)]);
        let icl: Vec<f64> = icl_ms(&r).collect();
        assert_eq!(icl, vec![20.0, 40.0, 60.0]);
        // A first chunk of 3 tokens gives no gap: its tokens came with the first token.
        assert_eq!(itl_ms(&rec(0, &[(10, 3), (20, 1)])), vec![(10.0, 1)]);
    }

    #[test]
    fn slo_and_goodput() {
        let slo = Slo {
            ttft_ms: Some(150.0),
            e2e_ms: Some(300.0),
            ..Slo::default()
        };
        let fast = RequestFigures::of(&rec(0, &[(100, 1), (200, 1)])).unwrap();
        let slow = RequestFigures::of(&rec(0, &[(200, 1), (250, 1)])).unwrap();
        assert!(fast.meets(&slo));
        assert!(!slow.meets(&slo));
        assert!(slow.meets(&Slo::default()));
    }

    #[test]
    fn attainment_counts_failures_as_misses_with_an_interval_and_goodput_has_a_token_rate() {
        let slo = Slo {
            ttft_ms: Some(150.0),
            ..Slo::default()
        };
        let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: 1 }, None, slo, 0);
        // Sequential: three fast (met), one slow (missed), one failure (a miss too).
        acc.add(&rec(0, &[(100, 1), (110, 1)]), 0);
        acc.add(&rec(200, &[(100, 1), (110, 1)]), 0);
        acc.add(&rec(400, &[(100, 1), (110, 1)]), 0);
        acc.add(&rec(600, &[(300, 1), (310, 1)]), 0);
        let mut failed = rec(1000, &[]);
        failed.error_class = Some(ErrorClass::TotalTimeout);
        acc.add(&failed, 0);
        let f = acc.finish();
        assert_eq!((f.requests, f.slo_met), (5, 3));
        assert_eq!(f.slo_attainment, Some(0.6), "a failure is a miss, not left out");
        let i = f.slo_attainment_interval.unwrap();
        assert!(
            i.lo < 0.6 && 0.6 < i.hi && i.confidence == ATTAINMENT_CONFIDENCE,
            "{i:?}"
        );
        let (req, tok) = (f.goodput_req_per_s.unwrap(), f.goodput_tok_s.unwrap());
        assert!(
            (tok - 2.0 * req).abs() < 1e-9,
            "two tokens per good request: {req} {tok}"
        );
        let ttfa = Slo {
            ttfa_ms: Some(150.0),
            ..Slo::default()
        };
        let mut reasoning_only = rec(0, &[(100, 1)]);
        reasoning_only.first_reasoning_us = reasoning_only.first_content_us;
        reasoning_only.first_content_us = None::<i64>.into();
        assert!(
            !RequestFigures::of(&reasoning_only).unwrap().meets(&ttfa),
            "no answer token: TTFA missed"
        );
    }

    #[test]
    fn closed_loop_window_excludes_ramp_up_and_drain() {
        // c = 2. Requests (send, first token, end), 10 tokens each, one every 10 ms from the
        // first token. A: 0 → 100 … 190 (end 191); B: 0 → 150 … 240 (end 241);
        // C: 191 → 291 … 381 (end 382); D: 241 → 341 … 431 (end 432).
        let tokens = |first: i64| (0..10).map(|i| (first + i * 10, 1)).collect::<Vec<_>>();
        let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: 2 }, None, Slo::default(), 1);
        for (send, first) in [(0, 100), (0, 150), (191, 100), (241, 100)] {
            let offsets: Vec<(i64, u32)> = tokens(first);
            acc.add(&rec(send, &offsets), 0);
        }
        let f = acc.finish();
        let w = f.repetitions[0].window.unwrap();
        // Start: both of the first two have their first token (150 ms); end: the first of the
        // last two to end (C at 382 ms).
        assert_eq!((w.start_us, w.end_us, w.steady), (150_000, 382_000, true));
        // Tokens arriving in [150, 382]: A 150..190 → 5; B 150..240 → 10; C 291..381 → 10;
        // D 341..381 → 5. 30 tokens / 0.232 s (1 ms bins: exact here).
        let want = 30.0 / 0.232;
        assert!(
            (f.aggregate_tok_s.unwrap() - want).abs() < 1e-6 * want,
            "{:?}",
            f.aggregate_tok_s
        );
        assert_eq!((f.requests, f.succeeded, f.output_tokens), (4, 4, 40));
        // Completions ending in the window: A (191), B (241), and C exactly at its end (382),
        // whose 1 ms bin is counted pro rata: between 2 and 3 per 0.232 s.
        let rps = f.req_per_s.unwrap();
        assert!((2.0 / 0.232..=3.0 / 0.232).contains(&rps), "{rps}");
        assert!(f.goodput_req_per_s.is_none());
        let itl = f.itl_ms.unwrap();
        assert_eq!(itl.n, 36);
        assert!((itl.p50 - 10.0).abs() < 0.1);
    }

    #[test]
    fn too_few_requests_fall_back_to_the_full_span() {
        let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: 4 }, None, Slo::default(), 1);
        acc.add(&rec(0, &[(100, 1), (200, 1)]), 0);
        let f = acc.finish();
        let w = f.repetitions[0].window.unwrap();
        assert_eq!((w.start_us, w.end_us, w.steady), (0, 201_000, false));
        assert!((f.aggregate_tok_s.unwrap() - 2.0 / 0.201).abs() < 1e-6);
    }

    #[test]
    fn retried_failures_are_not_final_and_never_in_figures() {
        let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: 1 }, None, Slo::default(), 1);
        let mut first_try = rec(0, &[(5, 1)]);
        first_try.error_class = Some(ErrorClass::HttpServerError);
        acc.add(&first_try, 0);
        let mut retry = rec(10, &[(100, 1), (110, 1)]);
        retry.attempt = 1;
        acc.add(&retry, 0);
        let mut final_failure = rec(300, &[]);
        final_failure.error_class = Some(ErrorClass::ContextLengthExceeded);
        acc.add(&final_failure, 0);
        let f = acc.finish();
        assert_eq!((f.requests, f.succeeded, f.failed, f.retries), (2, 1, 1, 1));
        assert_eq!(f.errors.get("context_length_exceeded"), Some(&1));
        assert_eq!(f.ttft_ms.unwrap().n, 1);
    }

    #[test]
    fn repetitions_give_a_median_and_an_interval() {
        let mut acc = LevelAccumulator::new(
            Load::Rate {
                per_second: 1.0,
                poisson: false,
            },
            None,
            Slo::default(),
            0,
        );
        for (rep, gap) in [(0u32, 10i64), (1, 20), (2, 10)] {
            for i in 0..3 {
                let send = i64::from(rep) * 10_000 + i * 1000;
                let chunks: Vec<(i64, u32)> = (0..50).map(|k| (100 + k * gap, 1)).collect();
                acc.add(&rec(send, &chunks), rep);
            }
        }
        let f = acc.finish();
        assert_eq!(f.repetitions.len(), 3);
        let spread = f.aggregate_tok_s_spread.unwrap();
        assert_eq!(spread.repetitions, 3);
        let med = f.aggregate_tok_s.unwrap();
        assert!(spread.min < med && med == spread.max, "{spread:?} {med}");
        assert_eq!(f.repetitions[0].aggregate_tok_s, f.repetitions[2].aggregate_tok_s);
    }

    #[test]
    fn timeline_coarsens_but_keeps_totals() {
        let mut t = Timeline::default();
        for i in 0..200_000i64 {
            t.add(i * 1000, 1.0); // one per ms for 200 s: beyond 65,536 bins of 1 ms
        }
        t.add(-5_000_000, 1.0);
        assert!(t.bins.len() <= MAX_BINS);
        assert_eq!(t.total(), 200_001.0);
        let mid = t.sum_between(50_000_000, 150_000_000);
        assert!((mid - 100_000.0).abs() / 100_000.0 < 0.001, "{mid}");
    }

    #[test]
    fn a_window_counts_whole_milliseconds_so_bursts_at_its_edges_are_in_or_out_not_apportioned() {
        // 16 streams in lockstep: a burst of 8-token chunks every 32 ms. The window opens with
        // the last first chunk (20.6 ms into the burst's millisecond) and closes at the first
        // end, 0.3 ms into the last burst's millisecond.
        let mut t = Timeline::default();
        for burst in 0..10i64 {
            for stream in 0..16i64 {
                t.add(1_000_000 + burst * 32_000 + 500 + stream * 10, 8.0);
            }
        }
        let w = Window {
            start_us: 1_000_000 + 660,
            end_us: 1_000_000 + 9 * 32_000 + 800,
            steady: true,
        }
        .whole_bins(BIN_US);
        assert_eq!((w.start_us, w.end_us), (1_001_000, 1_288_000));
        // Bursts 1 to 8 inside, the first and the last wholly out (pro rata, each edge bin
        // would have counted about half of its burst).
        assert_eq!(t.sum_between(w.start_us, w.end_us), 8.0 * 16.0 * 8.0);
        // Timelines of a long span have wider bins: the window keeps to their edges.
        let wide = Window {
            start_us: 1_000_660,
            end_us: 1_288_800,
            steady: true,
        }
        .whole_bins(4 * BIN_US);
        assert_eq!((wide.start_us, wide.end_us), (1_004_000, 1_288_000));
        // A window shorter than a bin is kept as it is.
        let short = Window {
            start_us: 2_000_100,
            end_us: 2_000_900,
            steady: false,
        };
        assert_eq!(short.whole_bins(BIN_US), short);
    }

    #[test]
    fn knee_by_ttft_and_by_throughput() {
        let p = |c, ttft: f64, agg: f64| SweepPoint {
            concurrency: c,
            p95_ttft_ms: Some(ttft),
            aggregate_tok_s: Some(agg),
        };
        let by_ttft = find_knee(&[p(1, 100.0, 50.0), p(2, 110.0, 100.0), p(4, 400.0, 190.0)], 2.0, 0.05).unwrap();
        assert_eq!((by_ttft.concurrency, by_ttft.rule.as_str()), (2, "ttft"));
        let by_tput = find_knee(&[p(1, 100.0, 50.0), p(2, 100.0, 100.0), p(4, 120.0, 102.0)], 2.0, 0.05).unwrap();
        assert_eq!((by_tput.concurrency, by_tput.rule.as_str()), (2, "throughput"));
        let none = find_knee(&[p(1, 100.0, 50.0), p(2, 100.0, 100.0)], 2.0, 0.05).unwrap();
        assert_eq!((none.concurrency, none.rule.as_str()), (2, "none"));
        assert!(find_knee(&[], 2.0, 0.05).is_none());
    }

    #[test]
    fn a_timeline_sums_the_same_whatever_order_its_events_came_in() {
        let events: Vec<(i64, f64)> = (0..40)
            .map(|i| (1_000_000 + i * 1_370 + (i % 3) * 211, 1.0 + i as f64))
            .collect();
        let sum = |order: &[(i64, f64)]| {
            let mut t = Timeline::default();
            for &(at, amount) in order {
                t.add(at, amount);
            }
            t.sum_between(1_010_500, 1_040_300)
        };
        let forward = sum(&events);
        let mut backward = events.clone();
        backward.reverse();
        let mut shuffled = events.clone();
        shuffled.rotate_left(17);
        assert_eq!(forward, sum(&backward));
        assert_eq!(forward, sum(&shuffled));
    }

    #[test]
    fn the_first_chunks_tokens_are_not_decode_tokens() {
        // 8 tokens per chunk every 40 ms (5 ms a token), the first chunk too: 64 tokens, first
        // token at 100 ms, last at 380 ms; the server decoded at 200 tok/s.
        let chunks: Vec<(i64, u32)> = (0..8).map(|i| (100 + i * 40, 8)).collect();
        let r = rec(0, &chunks);
        assert_eq!(first_chunk_tokens(&r), 8.0);
        let f = RequestFigures::of(&r).unwrap();
        assert!((f.decode_tok_s.unwrap() - 200.0).abs() < 1e-9, "{:?}", f.decode_tok_s);
        // TPOT: (381 − 100) ms / 56 decode tokens.
        assert!((f.tpot_ms.unwrap() - 281.0 / 56.0).abs() < 1e-9);
        let itl = itl_ms(&r);
        assert_eq!(itl.iter().map(|s| s.1).sum::<u32>(), 56);
        assert!(itl.iter().all(|&(gap, _)| (gap - 5.0).abs() < 1e-9), "{itl:?}");
        // Per-chunk counts that do not sum to the total are scaled to it.
        let mut scaled = rec(0, &[(100, 1), (140, 1)]);
        scaled.output_tokens = Some(16);
        assert_eq!(first_chunk_tokens(&scaled), 8.0);
    }

    /// A non-streamed response: one chunk holding every token at the end.
    fn whole(send_ms: i64, end_ms: i64, tokens: u32) -> RequestRecord {
        let mut r = rec(send_ms, &[(end_ms - send_ms, tokens)]);
        r.end_us = r.last_token_us;
        r
    }

    #[test]
    fn non_streamed_responses_have_no_decode_figures() {
        let r = whole(0, 500, 64);
        let f = RequestFigures::of(&r).unwrap();
        assert_eq!((f.tpot_ms, f.decode_tok_s), (None, None));
        assert!(itl_ms(&r).is_empty());
        assert_eq!(f.ttft_ms, f.e2e_ms);
        let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: 1 }, None, Slo::default(), 0);
        acc.add(&r, 0);
        let l = acc.finish();
        assert!(l.tpot_ms.is_none() && l.itl_ms.is_none() && l.decode_tok_s_per_stream.is_none());
    }

    #[test]
    fn non_streamed_aggregates_match_the_servers_rate_at_any_concurrency() {
        // Each response: 100 tokens over 500 ms, delivered at its end; workers resend at once.
        for c in [1u32, 4] {
            let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: c }, None, Slo::default(), 0);
            for worker in 0..c {
                let offset = i64::from(worker) * 7; // staggered by a few ms
                for i in 0..6 {
                    let send = offset + i * 500;
                    acc.add(&whole(send, send + 500, 100), 0);
                }
            }
            let f = acc.finish();
            let truth = f64::from(c) * 100.0 / 0.5;
            let got = f.aggregate_tok_s.unwrap();
            assert!((got / truth - 1.0).abs() < 0.01, "c={c}: {got} vs {truth}");
            let whole_run = f.whole_run_tok_s.unwrap();
            assert!(whole_run <= got * 1.001, "c={c}: whole run {whole_run} vs {got}");
        }
    }

    #[test]
    fn whole_run_figure_includes_ramp_up_and_drain() {
        // c = 2, the window test's four requests: 40 tokens from 0 to 431 ms (last token).
        let tokens = |first: i64| (0..10).map(|i| (first + i * 10, 1)).collect::<Vec<_>>();
        let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: 2 }, None, Slo::default(), 1);
        for (send, first) in [(0, 100), (0, 150), (191, 100), (241, 100)] {
            acc.add(&rec(send, &tokens(first)), 0);
        }
        let f = acc.finish();
        assert!((f.whole_run_tok_s.unwrap() - 40.0 / 0.431).abs() < 1e-6);
        assert!(f.whole_run_tok_s < f.aggregate_tok_s);
    }

    #[test]
    fn a_resumed_level_leaves_the_downtime_out() {
        // c = 1, 10 tokens in 100 ms per request back to back; 4 requests, then 40 s down,
        // then 4 more. Per segment: 100 tok/s; across the downtime it would be ~2 tok/s.
        let request = |send: i64| rec(send, &(1..=10).map(|i| (i * 10, 1)).collect::<Vec<_>>());
        let sends: Vec<i64> = (0..4)
            .map(|i| i * 101)
            .chain((0..4).map(|i| 40_404 + i * 101))
            .collect();
        let resumed_at = 40_000 * 1000;
        let mut acc = LevelAccumulator::new(Load::Concurrency { concurrency: 1 }, None, Slo::default(), 0)
            .with_resumes(&[resumed_at]);
        for &s in &sends {
            acc.add(&request(s), 0);
        }
        let f = acc.finish();
        assert_eq!(f.segments, 2);
        assert!((f.downtime_s - (40.404 - 0.404)).abs() < 0.01, "{}", f.downtime_s);
        assert_eq!(f.repetitions[0].windows.len(), 2);
        let agg = f.aggregate_tok_s.unwrap();
        assert!((80.0..=105.0).contains(&agg), "{agg}");
        let whole_run = f.whole_run_tok_s.unwrap();
        assert!((80.0..=105.0).contains(&whole_run), "{whole_run}");
        // Without the resume the downtime is counted.
        let mut blind = LevelAccumulator::new(Load::Concurrency { concurrency: 1 }, None, Slo::default(), 0);
        for &s in &sends {
            blind.add(&request(s), 0);
        }
        assert!(blind.finish().whole_run_tok_s.unwrap() < 5.0);
        assert_eq!(
            resumes_of([(1, "started"), (40_000, "resumed: 8 stored records kept")]),
            vec![resumed_at]
        );
    }

    #[test]
    fn figures_at_a_concurrency_equal_the_run_figures_level() {
        let tokens = |first: i64| (0..10).map(|i| (first + i * 10, 1)).collect::<Vec<_>>();
        let mut records = Vec::new();
        for (send, first) in [(0, 100), (0, 150), (191, 100), (241, 100)] {
            let mut r = rec(send, &tokens(first));
            r.concurrency = 2;
            records.push(r);
        }
        let config = RunConfig {
            load: LoadShape::Levels { levels: vec![2] },
            ..RunConfig::default()
        };
        let run = run_figures(&records, &config, 1, |_| None);
        let at = figures_at_concurrency(&records, 2, &[]).unwrap();
        assert_eq!(run.levels[0].aggregate_tok_s, at.aggregate_tok_s);
        assert_eq!(run.levels[0].whole_run_tok_s, at.whole_run_tok_s);
        assert!(figures_at_concurrency(&records, 4, &[]).is_none());
    }
}
