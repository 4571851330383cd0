//! Shared-prefix workloads without a log: a shared system prompt of N tokens, a pool of K
//! prefixes drawn by weight, a unique suffix per request, arrivals at a rate (constant or
//! Poisson, seeded). The result is a workload like an import's, so replay sends it. With
//! `cache_bust`, every request starts with its own marker: the same lengths with nothing
//! shared, for cold-cache measurements.
use serde::{Deserialize, Serialize};

use super::{Renumber, Source, WorkloadError, WorkloadFile, WorkloadHeader, WorkloadRequest};
use crate::stats::SplitMix64;

/// One prefix of the pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolPrefix {
    pub tokens: u32,
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// The generator's form (and TOML/JSON file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefixSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub requests: u32,
    /// Mean arrivals per second.
    pub per_second: f64,
    #[serde(default)]
    pub poisson: bool,
    #[serde(default)]
    pub seed: u64,
    /// The system prompt every request starts with.
    pub system_tokens: u32,
    /// The pool (empty: no pool prefix).
    #[serde(default)]
    pub prefixes: Vec<PoolPrefix>,
    /// Each request's unique suffix length, uniform in `[suffix_min, suffix_max]`.
    pub suffix_min: u32,
    pub suffix_max: u32,
    pub output_tokens: u32,
    #[serde(default)]
    pub cache_bust: bool,
    #[serde(default = "block")]
    pub block_tokens: u32,
}

fn block() -> u32 {
    super::DEFAULT_BLOCK_TOKENS
}

/// Where a block's identity comes from: the shared system prompt, a pool prefix, or the request.
#[derive(Hash, PartialEq, Eq)]
enum Scope {
    System,
    Pool(usize),
    Request(u32),
}

impl SharedPrefixSpec {
    /// The workload; a bad field is named (`file` is what the spec came from, e.g. "form").
    pub fn generate(&self, file: &str) -> Result<WorkloadFile, WorkloadError> {
        let bad = |field: &str, m: &str| Err(WorkloadError::at(file, None, Some(field), m));
        if !(1..=super::MAX_REQUESTS as u32).contains(&self.requests) {
            return bad("requests", "must be a whole number from 1 to 2000000");
        }
        if !(self.per_second.is_finite() && self.per_second > 0.0 && self.per_second <= 100_000.0) {
            return bad("per_second", "must be a rate above 0 and at most 100000");
        }
        if self.suffix_min > self.suffix_max {
            return bad("suffix_min", "must be at most suffix_max");
        }
        if self.prefixes.iter().any(|p| !(p.weight.is_finite() && p.weight > 0.0)) {
            return bad("prefixes", "every weight must be a number above 0");
        }
        if self.prefixes.len() > 10_000 {
            return bad("prefixes", "at most 10000 prefixes");
        }
        let total_weight: f64 = self.prefixes.iter().map(|p| p.weight).sum();
        let block = self.block_tokens.max(1);
        let mut rng = SplitMix64::new(self.seed);
        let mut ids = Renumber::default();
        let mut scopes: std::collections::HashMap<(Scope, u32), u64> = std::collections::HashMap::new();
        let mut at = 0.0f64;
        let mut requests = Vec::with_capacity(self.requests as usize);
        for i in 0..self.requests {
            let k = (!self.prefixes.is_empty()).then(|| {
                let mut x = rng.next_f64() * total_weight;
                self.prefixes
                    .iter()
                    .position(|p| {
                        x -= p.weight;
                        x < 0.0
                    })
                    .unwrap_or(self.prefixes.len() - 1)
            });
            let pool = k.map_or(0, |k| self.prefixes[k].tokens);
            let span = u64::from(self.suffix_max - self.suffix_min) + 1;
            let suffix = self.suffix_min + (rng.next_u64() % span) as u32;
            let input = self.system_tokens.saturating_add(pool).saturating_add(suffix).max(1);
            // Block j is shared as far as the text up to its end is: the system prompt's,
            // the pool prefix's, else this request's own. A cache-bust marker makes all its own.
            let blocks = (0..input.div_ceil(block))
                .map(|j| {
                    let end = ((j + 1) * block).min(input);
                    let scope = match k {
                        _ if self.cache_bust => Scope::Request(i),
                        _ if end <= self.system_tokens => Scope::System,
                        Some(k) if end <= self.system_tokens + pool => Scope::Pool(k),
                        _ => Scope::Request(i),
                    };
                    let next = scopes.len() as u64;
                    ids.id(*scopes.entry((scope, end)).or_insert(next))
                })
                .collect();
            requests.push(WorkloadRequest {
                at_ms: (at * 1000.0).round() / 1000.0,
                input_tokens: input,
                output_tokens: self.output_tokens,
                blocks,
                text: None,
            });
            let gap = 1000.0 / self.per_second;
            at += if self.poisson {
                -(1.0 - rng.next_f64()).ln() * gap
            } else {
                gap
            };
        }
        let w = WorkloadFile {
            header: WorkloadHeader {
                bakeoff_workload: super::FORMAT_VERSION,
                name: self.name.clone(),
                description: self.description.clone(),
                source: Source::Generated,
                block_tokens: block,
                keeps_text: false,
            },
            requests,
        };
        w.validate(file, &|_| 0, None)
            .map_err(|e| WorkloadError { line: None, ..e })?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SharedPrefixSpec {
        SharedPrefixSpec {
            name: "pool".into(),
            description: String::new(),
            requests: 200,
            per_second: 50.0,
            poisson: true,
            seed: 7,
            system_tokens: 8,
            prefixes: vec![
                PoolPrefix { tokens: 4, weight: 3.0 },
                PoolPrefix { tokens: 8, weight: 1.0 },
            ],
            suffix_min: 1,
            suffix_max: 6,
            output_tokens: 16,
            cache_bust: false,
            block_tokens: 4,
        }
    }

    #[test]
    fn shares_the_system_prompt_and_pool_prefixes_and_nothing_when_busting() {
        let w = spec().generate("form").unwrap();
        assert_eq!(w.requests.len(), 200);
        assert_eq!(w, spec().generate("form").unwrap(), "seeded");
        // Every request starts with the system prompt's two blocks.
        assert!(w.requests.iter().all(|r| r.blocks[..2] == [0, 1]));
        let third: std::collections::HashSet<u64> = w.requests.iter().map(|r| r.blocks[2]).collect();
        // The third block is one of the two pool prefixes' first blocks (4 tokens: within either).
        assert_eq!(third.len(), 2, "{third:?}");
        assert!(w.requests.iter().all(|r| (13..=22).contains(&r.input_tokens)));
        let cold = SharedPrefixSpec {
            cache_bust: true,
            ..spec()
        }
        .generate("form")
        .unwrap();
        let firsts: std::collections::HashSet<u64> = cold.requests.iter().map(|r| r.blocks[0]).collect();
        assert_eq!(firsts.len(), 200);
        let e = SharedPrefixSpec {
            suffix_min: 9,
            ..spec()
        }
        .generate("form")
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("suffix_min"));
    }
}
