//! How the endpoint answers requests: usage in streams, max_tokens honoured, an invalid
//! parameter refused quickly, an over-long prompt refused as too long.
use serde_json::Value;

use super::prober::{Fetched, Prober, ms, redact, result};
use super::prober::{with_field, with_prompt};
use crate::domain::operability::{Evidence, ProbeKind, ProbeOutcome, ProbeResult};
use crate::tokens::tokenizer;
use crate::wire::failure::{error_message, is_context_length_error};

/// The word an over-long prompt repeats: one token in every common tokenizer and in the mock's.
const FILL_WORD: &str = " the";
/// Context windows above this are not probed with an over-long prompt (the body would be huge).
const MAX_PROBED_CONTEXT: u32 = 1_000_000;

impl Prober<'_> {
    pub(super) async fn usage_in_stream(&mut self) -> (ProbeResult, Fetched) {
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

    pub(super) async fn max_tokens(&mut self) -> (ProbeResult, Fetched) {
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

    pub(super) async fn invalid_param(&mut self) -> ProbeResult {
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

    pub(super) async fn overlong_prompt(&mut self, server_context: Option<u32>) -> ProbeResult {
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

    pub(super) fn unbuildable(&self, kind: ProbeKind, why: String) -> ProbeResult {
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
