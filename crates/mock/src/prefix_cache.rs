//! The mock's prefix cache (a profile's `prefix_cache`): it remembers the leading messages of
//! the chat requests it admitted recently, so a request that starts with messages it has seen —
//! a conversation's next turn carries the previous turn's whole prompt — is prefilled only for
//! the rest. Exactly as many tokens as the cached messages count (content plus the per-message
//! framing) are reported as `usage.prompt_tokens_details.cached_tokens` and logged in the
//! ground truth, and the time to first token is `ttft_ms + prefill_ms_per_token × (prompt −
//! cached)`, so the cache's effect on TTFT is known exactly.
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use crate::rng::stable_hash;
use crate::tokens::{CHAT_TOKENS_PER_MESSAGE, count_tokens};

/// Message prefixes remembered, oldest forgotten first.
pub(crate) struct PrefixCache {
    capacity: usize,
    inner: Mutex<(HashSet<u64>, VecDeque<u64>)>,
}

impl PrefixCache {
    pub fn new(capacity: usize) -> Self {
        PrefixCache {
            capacity: capacity.max(1),
            inner: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }

    /// The tokens of the longest leading run of `messages` (role, content) seen before, then
    /// remembers every leading run of this request. A request never hits on itself.
    pub fn admit(&self, messages: &[(String, String)]) -> u32 {
        let mut hashes = Vec::with_capacity(messages.len());
        let mut running = 0u64;
        for (role, content) in messages {
            running = stable_hash(&[&running.to_le_bytes(), role.as_bytes(), b"\0", content.as_bytes()]);
            hashes.push(running);
        }
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (set, order) = &mut *guard;
        let hit = hashes.iter().rposition(|h| set.contains(h)).map_or(0, |i| i + 1);
        for h in hashes {
            if set.insert(h) {
                order.push_back(h);
                if order.len() > self.capacity
                    && let Some(old) = order.pop_front()
                {
                    set.remove(&old);
                }
            }
        }
        messages[..hit]
            .iter()
            .map(|(_, c)| count_tokens(c) + CHAT_TOKENS_PER_MESSAGE)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, content: &str) -> (String, String) {
        (role.into(), content.into())
    }

    #[test]
    fn a_next_turn_hits_on_the_previous_prompt_and_the_oldest_is_forgotten() {
        let cache = PrefixCache::new(4);
        let turn1 = vec![m("system", "Be brief."), m("user", "hello there")];
        assert_eq!(cache.admit(&turn1), 0);
        let mut turn2 = turn1.clone();
        turn2.extend([m("assistant", "hi"), m("user", "and now")]);
        // The system and first user message, each with its framing.
        assert_eq!(
            cache.admit(&turn2),
            count_tokens("Be brief.") + count_tokens("hello there") + 2 * CHAT_TOKENS_PER_MESSAGE
        );
        // A different first message shares nothing.
        assert_eq!(cache.admit(&[m("system", "Be long."), m("user", "hello there")]), 0);
        // Capacity 4: turn 1's entries are gone by now.
        assert_eq!(cache.admit(&[m("x", "1"), m("y", "2"), m("z", "3")]), 0);
        assert_eq!(cache.admit(&turn1), 0);
    }
}
