//! The truth server: a mock model whose service capacity is known, so the true capacity at an
//! SLO can be computed and a measured one checked against it (docs/mock.md, "Truth server").
//!
//! The model has `slots` generation slots and a FIFO queue in front of them (the profile's
//! `slots`, no `max_queue`), no jitter, no prefill cost and a fixed answer length (the request's
//! max_tokens, filler for a prompt not in an answer key), so every request holds its slot for
//! the same service time D = first token + (tokens − 1) × inter-token gap. A request's TTFT is
//! its wait for a slot plus the first-token time; its E2E the wait plus D.
//!
//! Under Poisson arrivals at rate λ this is an M/D/S queue. The figure a probe of the capacity
//! search measures is the attainment of `requests` arrivals sent to an empty server, and its
//! expectation is computed here by exact simulation of that queue over many seeded replications
//! (common random numbers: every rate sees the same draws, so the curve is monotone in λ and
//! the capacity found by bisection is well defined). Loopback and client time are not in the
//! model: limits should sit well away from the first-token time and D.
use crate::domain::capacity::{CapacityOutcome, CapacitySearch, Probe, SearchSettings, SearchState};
use crate::domain::run::Slo;
use crate::domain::stats::{ATTAINMENT_BATCHES, SplitMix64, batches_of};
use crate::profile::ModelProfile;

/// A model of known service capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruthServer {
    pub slots: u32,
    pub first_token_ms: f64,
    pub inter_token_ms: f64,
    /// Output tokens of every answer (send this as max_tokens, with prompts unknown to the mock).
    pub tokens: u32,
}

/// The truth server the tests and the capacity benchmark search: 8 slots of 100 ms each (at
/// most 80 req/s), judged by [`TruthServer::reference_slo`]. Its waits are tens of ms, far
/// above loopback and client time.
pub const REFERENCE: TruthServer = TruthServer {
    slots: 8,
    first_token_ms: 20.0,
    inter_token_ms: 40.0,
    tokens: 3,
};

/// Requests per probe level of the reference searches. What a probe's attainment is worth
/// depends on how many queue bursts it sees: against this server a probe of 300 requests
/// (5 s) varies by ±10 % of load at the capacity (sd), one of 4,000 (about a minute) by ±3 %,
/// which a ±5 % answer needs.
pub const REFERENCE_PROBE_REQUESTS: u32 = 4000;

/// Replications the expected attainment is averaged over.
pub const REPLICATIONS: u64 = 200;

impl TruthServer {
    /// The mock profile that behaves as this server.
    pub fn profile(&self, name: &str) -> ModelProfile {
        ModelProfile {
            ttft_ms: self.first_token_ms,
            prefill_ms_per_token: 0.0,
            inter_token_ms: Some(self.inter_token_ms),
            tokens_per_chunk: 1,
            slots: Some(self.slots),
            max_queue: None,
            jitter: 0.0,
            default_max_tokens: self.tokens,
            ..ModelProfile::named(name)
        }
    }

    /// TTFT ≤ first token + 50 ms (a wait for a slot of at most 50 ms) for 90 % of requests.
    pub fn reference_slo(&self) -> Slo {
        Slo {
            ttft_ms: Some(self.first_token_ms + 50.0),
            target_attainment: Some(0.9),
            ..Slo::default()
        }
    }

    /// How long a request holds its slot, ms.
    pub fn service_ms(&self) -> f64 {
        self.first_token_ms + f64::from(self.tokens.saturating_sub(1)) * self.inter_token_ms
    }

    /// Most requests per second the server completes (slots / D).
    pub fn max_rate(&self) -> f64 {
        f64::from(self.slots) * 1000.0 / self.service_ms()
    }

    /// The longest wait for a slot that still meets every objective of `slo` (None: no wait
    /// meets them, e.g. a TTFT limit below the first-token time).
    pub fn wait_limit_ms(&self, slo: &Slo) -> Option<f64> {
        let d = self.service_ms();
        let tpot = if self.tokens > 1 {
            Some(self.inter_token_ms)
        } else {
            None
        };
        if slo.tpot_ms.zip(tpot).is_some_and(|(limit, v)| v > limit) {
            return None;
        }
        let limits = [
            slo.ttft_ms.map(|l| l - self.first_token_ms),
            slo.ttfa_ms.map(|l| l - self.first_token_ms),
            slo.e2e_ms.map(|l| l - d),
        ];
        let limit = limits.into_iter().flatten().fold(f64::INFINITY, f64::min);
        (limit >= 0.0).then_some(limit)
    }

    /// Expected share of `requests` Poisson arrivals at `rate` per second, sent to the empty
    /// server, that wait at most `wait_limit_ms` (exact simulation, averaged over
    /// [`REPLICATIONS`] seeded replications).
    pub fn attainment(&self, rate: f64, wait_limit_ms: f64, requests: u32) -> f64 {
        self.attainment_with(rate, wait_limit_ms, &[], requests)
    }

    /// [`TruthServer::attainment`] when each request also loses a client and loopback time drawn
    /// from `overheads_ms` (as measured: TTFT less the first-token time at a light load).
    pub fn attainment_with(&self, rate: f64, wait_limit_ms: f64, overheads_ms: &[f64], requests: u32) -> f64 {
        let met: u64 = (0..REPLICATIONS)
            .map(|replication| {
                self.simulate_outcomes_with(rate, wait_limit_ms, overheads_ms, requests, replication)
                    .iter()
                    .filter(|&&m| m)
                    .count() as u64
            })
            .sum();
        met as f64 / (REPLICATIONS * u64::from(requests)) as f64
    }

    /// One probe, simulated exactly: of `requests` Poisson arrivals at `rate` per second (drawn
    /// with `seed`) sent to the empty server, how many waited at most `wait_limit_ms`.
    pub fn simulate_probe(&self, rate: f64, wait_limit_ms: f64, requests: u32, seed: u64) -> u64 {
        self.simulate_outcomes(rate, wait_limit_ms, requests, seed)
            .iter()
            .map(|&met| u64::from(met))
            .sum()
    }

    /// One probe's outcomes in arrival order (whether each request waited at most
    /// `wait_limit_ms`), simulated exactly as in [`TruthServer::simulate_probe`].
    pub fn simulate_outcomes(&self, rate: f64, wait_limit_ms: f64, requests: u32, seed: u64) -> Vec<bool> {
        self.simulate_outcomes_with(rate, wait_limit_ms, &[], requests, seed)
    }

    /// [`TruthServer::simulate_outcomes`] with each request's overhead drawn from `overheads_ms`
    /// (none when empty).
    pub fn simulate_outcomes_with(
        &self,
        rate: f64,
        wait_limit_ms: f64,
        overheads_ms: &[f64],
        requests: u32,
        seed: u64,
    ) -> Vec<bool> {
        let d = self.service_ms();
        let mut rng = SplitMix64::new(0x7207_4A11 ^ seed.wrapping_mul(0x9E37_79B9));
        let mut free = vec![0.0f64; self.slots.max(1) as usize];
        let mut now = 0.0;
        let mut outcomes = Vec::with_capacity(requests as usize);
        for _ in 0..requests {
            now += -(1.0 - rng.next_f64()).ln() / rate * 1000.0;
            // FIFO with equal service times: the next request takes the slot free first.
            let (slot, at) = free
                .iter()
                .copied()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("at least one slot");
            let start = at.max(now);
            let overhead = if overheads_ms.is_empty() {
                0.0
            } else {
                overheads_ms[rng.below(overheads_ms.len())]
            };
            outcomes.push(start - now + overhead <= wait_limit_ms);
            free[slot] = start + d;
        }
        outcomes
    }

    /// The true capacity at `slo`: the highest rate (req/s) whose expected attainment over a
    /// probe of `requests` is at least `target`. None when no wait meets the objectives.
    pub fn capacity_at_rate(&self, slo: &Slo, target: f64, requests: u32) -> Option<f64> {
        self.capacity_at_wait_limit(self.wait_limit_ms(slo)?, target, requests)
    }

    /// The true capacity when a request may wait at most `limit` ms for a slot (the SLO's limit
    /// less any time the client and loopback add, when that was measured).
    pub fn capacity_at_wait_limit(&self, limit: f64, target: f64, requests: u32) -> Option<f64> {
        self.capacity_with_overheads(limit, &[], target, requests)
    }

    /// The true capacity when each request also loses a client and loopback time drawn from
    /// `overheads_ms` (measured in the same run; see [`TruthServer::attainment_with`]).
    pub fn capacity_with_overheads(&self, limit: f64, overheads_ms: &[f64], target: f64, requests: u32) -> Option<f64> {
        let (mut lo, mut hi) = (self.max_rate() * 1e-3, self.max_rate() * 4.0);
        if self.attainment_with(lo, limit, overheads_ms, requests) < target {
            return None;
        }
        for _ in 0..40 {
            let mid = (lo + hi) / 2.0;
            if self.attainment_with(mid, limit, overheads_ms, requests) >= target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }
}

impl TruthServer {
    /// A whole capacity search whose probes are simulated exactly instead of sent: each probe's
    /// `requests` arrivals drawn with its own seed (from `seed` and the probe's place). What
    /// the search's coverage is measured with, many times over, in seconds.
    pub fn simulated_search(
        &self,
        settings: SearchSettings,
        slo: &Slo,
        requests: u32,
        seed: u64,
    ) -> (CapacitySearch, CapacityOutcome) {
        let target = slo.target_attainment.unwrap_or(1.0);
        let mut search = CapacitySearch::new(settings, target);
        loop {
            match search.state() {
                SearchState::Done(outcome) => return (search, outcome),
                SearchState::Probe { load } => {
                    let outcomes = match self.wait_limit_ms(slo) {
                        Some(limit) => {
                            self.simulate_outcomes(load, limit, requests, seed * 1000 + search.probes.len() as u64)
                        }
                        None => vec![false; requests as usize],
                    };
                    let met = outcomes.iter().filter(|&&m| m).count() as u64;
                    search.record(Probe {
                        load,
                        requests: u64::from(requests),
                        met,
                        past_saturation: false,
                        batches: batches_of(outcomes.iter().map(|&m| (1, u64::from(m))), ATTAINMENT_BATCHES),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: TruthServer = TruthServer {
        slots: 4,
        first_token_ms: 20.0,
        inter_token_ms: 40.0,
        tokens: 3,
    };

    #[test]
    fn service_time_and_limits_follow_the_profile() {
        assert_eq!(SERVER.service_ms(), 100.0);
        assert_eq!(SERVER.max_rate(), 40.0);
        let slo = Slo {
            ttft_ms: Some(70.0),
            e2e_ms: Some(200.0),
            ..Slo::default()
        };
        assert_eq!(SERVER.wait_limit_ms(&slo), Some(50.0));
        let impossible = Slo {
            ttft_ms: Some(10.0),
            ..Slo::default()
        };
        assert_eq!(SERVER.wait_limit_ms(&impossible), None);
        let p = SERVER.profile("truth");
        assert_eq!((p.slots, p.jitter, p.default_max_tokens), (Some(4), 0.0, 3));
    }

    /// The search's statistics, simulated (the HTTP search is the same state machine fed the
    /// same counts): 12 searches of the reference server at a quarter of the reference probe
    /// size, a looser bound than the benchmark's 40 at full size (docs/capacity.md).
    #[test]
    fn repeated_searches_cover_the_true_capacity() {
        let slo = REFERENCE.reference_slo();
        let requests = REFERENCE_PROBE_REQUESTS / 4;
        let truth = REFERENCE.capacity_at_rate(&slo, 0.9, requests).unwrap();
        let settings = SearchSettings {
            start: 15.0,
            ..SearchSettings::default()
        };
        let (mut covered, mut within) = (0, 0);
        for seed in 0..12 {
            let (search, outcome) = REFERENCE.simulated_search(settings, &slo, requests, seed);
            assert!(search.probes.len() <= 8);
            covered += u32::from(outcome.covers(truth));
            within += u32::from(outcome.capacity.is_some_and(|c| (c / truth - 1.0).abs() <= 0.10));
        }
        assert!(covered >= 10, "{covered} of 12 cover {truth}");
        assert!(within >= 10, "{within} of 12 within ±10 % of {truth}");
    }

    #[test]
    fn attainment_falls_with_load_and_capacity_sits_below_the_service_rate() {
        let light = SERVER.attainment(5.0, 50.0, 200);
        let heavy = SERVER.attainment(39.0, 50.0, 200);
        assert!(light > 0.99 && heavy < light, "{light} {heavy}");
        let slo = Slo {
            ttft_ms: Some(70.0),
            ..Slo::default()
        };
        let c = SERVER.capacity_at_rate(&slo, 0.9, 200).unwrap();
        assert!(c > 10.0 && c < SERVER.max_rate() * 1.2, "{c}");
        assert!(SERVER.attainment(c, 50.0, 200) >= 0.9);
        assert!(SERVER.attainment(c * 1.02, 50.0, 200) < 0.9);
    }
}
