//! Run presets: the article's conservative starting points, one per kind of question, and the
//! load-shape part of the run form (fields `RunDraft` does not cover).
//!
//! Every preset keeps the defaults the method asks for — a low starting concurrency (1–4),
//! temperature 0.2, a fixed max_tokens (the eval set's, the same for every request), a 60 s
//! timeout, one retry, warm-ups excluded from every figure, repeated measurements (3+) where
//! speed is measured, and the staged rollout (one case → a few → all) on.
use super::capacity::{DEFAULT_MAX_PROBES, DEFAULT_WIDTH, GRID_MAX_RATE, GRID_MIN_RATE, LoadAxis};
use super::load::{LoadShape, MAX_CONCURRENCY};
use super::run::{RunConfig, Slo};
use super::validation::{FieldErrors, optional_number};

/// A named starting point for the run form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// A first look: the first ten cases once, one request at a time.
    QuickCheck,
    /// The quality run behind a scorecard: every case, three repetitions, concurrency 4.
    FullEvaluation,
    /// Concurrency 1, 2, 4 … 32 to find the knee.
    ConcurrencySweep,
    /// One request at a time, repeated, so TTFT against prompt length shows prefill cost.
    PromptLengthSweep,
    /// Steady load for 30 minutes, cycling through the cases, to see drift and errors over time.
    Soak,
}

impl Preset {
    pub const ALL: [Preset; 5] = [
        Preset::QuickCheck,
        Preset::FullEvaluation,
        Preset::ConcurrencySweep,
        Preset::PromptLengthSweep,
        Preset::Soak,
    ];

    /// The URL form (`?preset=quick-check`).
    pub fn slug(self) -> &'static str {
        match self {
            Preset::QuickCheck => "quick-check",
            Preset::FullEvaluation => "full-evaluation",
            Preset::ConcurrencySweep => "concurrency-sweep",
            Preset::PromptLengthSweep => "prompt-length-sweep",
            Preset::Soak => "soak",
        }
    }

    pub fn parse(slug: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.slug() == slug.trim())
    }

    pub fn label(self) -> &'static str {
        match self {
            Preset::QuickCheck => "Quick check",
            Preset::FullEvaluation => "Full evaluation",
            Preset::ConcurrencySweep => "Concurrency sweep",
            Preset::PromptLengthSweep => "Prompt-length sweep",
            Preset::Soak => "Soak",
        }
    }

    /// What the preset is for and what it does, in one or two sentences.
    pub fn description(self) -> &'static str {
        match self {
            Preset::QuickCheck => {
                "Does it work at all? The first 10 cases once, one request at a time, after one warm-up. \
                 Minutes, not hours; not enough for a verdict."
            }
            Preset::FullEvaluation => {
                "The quality run behind a scorecard: every case, 3 repetitions (medians and spread), \
                 concurrency 4, two warm-ups excluded."
            }
            Preset::ConcurrencySweep => {
                "Where is the knee? Every case at concurrency 1, 2, 4, 8, 16, 32, 3 repetitions per level; \
                 reports the highest concurrency before p95 TTFT doubles or aggregate tok/s stops growing."
            }
            Preset::PromptLengthSweep => {
                "How does prompt length cost? One request at a time (no queueing), 3 repetitions, so TTFT \
                 against the prompt-token bins shows prefill cost. Use an eval set whose cases span the lengths."
            }
            Preset::Soak => {
                "Does it stay up? Concurrency 4 for 30 minutes, cycling through the cases, to see latency \
                 drift, errors and rate limits over time."
            }
        }
    }

    /// The preset's run configuration.
    pub fn config(self) -> RunConfig {
        let base = RunConfig {
            temperature: Some(0.2),
            timeout_secs: 60,
            retries: 1,
            stream: true,
            staged_rollout: true,
            ..RunConfig::default()
        };
        match self {
            Preset::QuickCheck => RunConfig {
                concurrency: 1,
                repetitions: 1,
                warmup_requests: 1,
                case_limit: Some(10),
                ..base
            },
            Preset::FullEvaluation => RunConfig {
                concurrency: 4,
                repetitions: 3,
                warmup_requests: 2,
                ..base
            },
            Preset::ConcurrencySweep => RunConfig {
                concurrency: 1,
                repetitions: 3,
                warmup_requests: 2,
                load: LoadShape::Sweep {
                    max_concurrency: 32,
                    ttft_factor: 2.0,
                    min_gain: 0.05,
                },
                ..base
            },
            Preset::PromptLengthSweep => RunConfig {
                concurrency: 1,
                repetitions: 3,
                warmup_requests: 2,
                ..base
            },
            Preset::Soak => RunConfig {
                concurrency: 4,
                repetitions: 1,
                warmup_requests: 2,
                load: LoadShape::Levels { levels: vec![4] },
                // Enough cycles through the cases to fill the duration; the duration ends it.
                requests_per_level: Some(100_000),
                duration_secs: Some(30 * 60),
                ..base
            },
        }
    }
}

/// The load-shape part of the run form, as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadDraft {
    /// "fixed", "levels", "sweep" or "rate".
    pub shape: String,
    /// Comma-separated concurrencies for "levels".
    pub levels: String,
    /// Highest concurrency for "sweep".
    pub sweep_max: String,
    /// Requests per second for "rate".
    pub rate: String,
    /// How a rate's requests arrive: "poisson" (exponential gaps; blank means this) or
    /// "constant" (evenly spaced).
    pub arrivals: String,
    pub requests_per_level: String,
    pub duration_secs: String,
    /// "on" when ticked.
    pub staged_rollout: Option<String>,
    /// "on" when ticked: each level stops once its SLO attainment is decided.
    pub stop_when_decided: Option<String>,
    /// "on" when ticked: a sweep goes on past a level past saturation.
    pub measure_past_saturation: Option<String>,
    /// "find capacity": what the search varies, "rate" (blank means this; the first probe is
    /// `rate`) or "concurrency" (the first probe is the run's concurrency).
    pub capacity_axis: String,
    /// The bracket width the search stops at, percent of the capacity. Blank: 5.
    pub capacity_width: String,
    /// Most probe levels per candidate. Blank: 8.
    pub capacity_max_probes: String,
    /// Highest load a probe may use. Blank: no limit but the grid's.
    pub capacity_max_load: String,
    /// The SLO (`run::Slo`), milliseconds each; blank: no limit on it.
    pub slo_ttft_ms: String,
    pub slo_ttfa_ms: String,
    pub slo_tpot_ms: String,
    pub slo_e2e_ms: String,
    /// Target attainment, percent of requests meeting every limit. Blank: none.
    pub slo_target: String,
    /// "replay": the workload version replayed (its id, as listed on the workloads page).
    pub workload_version: String,
    /// "replay": the speed-up factor (1: as recorded, 2: twice as fast). Blank: 1.
    pub replay_speed: String,
}

/// The shapes offered on the form: (value, label).
pub const LOAD_SHAPES: [(&str, &str); 6] = [
    ("fixed", "Fixed concurrency"),
    ("levels", "Concurrency levels"),
    ("sweep", "Concurrency sweep (1, 2, 4 … max)"),
    ("rate", "Request rate (open loop)"),
    ("capacity", "Find capacity @ SLO (a search per candidate)"),
    ("replay", "Replay a workload (our traffic: its arrivals and lengths)"),
];

/// What a capacity search varies, as offered on the form: (value, label).
pub const CAPACITY_AXES: [(&str, &str); 2] = [
    ("rate", "Request rate (open loop, Poisson; starts at the rate above)"),
    (
        "concurrency",
        "Concurrency (closed loop; starts at the concurrency above)",
    ),
];

/// Most probe levels a capacity search may be given.
pub const MAX_CAPACITY_PROBES: u32 = 30;
/// Longest SLO limit, milliseconds (an hour).
const MAX_SLO_MS: f64 = 3_600_000.0;

/// A share (0.95) as the percent typed on the form ("95").
fn percent(share: f64) -> String {
    super::format::shortest((share * 100.0 * 1e6).round() / 1e6)
}

/// How a rate's requests arrive, as offered on the form: (value, label).
pub const ARRIVALS: [(&str, &str); 2] = [
    (
        "poisson",
        "Poisson (random gaps averaging 1/rate, like independent users)",
    ),
    ("constant", "Constant (evenly spaced, one every 1/rate)"),
];

impl LoadDraft {
    /// The form's view of a configuration.
    pub fn from_config(c: &RunConfig) -> LoadDraft {
        let mut d = LoadDraft {
            requests_per_level: c.requests_per_level.map(|n| n.to_string()).unwrap_or_default(),
            duration_secs: c.duration_secs.map(|n| n.to_string()).unwrap_or_default(),
            staged_rollout: c.staged_rollout.then(|| "on".to_string()),
            stop_when_decided: c.stop_when_decided.then(|| "on".to_string()),
            measure_past_saturation: c.measure_past_saturation.then(|| "on".to_string()),
            slo_ttft_ms: c.slo.ttft_ms.map(super::format::shortest).unwrap_or_default(),
            slo_ttfa_ms: c.slo.ttfa_ms.map(super::format::shortest).unwrap_or_default(),
            slo_tpot_ms: c.slo.tpot_ms.map(super::format::shortest).unwrap_or_default(),
            slo_e2e_ms: c.slo.e2e_ms.map(super::format::shortest).unwrap_or_default(),
            slo_target: c.slo.target_attainment.map(percent).unwrap_or_default(),
            ..LoadDraft::default()
        };
        match &c.load {
            LoadShape::Fixed => d.shape = "fixed".into(),
            LoadShape::Levels { levels } => {
                d.shape = "levels".into();
                d.levels = levels.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            }
            LoadShape::Sweep { max_concurrency, .. } => {
                d.shape = "sweep".into();
                d.sweep_max = max_concurrency.to_string();
            }
            LoadShape::Rate { per_second, poisson } => {
                d.shape = "rate".into();
                d.rate = per_second.to_string();
                d.arrivals = if *poisson { "poisson" } else { "constant" }.into();
            }
            LoadShape::FindCapacity {
                axis,
                start,
                width,
                max_probes,
                max_load,
            } => {
                d.shape = "capacity".into();
                d.capacity_axis = match axis {
                    LoadAxis::Rate => {
                        d.rate = start.to_string();
                        "rate"
                    }
                    LoadAxis::Concurrency => "concurrency",
                }
                .into();
                d.capacity_width = percent(*width);
                d.capacity_max_probes = max_probes.to_string();
                d.capacity_max_load = max_load.map(|m| m.to_string()).unwrap_or_default();
            }
            LoadShape::Replay {
                workload_version,
                speed,
            } => {
                d.shape = "replay".into();
                d.workload_version = workload_version.to_string();
                d.replay_speed = super::format::shortest(*speed);
            }
        }
        d
    }

    /// The "replay" shape typed: the workload version (its existence is checked where the run is
    /// created, against the store) and the speed-up.
    fn replay(&self, e: &mut FieldErrors) -> LoadShape {
        let workload_version = match self.workload_version.trim() {
            "" => {
                e.add(
                    "workload_version",
                    "is required to replay a workload; choose a workload version from the list",
                );
                0
            }
            raw => match raw.parse::<i64>() {
                Ok(id) if id > 0 => id,
                _ => {
                    e.add(
                        "workload_version",
                        format!(
                            "{:?} is not a workload version; choose one from the list",
                            super::validation::truncate(raw, 20)
                        ),
                    );
                    0
                }
            },
        };
        let speed = match self.replay_speed.trim() {
            "" => 1.0,
            raw => match raw.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 && s <= crate::workload::replay::MAX_SPEED => s,
                _ => {
                    e.add(
                        "replay_speed",
                        format!(
                            "must be a speed-up above 0 and at most {} (1: as recorded, 2: twice as fast), got {:?}",
                            crate::workload::replay::MAX_SPEED,
                            super::validation::truncate(raw, 20)
                        ),
                    );
                    1.0
                }
            },
        };
        LoadShape::Replay {
            workload_version,
            speed,
        }
    }

    /// The SLO typed, or which field is wrong.
    fn slo(&self, e: &mut FieldErrors) -> Slo {
        let limit = |e: &mut FieldErrors, field: &str, raw: &str| optional_number(e, field, raw, 0.001, MAX_SLO_MS);
        Slo {
            ttft_ms: limit(e, "slo_ttft_ms", &self.slo_ttft_ms),
            ttfa_ms: limit(e, "slo_ttfa_ms", &self.slo_ttfa_ms),
            tpot_ms: limit(e, "slo_tpot_ms", &self.slo_tpot_ms),
            e2e_ms: limit(e, "slo_e2e_ms", &self.slo_e2e_ms),
            target_attainment: optional_number(e, "slo_target", &self.slo_target, 0.1, 100.0).map(|p| p / 100.0),
            later_turns: None,
        }
    }

    /// The "find capacity" shape typed onto `config` (its concurrency and SLO already set). Its
    /// SLO is checked once the judging profile is known ([`check_capacity_slo`]): a profile with
    /// an SLO block supplies it.
    fn find_capacity(&self, config: &RunConfig, e: &mut FieldErrors) -> LoadShape {
        let axis = match self.capacity_axis.trim() {
            "" | "rate" => LoadAxis::Rate,
            "concurrency" => LoadAxis::Concurrency,
            other => {
                e.add(
                    "capacity_axis",
                    format!(
                        "{:?} is not what a search varies; choose request rate or concurrency",
                        super::validation::truncate(other, 20)
                    ),
                );
                LoadAxis::Rate
            }
        };
        let (start, bottom, top) = match axis {
            LoadAxis::Rate => {
                let rate: Option<f64> = optional_number(e, "rate", &self.rate, GRID_MIN_RATE, GRID_MAX_RATE);
                if rate.is_none() && e.get("rate").is_none() {
                    e.add("rate", "is required: the first probe of a search over request rate");
                }
                (rate.unwrap_or(1.0), GRID_MIN_RATE, GRID_MAX_RATE)
            }
            LoadAxis::Concurrency => (f64::from(config.concurrency.max(1)), 1.0, f64::from(MAX_CONCURRENCY)),
        };
        let width: Option<f64> = optional_number(e, "capacity_width", &self.capacity_width, 0.5, 50.0);
        LoadShape::FindCapacity {
            axis,
            start,
            width: width.map_or(DEFAULT_WIDTH, |w| w / 100.0),
            max_probes: optional_number(
                e,
                "capacity_max_probes",
                &self.capacity_max_probes,
                1,
                MAX_CAPACITY_PROBES,
            )
            .unwrap_or(DEFAULT_MAX_PROBES),
            max_load: optional_number(e, "capacity_max_load", &self.capacity_max_load, bottom, top),
        }
    }

    /// Applies the typed load shape onto `config` (which holds the rest of the form), or says
    /// which field is wrong.
    pub fn apply(&self, config: &mut RunConfig, e: &mut FieldErrors) {
        config.staged_rollout = self.staged_rollout.is_some();
        config.stop_when_decided = self.stop_when_decided.is_some();
        config.measure_past_saturation = self.measure_past_saturation.is_some();
        config.requests_per_level = optional_number(e, "requests_per_level", &self.requests_per_level, 1, 1_000_000);
        config.duration_secs = optional_number(e, "duration_secs", &self.duration_secs, 1, 7 * 24 * 3600);
        config.slo = self.slo(e);
        config.load = match self.shape.trim() {
            "capacity" => self.find_capacity(config, e),
            "replay" => self.replay(e),
            "" | "fixed" => LoadShape::Fixed,
            "levels" => {
                let mut levels = Vec::new();
                for part in self.levels.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match part.parse::<u32>() {
                        Ok(n) if (1..=MAX_CONCURRENCY).contains(&n) => levels.push(n),
                        _ => {
                            e.add(
                                "levels",
                                format!("has {part:?}; give whole numbers from 1 to {MAX_CONCURRENCY}, e.g. 1, 4, 16"),
                            );
                            break;
                        }
                    }
                }
                if levels.is_empty() && e.get("levels").is_none() {
                    e.add("levels", "is required for concurrency levels, e.g. 1, 4, 16");
                }
                LoadShape::Levels { levels }
            }
            "sweep" => LoadShape::Sweep {
                max_concurrency: optional_number(e, "sweep_max", &self.sweep_max, 1, MAX_CONCURRENCY).unwrap_or(32),
                ttft_factor: 2.0,
                min_gain: 0.05,
            },
            "rate" => {
                let per_second: Option<f64> = optional_number(e, "rate", &self.rate, 0.01, 10_000.0);
                if per_second.is_none() && e.get("rate").is_none() {
                    e.add("rate", "is required for a request-rate run");
                }
                let poisson = match self.arrivals.trim() {
                    "" | "poisson" => true,
                    "constant" => false,
                    other => {
                        e.add(
                            "arrivals",
                            format!(
                                "{:?} is not an arrival pattern; choose Poisson or constant",
                                super::validation::truncate(other, 20)
                            ),
                        );
                        true
                    }
                };
                LoadShape::Rate {
                    per_second: per_second.unwrap_or(1.0),
                    poisson,
                }
            }
            other => {
                e.add(
                    "load_shape",
                    format!(
                        "{:?} is not a load shape; choose one from the list",
                        super::validation::truncate(other, 20)
                    ),
                );
                LoadShape::Fixed
            }
        };
    }
}

/// A find-capacity run needs an SLO with a target: the judging profile's
/// (`RunConfig::profile_slo`, set from the profile before this check) or, without one, the
/// run's own. Each missing part is named by the run form's field.
pub fn check_capacity_slo(config: &RunConfig, e: &mut FieldErrors) {
    if !matches!(config.load, LoadShape::FindCapacity { .. }) {
        return;
    }
    let slo = config.effective_slo();
    if slo.target_attainment.is_none() && e.get("slo_target").is_none() {
        e.add(
            "slo_target",
            "is required to find the capacity at the SLO, e.g. 95 (percent), unless the judging threshold profile has an SLO",
        );
    }
    if !slo.is_set() && e.get("slo_ttft_ms").is_none() {
        e.add(
            "slo_ttft_ms",
            "finding the capacity needs at least one SLO limit (TTFT, TTFA, TPOT or E2E), here or in the judging threshold profile's SLO",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Load;

    #[test]
    fn every_preset_keeps_the_conservative_defaults() {
        for p in Preset::ALL {
            let c = p.config();
            assert_eq!(Preset::parse(p.slug()), Some(p));
            assert_eq!(c.temperature, Some(0.2), "{}", p.label());
            assert_eq!(c.timeout_secs, 60, "{}", p.label());
            assert_eq!(c.retries, 1, "{}", p.label());
            assert!(c.staged_rollout, "{}", p.label());
            assert!(c.stream, "{}", p.label());
            assert!(c.warmup_requests >= 1, "{}", p.label());
            assert!((1..=4).contains(&c.concurrency), "{} starts at 1–4", p.label());
            assert_eq!(c.max_tokens, None, "{}: the eval set's fixed max_tokens", p.label());
        }
        for p in [
            Preset::FullEvaluation,
            Preset::ConcurrencySweep,
            Preset::PromptLengthSweep,
        ] {
            assert!(p.config().repetitions >= 3, "{} repeats", p.label());
        }
        assert_eq!(Preset::QuickCheck.config().case_limit, Some(10));
        assert_eq!(Preset::parse("nope"), None);
    }

    #[test]
    fn the_sweep_preset_doubles_up_to_32_and_the_soak_is_time_bound() {
        let sweep = Preset::ConcurrencySweep.config();
        let levels: Vec<String> = sweep.loads().iter().map(|l| l.label()).collect();
        assert_eq!(levels, ["c=1", "c=2", "c=4", "c=8", "c=16", "c=32"]);
        let soak = Preset::Soak.config();
        assert_eq!(soak.duration_secs, Some(1800));
        assert_eq!(soak.pool_size(), 4);
    }

    #[test]
    fn load_drafts_round_trip_presets_and_name_bad_fields() {
        for p in Preset::ALL {
            let c = p.config();
            let mut back = RunConfig {
                load: LoadShape::Fixed,
                ..c.clone()
            };
            let mut e = FieldErrors::default();
            LoadDraft::from_config(&c).apply(&mut back, &mut e);
            assert!(e.is_empty(), "{}: {e:?}", p.label());
            assert_eq!(back, c, "{}", p.label());
        }
        let mut c = RunConfig::default();
        let mut e = FieldErrors::default();
        LoadDraft {
            shape: "levels".into(),
            levels: "1, 4, x".into(),
            ..Default::default()
        }
        .apply(&mut c, &mut e);
        assert!(e.get("levels").is_some_and(|m| m.contains("\"x\"")), "{e:?}");
        let mut e = FieldErrors::default();
        LoadDraft {
            shape: "rate".into(),
            ..Default::default()
        }
        .apply(&mut c, &mut e);
        assert!(e.get("rate").is_some());
        for (arrivals, poisson) in [("", true), ("poisson", true), ("constant", false)] {
            let mut e = FieldErrors::default();
            let draft = LoadDraft {
                shape: "rate".into(),
                rate: "2.5".into(),
                arrivals: arrivals.into(),
                ..Default::default()
            };
            draft.apply(&mut c, &mut e);
            assert!(e.is_empty(), "{e:?}");
            assert_eq!(
                c.load,
                LoadShape::Rate {
                    per_second: 2.5,
                    poisson
                }
            );
            assert_eq!(
                LoadDraft::from_config(&c).arrivals,
                if poisson { "poisson" } else { "constant" }
            );
        }
        let mut e = FieldErrors::default();
        LoadDraft {
            shape: "rate".into(),
            rate: "2".into(),
            arrivals: "bursty".into(),
            ..Default::default()
        }
        .apply(&mut c, &mut e);
        assert!(e.get("arrivals").is_some_and(|m| m.contains("\"bursty\"")), "{e:?}");
        let mut e = FieldErrors::default();
        LoadDraft {
            shape: "<script>".into(),
            ..Default::default()
        }
        .apply(&mut c, &mut e);
        assert!(e.get("load_shape").is_some());
        assert!(!c.staged_rollout, "an unticked box turns the rollout off");
    }

    #[test]
    fn a_replay_needs_a_workload_version_and_a_positive_speed_and_round_trips() {
        let mut c = RunConfig::default();
        let mut e = FieldErrors::default();
        let mut draft = LoadDraft {
            shape: "replay".into(),
            replay_speed: "0".into(),
            ..Default::default()
        };
        draft.apply(&mut c, &mut e);
        assert!(
            e.get("workload_version").is_some_and(|m| m.contains("required")),
            "{e:?}"
        );
        assert!(e.get("replay_speed").is_some_and(|m| m.contains("above 0")), "{e:?}");
        for bad in ["-2", "1e9", "NaN", "fast"] {
            let mut e = FieldErrors::default();
            draft.replay_speed = bad.into();
            draft.workload_version = "x".into();
            draft.apply(&mut c, &mut e);
            assert!(e.get("replay_speed").is_some(), "{bad}: {e:?}");
            assert!(e.get("workload_version").is_some_and(|m| m.contains("\"x\"")), "{e:?}");
        }
        draft.workload_version = "3".into();
        draft.replay_speed = String::new();
        let mut e = FieldErrors::default();
        draft.apply(&mut c, &mut e);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            c.load,
            LoadShape::Replay {
                workload_version: 3,
                speed: 1.0
            }
        );
        draft.replay_speed = "2.5".into();
        draft.apply(&mut c, &mut e);
        assert_eq!(c.load.replay(), Some((3, 2.5)));
        // Two levels: the eval set at the run's concurrency, then the replay, judged by default.
        assert_eq!(
            c.loads(),
            [
                Load::Concurrency {
                    concurrency: c.concurrency
                },
                Load::Replay { speed: 2.5 }
            ]
        );
        assert_eq!(c.load.judged_concurrency(c.concurrency), 0);
        assert_eq!(c.loads()[1].label(), "replay 2.5×");
        let mut back = RunConfig::default();
        let mut e = FieldErrors::default();
        LoadDraft::from_config(&c).apply(&mut back, &mut e);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(back.load, c.load);
    }

    #[test]
    fn find_capacity_needs_an_slo_target_and_round_trips() {
        let mut c = RunConfig::default();
        let mut e = FieldErrors::default();
        let mut draft = LoadDraft {
            shape: "capacity".into(),
            rate: "8".into(),
            slo_ttft_ms: "500".into(),
            ..Default::default()
        };
        draft.apply(&mut c, &mut e);
        check_capacity_slo(&c, &mut e);
        assert!(e.get("slo_target").is_some(), "{e:?}");
        // A judging profile's SLO supplies what the run lacks.
        let mut with_profile = RunConfig {
            slo: Slo::default(),
            profile_slo: Some(crate::run::ProfileSlo {
                profile_id: 1,
                profile: "online".into(),
                version: 2,
                slo: Slo {
                    e2e_ms: Some(5000.0),
                    target_attainment: Some(0.9),
                    ..Slo::default()
                },
            }),
            ..c.clone()
        };
        let mut e = FieldErrors::default();
        check_capacity_slo(&with_profile, &mut e);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(with_profile.effective_slo().e2e_ms, Some(5000.0));
        assert!(
            with_profile
                .judging_slo()
                .describe()
                .unwrap()
                .starts_with("SLO from profile \"online\" v2: E2E ≤ 5 s; 90 % must meet all")
        );
        with_profile.profile_slo = None;
        let mut e = FieldErrors::default();
        check_capacity_slo(&with_profile, &mut e);
        assert!(e.get("slo_ttft_ms").is_some() && e.get("slo_target").is_some(), "{e:?}");
        draft.slo_target = "95".into();
        draft.capacity_max_probes = "6".into();
        let mut e = FieldErrors::default();
        draft.apply(&mut c, &mut e);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            c.load,
            LoadShape::FindCapacity {
                axis: LoadAxis::Rate,
                start: 8.0,
                width: DEFAULT_WIDTH,
                max_probes: 6,
                max_load: None
            }
        );
        assert_eq!(c.slo.target_attainment, Some(0.95));
        assert_eq!(c.slo.ttft_ms, Some(500.0));
        let mut back = RunConfig {
            load: LoadShape::Fixed,
            ..c.clone()
        };
        let mut e = FieldErrors::default();
        LoadDraft::from_config(&c).apply(&mut back, &mut e);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(back, c);
        // Over concurrency the first probe is the run's concurrency; a bad axis is named.
        let mut e = FieldErrors::default();
        LoadDraft {
            capacity_axis: "tokens".into(),
            ..draft
        }
        .apply(&mut c, &mut e);
        assert!(
            e.get("capacity_axis").is_some_and(|m| m.contains("\"tokens\"")),
            "{e:?}"
        );
    }
}
