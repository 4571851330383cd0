//! The mock's prefix cache (a profile's `prefix_cache`), with known behaviour so every cache
//! figure bakeoff reports has ground truth:
//! - A chat prompt is the token stream of its messages in order, each message its 4 framing
//!   tokens (its role) and its content's tokens (the reply's priming is not part of it). The
//!   stream is cut into blocks of `prefix_cache_block_tokens`; a block is identified by a hash
//!   of everything up to its end, so a block matches only when the whole prefix before it does.
//! - A request **reads** the longest run of leading blocks seen within `prefix_cache_ttl_ms`
//!   (a read refreshes them), and **writes** every later whole block: read + written = the
//!   prompt's whole blocks; the tail shorter than a block is neither. A request never hits on
//!   itself. At most `prefix_cache_entries` blocks are remembered, oldest forgotten first.
//! - TTFT is `ttft_ms + prefill_ms_per_token × (prompt − read)`: only uncached tokens cost.
//! - Usage reports it in the shape of the endpoint: OpenAI `prompt_tokens` (whole prompt) with
//!   `prompt_tokens_details.cached_tokens` = read; Anthropic `input_tokens` = whole − read −
//!   written, `cache_read_input_tokens` = read, `cache_creation_input_tokens` = written. The
//!   request log keeps read and written for every request (`cached_prompt_tokens`,
//!   `cache_creation_tokens`), and `/metrics` counts them as vLLM does
//!   (`vllm:prefix_cache_queries_total` = prompt tokens, `…_hits_total` = read tokens).
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::rng::stable_hash;
use crate::tokens::{CHAT_TOKENS_PER_MESSAGE, token_spans};

/// What one request did with the cache, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CacheUse {
    pub read: u32,
    pub written: u32,
}

/// Block hashes remembered with when they were last used.
pub(crate) struct PrefixCache {
    block_tokens: u32,
    ttl: Option<Duration>,
    capacity: usize,
    inner: Mutex<Blocks>,
}

#[derive(Default)]
struct Blocks {
    last_used: HashMap<u64, Instant>,
    /// (block, when it was used) in use order; a stale entry (used again since) is skipped.
    order: VecDeque<(u64, Instant)>,
}

impl PrefixCache {
    pub fn new(block_tokens: u32, ttl: Option<Duration>, capacity: usize) -> Self {
        PrefixCache {
            block_tokens: block_tokens.max(1),
            ttl,
            capacity: capacity.max(1),
            inner: Mutex::new(Blocks::default()),
        }
    }

    /// The hash of every whole block of the prompt of `messages` (role, content).
    fn block_hashes(&self, messages: &[(String, String)]) -> Vec<u64> {
        let mut hashes = Vec::new();
        let (mut running, mut n) = (0u64, 0u32);
        let mut push = |token: &[&[u8]], running: &mut u64| {
            let mut parts: Vec<&[u8]> = Vec::with_capacity(token.len() + 1);
            let prev = running.to_le_bytes();
            parts.push(&prev);
            parts.extend_from_slice(token);
            *running = stable_hash(&parts);
            n += 1;
            if n.is_multiple_of(self.block_tokens) {
                hashes.push(*running);
            }
        };
        for (role, content) in messages {
            for i in 0..CHAT_TOKENS_PER_MESSAGE {
                push(&[b"\x01frame", role.as_bytes(), &i.to_le_bytes()], &mut running);
            }
            for span in token_spans(content) {
                push(&[content[span].as_bytes()], &mut running);
            }
        }
        hashes
    }

    /// Reads the leading blocks of `messages` seen within the TTL, then writes (or refreshes)
    /// every whole block of them, at `now`.
    pub fn admit(&self, messages: &[(String, String)], now: Instant) -> CacheUse {
        let hashes = self.block_hashes(messages);
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let b = &mut *guard;
        let live = |at: &Instant| self.ttl.is_none_or(|ttl| now.saturating_duration_since(*at) <= ttl);
        let hit = hashes
            .iter()
            .take_while(|h| b.last_used.get(h).is_some_and(live))
            .count();
        for &h in &hashes {
            b.last_used.insert(h, now);
            b.order.push_back((h, now));
        }
        // Forget the least recently used blocks beyond capacity (stale order entries dropped).
        while b.last_used.len() > self.capacity || b.order.len() > 4 * self.capacity {
            let Some((h, at)) = b.order.pop_front() else { break };
            if b.last_used.get(&h) == Some(&at) {
                b.last_used.remove(&h);
            }
        }
        CacheUse {
            read: hit as u32 * self.block_tokens,
            written: (hashes.len() - hit) as u32 * self.block_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::count_tokens;

    fn m(role: &str, content: &str) -> (String, String) {
        (role.into(), content.into())
    }

    fn prompt(messages: &[(String, String)]) -> u32 {
        messages
            .iter()
            .map(|(_, c)| count_tokens(c) + CHAT_TOKENS_PER_MESSAGE)
            .sum()
    }

    #[test]
    fn whole_blocks_of_a_seen_prefix_hit_within_the_ttl() {
        let cache = PrefixCache::new(4, Some(Duration::from_secs(10)), 1000);
        let system = m("system", "one two three four five six seven eight nine ten eleven");
        let turn1 = vec![system.clone(), m("user", "hello there")];
        let whole = prompt(&turn1) / 4 * 4;
        let t0 = Instant::now();
        assert_eq!(
            cache.admit(&turn1, t0),
            CacheUse {
                read: 0,
                written: whole
            }
        );
        let turn2 = vec![system.clone(), m("user", "something else entirely")];
        // The system message and the next message's framing (both are `user`).
        let shared = (prompt(std::slice::from_ref(&system)) + CHAT_TOKENS_PER_MESSAGE) / 4 * 4;
        let u = cache.admit(&turn2, t0 + Duration::from_secs(5));
        assert_eq!(u.read, shared, "the system prompt's whole blocks");
        assert_eq!(u.read + u.written, prompt(&turn2) / 4 * 4);
        // Past the TTL (from the last use, 5 s): cold again.
        let u = cache.admit(&turn1, t0 + Duration::from_secs(16));
        assert_eq!(u.read, 0);
        // A different first message shares only its role's framing (one whole block here), as a
        // real chat template's header is shared.
        assert_eq!(
            cache.admit(&[m("system", "other")], t0 + Duration::from_secs(16)).read,
            4
        );
        assert_eq!(cache.admit(&[m("user", "other")], t0 + Duration::from_secs(16)).read, 0);
    }

    #[test]
    fn the_oldest_blocks_are_forgotten_beyond_capacity() {
        let cache = PrefixCache::new(1, None, 8);
        let now = Instant::now();
        let a = vec![m("user", "a")];
        assert_eq!(cache.admit(&a, now).written, 5);
        assert_eq!(cache.admit(&a, now).read, 5);
        cache.admit(&[m("user", "b c d e")], now);
        assert_eq!(cache.admit(&a, now).read, 0, "a's blocks were pushed out");
    }
}
