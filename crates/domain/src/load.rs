//! A run's load: the shape stored with the run ([`LoadShape`], beside `RunConfig.concurrency`),
//! the levels it expands to ([`Load`]: the one form the engine executes and figures are keyed
//! by), and the limits a load puts on the client — connection pool, requests in flight —
//! derived here and nowhere else.
use serde::{Deserialize, Serialize};

use crate::capacity::{LoadAxis, SearchSettings};

/// The highest concurrency the run form accepts; a soak is held to it too.
pub const MAX_CONCURRENCY: u32 = 1024;
/// Open loop: idle connections the candidate's client keeps. Connections beyond it are opened
/// as needed and closed after use.
pub const OPEN_LOOP_POOL: u32 = 1024;
/// Open loop: most requests in flight at once. Past it, sends wait (and the wait shows as
/// schedule lag): a runaway server cannot make bakeoff open unbounded connections.
pub const OPEN_LOOP_MAX_IN_FLIGHT: usize = 4096;
/// Warm-ups before an open loop run closed loop at the run's concurrency, at most this.
pub const OPEN_LOOP_WARMUP_MAX_CONCURRENCY: u32 = 4;
/// Most llm-judge calls in flight at once (fewer when the run's concurrency is lower).
pub const MAX_JUDGE_CALLS_IN_FLIGHT: u32 = 8;

/// How requests are offered to the server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum LoadShape {
    /// Closed loop at the run's `concurrency`.
    #[default]
    Fixed,
    /// Closed loop at each of these concurrencies in turn.
    Levels { levels: Vec<u32> },
    /// Open loop: requests are sent on schedule whatever the server does (Poisson: exponential
    /// gaps with that mean rate, seeded), so server queueing shows in latency.
    Rate { per_second: f64, poisson: bool },
    /// Closed loop at 1, 2, 4 … `max_concurrency`; reports the knee: the highest concurrency
    /// whose p95 TTFT stays within `ttft_factor` × that at c=1 and before aggregate tok/s
    /// grows by less than `min_gain` (0.05 = 5 %) from one level to the next.
    Sweep {
        max_concurrency: u32,
        ttft_factor: f64,
        min_gain: f64,
    },
    /// Find the capacity at the run's SLO (docs/capacity.md): for each candidate its own
    /// search over `axis` from `start` (request rate: open loop, Poisson; concurrency: closed
    /// loop), until the bracket is within `width` (0.05: 5 %) or `max_probes` levels are spent.
    /// Each probe is a level of the run (`capacity::level_of`).
    FindCapacity {
        axis: LoadAxis,
        start: f64,
        width: f64,
        max_probes: u32,
        /// Highest load a probe may use; None: the grid's (`capacity::GRID_MAX_RATE`) or `MAX_CONCURRENCY`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_load: Option<f64>,
    },
    /// Our traffic (docs/workloads.md, "Replay as a run level"): level 0 sends the eval set's
    /// cases closed loop at the run's `concurrency` (the quality pass, graded, and a speed level
    /// of its own); level 1 replays workload version `workload_version` — every request once,
    /// due at its recorded arrival ÷ `speed` from the level's start, synthetic text of the
    /// recorded o200k length whose prefix blocks repeat where the workload's do, `max_tokens`
    /// the recorded output — identical for every candidate. Rules without `@c=N` judge the
    /// replay level.
    Replay { workload_version: i64, speed: f64 },
}

/// How load was applied: it decides the measured window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Load {
    /// Closed loop: `concurrency` requests in flight, each replaced when it ends.
    Concurrency { concurrency: u32 },
    /// Open loop: requests sent on a schedule at `per_second`, regardless of completions.
    Rate { per_second: f64, poisson: bool },
    /// Open loop: a workload's requests sent at their recorded arrivals ÷ `speed`
    /// (`LoadShape::Replay`). Its records carry concurrency 0, like a rate's.
    Replay { speed: f64 },
}

impl LoadShape {
    /// The levels in the order they run; `concurrency` is the run's (the fixed shape's level).
    pub fn loads(&self, concurrency: u32) -> Vec<Load> {
        let closed = |c: u32| Load::Concurrency { concurrency: c.max(1) };
        match self {
            LoadShape::Fixed => vec![closed(concurrency)],
            LoadShape::Levels { levels } if levels.is_empty() => vec![closed(concurrency)],
            LoadShape::Levels { levels } => levels.iter().map(|&c| closed(c)).collect(),
            LoadShape::Rate { per_second, poisson } => vec![Load::Rate {
                per_second: *per_second,
                poisson: *poisson,
            }],
            LoadShape::Sweep { max_concurrency, .. } => {
                let max = (*max_concurrency).max(1);
                let mut levels: Vec<u32> = std::iter::successors(Some(1u32), |c| c.checked_mul(2))
                    .take_while(|&c| c < max)
                    .collect();
                levels.push(max);
                levels.into_iter().map(closed).collect()
            }
            // The levels are found as it goes: the first probe's.
            LoadShape::FindCapacity { axis, start, .. } => vec![probe_load(*axis, *start)],
            LoadShape::Replay { speed, .. } => vec![closed(concurrency), Load::Replay { speed: *speed }],
        }
    }

    /// The load of level `level` of a run of this shape: its place in `loads`, or on a capacity
    /// search's grid.
    pub fn level_load(&self, concurrency: u32, level: u32) -> Option<Load> {
        match self {
            LoadShape::FindCapacity { axis, .. } => {
                Some(probe_load(*axis, crate::capacity::load_of_level(*axis, level)))
            }
            _ => self.loads(concurrency).get(level as usize).copied(),
        }
    }

    /// A find-capacity run's search settings (None for other shapes).
    pub fn search_settings(&self) -> Option<SearchSettings> {
        let LoadShape::FindCapacity {
            axis,
            start,
            width,
            max_probes,
            max_load,
        } = *self
        else {
            return None;
        };
        let defaults = SearchSettings::default();
        let (min_load, top) = match axis {
            LoadAxis::Rate => (crate::capacity::GRID_MIN_RATE, crate::capacity::GRID_MAX_RATE),
            LoadAxis::Concurrency => (1.0, f64::from(MAX_CONCURRENCY)),
        };
        Some(SearchSettings {
            axis,
            start,
            min_load,
            max_load: max_load.unwrap_or(top).min(top),
            width,
            max_probes,
            ..defaults
        })
    }

    pub fn is_open_loop(&self) -> bool {
        matches!(
            self,
            LoadShape::Rate { .. }
                | LoadShape::Replay { .. }
                | LoadShape::FindCapacity {
                    axis: LoadAxis::Rate,
                    ..
                }
        )
    }

    /// Idle connections a run's client keeps: as many as its most demanding level needs (a
    /// capacity search: the most it may probe).
    pub fn pool_size(&self, concurrency: u32) -> u32 {
        if let Some(s) = self.search_settings() {
            return probe_load(s.axis, s.max_load).pool_size();
        }
        self.loads(concurrency).iter().map(Load::pool_size).max().unwrap_or(1)
    }

    /// The concurrency of a run's warm-ups: its first level's; before an open loop, the run's
    /// concurrency, at most `OPEN_LOOP_WARMUP_MAX_CONCURRENCY`.
    pub fn warmup_concurrency(&self, concurrency: u32) -> u32 {
        match self.loads(concurrency)[0] {
            Load::Concurrency { concurrency } => concurrency,
            Load::Rate { .. } | Load::Replay { .. } => concurrency.clamp(1, OPEN_LOOP_WARMUP_MAX_CONCURRENCY),
        }
    }

    /// The workload version a replay run replays and its speed-up (None for other shapes).
    pub fn replay(&self) -> Option<(i64, f64)> {
        match *self {
            LoadShape::Replay {
                workload_version,
                speed,
            } => Some((workload_version, speed)),
            _ => None,
        }
    }

    /// The concurrency recorded with the requests a rule without `@c=N` judges: the run's,
    /// or a replay run's replay level (open loop, recorded as 0).
    pub fn judged_concurrency(&self, concurrency: u32) -> u32 {
        match self {
            LoadShape::Replay { .. } => 0,
            _ => concurrency,
        }
    }
}

impl Load {
    /// The closed loop a soak holds: at `concurrency`, within 1..=`MAX_CONCURRENCY`.
    pub fn soak(concurrency: u32) -> Load {
        Load::Concurrency {
            concurrency: concurrency.clamp(1, MAX_CONCURRENCY),
        }
    }

    /// The amount of load offered: a closed loop's concurrency, an open loop's rate.
    pub fn amount(&self) -> f64 {
        match self {
            Load::Concurrency { concurrency } => f64::from(*concurrency),
            Load::Rate { per_second, .. } => *per_second,
            Load::Replay { speed } => *speed,
        }
    }

    /// Most requests in flight at once: a closed loop's concurrency; an open loop's cap.
    pub fn max_in_flight(&self) -> usize {
        match self {
            Load::Concurrency { concurrency } => (*concurrency).max(1) as usize,
            Load::Rate { .. } | Load::Replay { .. } => OPEN_LOOP_MAX_IN_FLIGHT,
        }
    }

    /// Idle connections the client keeps for it: one per request in flight for a closed loop
    /// (HTTP/1.1: a connection per request), `OPEN_LOOP_POOL` for an open loop.
    pub fn pool_size(&self) -> u32 {
        match self {
            Load::Concurrency { concurrency } => (*concurrency).max(1),
            Load::Rate { .. } | Load::Replay { .. } => OPEN_LOOP_POOL,
        }
    }

    /// `c=8`, `5 req/s`, `5 req/s Poisson`: how figures are labelled.
    pub fn label(&self) -> String {
        match self {
            Load::Concurrency { concurrency } => format!("c={concurrency}"),
            Load::Rate { per_second, poisson } => {
                format!("{per_second} req/s{}", if *poisson { " Poisson" } else { "" })
            }
            Load::Replay { speed } => format!("replay {}×", crate::format::shortest(*speed)),
        }
    }
}

/// A capacity probe at `load` on `axis`: Poisson arrivals at a rate, a closed loop at a
/// concurrency.
pub fn probe_load(axis: LoadAxis, load: f64) -> Load {
    match axis {
        LoadAxis::Rate => Load::Rate {
            per_second: load,
            poisson: true,
        },
        LoadAxis::Concurrency => Load::Concurrency {
            concurrency: (load.round() as u32).clamp(1, MAX_CONCURRENCY),
        },
    }
}

/// llm-judge calls in flight at once for a run at `concurrency`: as many, within
/// 1..=`MAX_JUDGE_CALLS_IN_FLIGHT`.
pub fn judge_calls_in_flight(concurrency: u32) -> u32 {
    concurrency.clamp(1, MAX_JUDGE_CALLS_IN_FLIGHT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_comes_from_the_load() {
        let sweep = LoadShape::Sweep {
            max_concurrency: 24,
            ttft_factor: 2.0,
            min_gain: 0.05,
        };
        assert_eq!((sweep.pool_size(4), sweep.warmup_concurrency(4)), (24, 1));
        let levels = LoadShape::Levels { levels: vec![8, 2] };
        assert_eq!((levels.pool_size(4), levels.warmup_concurrency(4)), (8, 8));
        assert_eq!(
            (LoadShape::Fixed.pool_size(0), LoadShape::Fixed.warmup_concurrency(0)),
            (1, 1)
        );
        let rate = LoadShape::Rate {
            per_second: 5.0,
            poisson: false,
        };
        assert_eq!((rate.pool_size(16), rate.warmup_concurrency(16)), (OPEN_LOOP_POOL, 4));
        assert_eq!(rate.warmup_concurrency(2), 2);
        assert_eq!(rate.loads(16)[0].max_in_flight(), OPEN_LOOP_MAX_IN_FLIGHT);
        assert_eq!(Load::soak(0).max_in_flight(), 1);
        assert_eq!(
            Load::soak(5000),
            Load::Concurrency {
                concurrency: MAX_CONCURRENCY
            }
        );
        assert_eq!(
            (
                judge_calls_in_flight(0),
                judge_calls_in_flight(3),
                judge_calls_in_flight(64)
            ),
            (1, 3, 8)
        );
    }
}
