//! What a serving engine would report about itself, kept as the mock's ground truth and shown by
//! `/metrics` in vLLM's and llama.cpp's naming (and by `/mock/gpu/metrics` in the DCGM
//! exporter's): a KV cache of `kv_cache_tokens` (every admitted request holds its prompt and
//! the tokens it has sent), preemptions (a request whose next tokens would overflow the cache
//! gives its blocks back, as vLLM's recompute preemption does, and counts one), prefix-cache
//! lookups and hits in prompt tokens (a hit: this profile was sent the same text before), the
//! server-side TTFT histogram (receipt → first token handed to the connection), and a simulated
//! GPU whose utilisation is the share of slots busy and whose power follows it linearly.
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// vLLM's bucket bounds for `vllm:time_to_first_token_seconds`.
pub(crate) const TTFT_BUCKETS_S: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];

/// One profile's simulated engine state.
#[derive(Default)]
pub(crate) struct Simulated {
    /// KV-cache tokens held by requests in flight.
    pub kv_tokens: AtomicU64,
    pub preemptions: AtomicU64,
    pub prefix_queries: AtomicU64,
    pub prefix_hits: AtomicU64,
    /// TTFT histogram: non-cumulative counts per bucket (the last is +Inf), and the sum in µs.
    ttft: Mutex<([u64; TTFT_BUCKETS_S.len() + 1], u64)>,
}

impl Simulated {
    /// A request was admitted with `prompt_tokens`, its text seen `seen_before` times already.
    pub fn admitted(&self, prompt_tokens: u32, seen_before: bool) {
        let n = u64::from(prompt_tokens);
        self.prefix_queries.fetch_add(n, Ordering::Relaxed);
        if seen_before {
            self.prefix_hits.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A request was admitted with `prompt_tokens`, `read` of them from the prefix cache.
    pub fn admitted_cached(&self, prompt_tokens: u32, read: u32) {
        self.prefix_queries
            .fetch_add(u64::from(prompt_tokens), Ordering::Relaxed);
        self.prefix_hits.fetch_add(u64::from(read), Ordering::Relaxed);
    }

    /// A request holding `held` KV tokens adds `n`; returns what it holds after (0 when it was
    /// preempted: it overflowed a cache of `capacity` and gave its blocks back).
    pub fn grow(&self, held: u64, n: u64, capacity: Option<u32>) -> u64 {
        let total = self.kv_tokens.fetch_add(n, Ordering::Relaxed) + n;
        match capacity {
            Some(c) if total > u64::from(c) => {
                self.kv_tokens.fetch_sub(held + n, Ordering::Relaxed);
                self.preemptions.fetch_add(1, Ordering::Relaxed);
                0
            }
            _ => held + n,
        }
    }

    /// A request ended, giving back the `held` tokens.
    pub fn release(&self, held: u64) {
        self.kv_tokens.fetch_sub(held, Ordering::Relaxed);
    }

    pub fn first_token(&self, ms_since_received: f64) {
        let s = ms_since_received / 1000.0;
        let i = TTFT_BUCKETS_S
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(TTFT_BUCKETS_S.len());
        let mut h = self.ttft.lock().unwrap_or_else(|p| p.into_inner());
        h.0[i] += 1;
        h.1 += (ms_since_received * 1000.0).round() as u64;
    }

    /// Cumulative TTFT buckets (the last is +Inf) and the sum, seconds.
    pub fn ttft_cumulative(&self) -> (Vec<u64>, f64) {
        let h = self.ttft.lock().unwrap_or_else(|p| p.into_inner());
        let mut running = 0;
        let cumulative =
            h.0.iter()
                .map(|c| {
                    running += c;
                    running
                })
                .collect();
        (cumulative, h.1 as f64 / 1e6)
    }
}

/// The simulated GPU's utilisation (0–1) with `in_flight` requests: the share of `slots` busy,
/// or busy/idle without a slot limit.
pub(crate) fn gpu_utilisation(in_flight: u64, slots: Option<u32>) -> f64 {
    match slots {
        Some(s) if s > 0 => (in_flight as f64 / f64::from(s)).min(1.0),
        _ => {
            if in_flight > 0 {
                1.0
            } else {
                0.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflowing_the_cache_preempts_and_frees_the_request() {
        let s = Simulated::default();
        let a = s.grow(0, 60, Some(100));
        let b = s.grow(0, 30, Some(100));
        assert_eq!((a, b, s.kv_tokens.load(Ordering::Relaxed)), (60, 30, 90));
        // b's next 20 overflow: b gives back its 30 and the 20, counted once.
        assert_eq!(s.grow(b, 20, Some(100)), 0);
        assert_eq!(s.kv_tokens.load(Ordering::Relaxed), 60);
        assert_eq!(s.preemptions.load(Ordering::Relaxed), 1);
        s.release(a);
        assert_eq!(s.kv_tokens.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn ttft_buckets_are_cumulative() {
        let s = Simulated::default();
        s.first_token(3.0);
        s.first_token(90.0);
        s.first_token(1_000_000.0);
        let (c, sum) = s.ttft_cumulative();
        assert_eq!(c[1], 1); // ≤ 5 ms
        assert_eq!(c[6], 1); // ≤ 80 ms
        assert_eq!(c[7], 2); // ≤ 100 ms: 90 ms is in (0.08, 0.1]
        assert_eq!(*c.last().unwrap(), 3);
        assert!((sum - 1000.093).abs() < 1e-9);
        assert_eq!(gpu_utilisation(3, Some(4)), 0.75);
        assert_eq!(gpu_utilisation(9, Some(4)), 1.0);
        assert_eq!(gpu_utilisation(0, None), 0.0);
    }
}
