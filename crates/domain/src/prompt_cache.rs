//! Prompt (prefix) cache figures, counted one way whatever the server's usage shape.
//!
//! **Caliber.** A request's *whole prompt* is every prompt token the server processed or read:
//! OpenAI-shaped usage reports it as `prompt_tokens`, which already includes the cached ones
//! (`prompt_tokens_details.cached_tokens`); Anthropic-shaped usage reports `input_tokens`
//! *excluding* both `cache_read_input_tokens` and `cache_creation_input_tokens`, so the whole
//! prompt is input + read + creation. The **token hit rate** is read / whole prompt — never
//! read / (input + read), which leaves the tokens written to the cache out of the denominator
//! and inflates the rate (a write turn then a read turn of the same prefix would show ~100 %
//! instead of ~50 %). [`normalise`] is the one place the shapes are turned into that caliber;
//! the wire decoders call it and store its whole prompt as the record's `input_tokens`.
use serde::{Deserialize, Serialize};

use crate::conversation::PromptCache;
use crate::histogram::LogHistogram;
use crate::metrics::Distribution;
use crate::run::RequestRecord;

/// How a server's usage counts the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageShape {
    /// `prompt_tokens` includes `cached_tokens` (OpenAI, vLLM, SGLang, llama.cpp…).
    PromptIncludesCached,
    /// `input_tokens` excludes `cache_read_input_tokens` and `cache_creation_input_tokens`
    /// (Anthropic Messages).
    InputExcludesCached,
}

/// A request's prompt in bakeoff's caliber.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NormalisedPrompt {
    /// The whole prompt (uncached + read + written); None when the server gave no count.
    pub whole: Option<u32>,
    /// The cache report; None when the usage carried no cache field at all ("not reported by
    /// the server", never 0 %).
    pub cache: Option<PromptCache>,
}

/// Normalises one usage report: `prompt` is the shape's own prompt count (`prompt_tokens` or
/// `input_tokens`), `read` and `creation` its cache fields as sent.
pub fn normalise(shape: UsageShape, prompt: Option<u32>, read: Option<u32>, creation: Option<u32>) -> NormalisedPrompt {
    let cache = (read.is_some() || creation.is_some()).then(|| PromptCache {
        read_tokens: read.unwrap_or(0),
        creation_tokens: creation,
    });
    let whole = match shape {
        UsageShape::PromptIncludesCached => prompt,
        UsageShape::InputExcludesCached => {
            let parts = [prompt, read, creation];
            parts
                .iter()
                .any(Option::is_some)
                .then(|| parts.iter().flatten().fold(0u32, |a, b| a.saturating_add(*b)))
        }
    };
    NormalisedPrompt { whole, cache }
}

/// One request's cache figures, from a stored record (whose `input_tokens` is the whole prompt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCache {
    pub whole: u32,
    pub read: u32,
    /// Written to the cache by this request (Anthropic shape only).
    pub creation: Option<u32>,
    /// Prefilled and not written: whole − read − creation.
    pub uncached: u32,
}

impl RequestCache {
    /// None when the server reported no cache field or no prompt count.
    pub fn of(r: &RequestRecord) -> Option<RequestCache> {
        let cache = r.prompt_cache?;
        let whole = r.input_tokens?;
        let creation = cache.creation_tokens;
        Some(RequestCache {
            whole,
            read: cache.read_tokens,
            creation,
            uncached: whole
                .saturating_sub(cache.read_tokens)
                .saturating_sub(creation.unwrap_or(0)),
        })
    }

    /// Warm: some of the prompt was read from the cache.
    pub fn warm(&self) -> bool {
        self.read > 0
    }
}

/// Per-level prompt-cache figures (successful requests, warm-ups excluded).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheFigures {
    /// Successful requests of the level.
    pub requests: u64,
    /// Of those, how many carried cache fields in their usage; 0: "not reported by the server".
    pub reported: u64,
    /// Σ whole prompt, read, written over the reporting requests.
    pub prompt_tokens: u64,
    pub read_tokens: u64,
    pub creation_tokens: u64,
    /// Reporting requests with any token read from the cache.
    pub requests_with_hit: u64,
    /// TTFT of reporting requests with no cached token (cold) and with some (warm), ms.
    pub ttft_cold_ms: Option<Distribution>,
    pub ttft_warm_ms: Option<Distribution>,
}

/// How the figures are counted, in words (the run page's and the scorecard's caliber).
pub const COUNTING_RULE: &str = "token hit rate = Σ cached (read) prompt tokens / Σ whole prompt tokens, the whole prompt being OpenAI's prompt_tokens (cached included) or Anthropic's input_tokens + cache_read_input_tokens + cache_creation_input_tokens; requests with a hit = share of requests with any cached token; cold = no cached token, warm = some; requests whose usage has no cache field are not counted (\"not reported by the server\", never 0 %)";

impl CacheFigures {
    /// Σ read / Σ whole prompt; None when nothing was reported.
    pub fn token_hit_rate(&self) -> Option<f64> {
        (self.reported > 0 && self.prompt_tokens > 0).then(|| self.read_tokens as f64 / self.prompt_tokens as f64)
    }

    /// Share of reporting requests with any cached token.
    pub fn hit_request_share(&self) -> Option<f64> {
        (self.reported > 0).then(|| self.requests_with_hit as f64 / self.reported as f64)
    }
}

/// Streams a level's records in, [`CacheFigures`] out.
#[derive(Debug, Default)]
pub struct CacheAccumulator {
    figures: CacheFigures,
    cold: LogHistogram,
    warm: LogHistogram,
}

impl CacheAccumulator {
    /// Adds one successful request with its TTFT (ms, when it has one).
    pub fn add(&mut self, r: &RequestRecord, ttft_ms: Option<f64>) {
        let f = &mut self.figures;
        f.requests += 1;
        let Some(c) = RequestCache::of(r) else { return };
        f.reported += 1;
        f.prompt_tokens += u64::from(c.whole);
        f.read_tokens += u64::from(c.read);
        f.creation_tokens += u64::from(c.creation.unwrap_or(0));
        if c.warm() {
            f.requests_with_hit += 1;
        }
        if let Some(t) = ttft_ms {
            let h = if c.warm() { &mut self.warm } else { &mut self.cold };
            h.record(t);
        }
    }

    pub fn finish(self) -> CacheFigures {
        CacheFigures {
            ttft_cold_ms: Distribution::from_histogram(&self.cold),
            ttft_warm_ms: Distribution::from_histogram(&self.warm),
            ..self.figures
        }
    }
}

/// A rate in words for a page: "49.9 %", or "not reported by the server".
pub fn rate_text(v: Option<f64>) -> String {
    v.map_or_else(
        || NOT_REPORTED.to_string(),
        |v| format!("{} %", crate::format::significant(v * 100.0)),
    )
}

pub const NOT_REPORTED: &str = "not reported by the server";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shapes_normalise_to_one_whole_prompt() {
        // OpenAI: prompt_tokens already includes the cached ones.
        let o = normalise(UsageShape::PromptIncludesCached, Some(1000), Some(600), None);
        assert_eq!(o.whole, Some(1000));
        assert_eq!(o.cache.unwrap().read_tokens, 600);
        // Anthropic: input_tokens excludes read and written.
        let a = normalise(UsageShape::InputExcludesCached, Some(10), Some(600), Some(390));
        assert_eq!(a.whole, Some(1000));
        assert_eq!(a.cache.unwrap().creation_tokens, Some(390));
        // No cache field: no cache report (not 0 %).
        assert_eq!(
            normalise(UsageShape::PromptIncludesCached, Some(5), None, None).cache,
            None
        );
    }

    fn record(whole: u32, read: u32, creation: Option<u32>) -> RequestRecord {
        let n = normalise(UsageShape::PromptIncludesCached, Some(whole), Some(read), creation);
        RequestRecord {
            input_tokens: n.whole,
            prompt_cache: n.cache,
            ..RequestRecord::test_quality("c")
        }
    }

    #[test]
    fn the_anthropic_trap_gives_the_true_rate_not_the_inflated_one() {
        // Turn 1 writes a 1000-token prefix (+10 uncached); turn 2 reads it (+10 uncached).
        let write = normalise(UsageShape::InputExcludesCached, Some(10), Some(0), Some(1000));
        let read = normalise(UsageShape::InputExcludesCached, Some(10), Some(1000), Some(0));
        let mut acc = CacheAccumulator::default();
        for n in [write, read] {
            let r = RequestRecord {
                input_tokens: n.whole,
                prompt_cache: n.cache,
                ..RequestRecord::test_quality("c")
            };
            acc.add(&r, Some(1.0));
        }
        let f = acc.finish();
        let rate = f.token_hit_rate().unwrap();
        assert!((rate - 1000.0 / 2020.0).abs() < 1e-12, "{rate}");
        // Leaving creation out of the denominator would have given 1000 / 1020.
        assert!(rate < 0.5);
        assert_eq!((f.requests_with_hit, f.reported), (1, 2));
        assert_eq!(f.ttft_cold_ms.unwrap().n, 1);
        assert_eq!(f.ttft_warm_ms.unwrap().n, 1);
    }

    #[test]
    fn unreported_requests_are_not_zero_percent() {
        let mut acc = CacheAccumulator::default();
        acc.add(&RequestRecord::test_quality("c"), Some(3.0));
        let f = acc.finish();
        assert_eq!((f.requests, f.reported), (1, 0));
        assert_eq!(f.token_hit_rate(), None);
        assert_eq!(rate_text(f.token_hit_rate()), NOT_REPORTED);
        let mut acc = CacheAccumulator::default();
        acc.add(&record(100, 0, None), None);
        assert_eq!(acc.finish().token_hit_rate(), Some(0.0));
    }
}
