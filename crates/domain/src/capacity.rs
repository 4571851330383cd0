//! Capacity at the SLO: the most load a deployment carries while its requests still meet the
//! objectives (`run::Slo`) at the target attainment (docs/capacity.md).
//!
//! - A level's attainment interval: the hull of Wilson's and a batch-means interval over the
//!   level's outcomes in send order (`stats::attainment_interval`). Requests under load are not
//!   independent (one queue burst makes many neighbours miss together: against the truth server
//!   a probe's attainment varies 4–5 × more than Wilson assumes), and an interval that ignores
//!   it made the search's bracket cover the true capacity in 5 of 12 searches.
//! - A level's verdict in the search ([`LevelVerdict`]): its [`SEARCH_CONFIDENCE`] interval
//!   wholly at or above the target (meets), wholly below (misses), or across it (undecided).
//! - The search ([`CapacitySearch`]): a state machine told each probe's outcome and asked for
//!   the next load. Bracket on the measured attainment (grow the load by `growth` until a
//!   level's attainment falls below the target, or shrink it until one is at or above); estimate
//!   the crossing by interpolation (in log load, between the closest probes either side); then
//!   confirm the interval's ends — a probe above the estimate that confidently misses (which
//!   also narrows the bracket), one below that confidently meets, each step longer when the
//!   nearer probe was undecided — and locate with a probe at the estimate itself, while the
//!   budget lasts. Reported: the estimate and the interval [highest load that confidently
//!   meets, lowest load above it that confidently misses].
//! - Over-saturation ([`saturation_signs`]): a level whose server queue grows within it.
//! - Cost at capacity ([`cost_at_capacity`]): a self-hosted candidate's price per answer there.
//!
//! No I/O: the engine drives the probes (`engine::run::capacity`), the tests feed it outcomes.
use serde::{Deserialize, Serialize};

use crate::calibers::{ATTAINMENT_CONFIDENCE, RequestFigures};
use crate::candidate::CandidateSpec;
use crate::run::{Phase, RequestRecord};
use crate::stats::{
    ATTAINMENT_BATCHES, Batch, Interval, attainment_interval, batch_means, batches_of, binomial_upper_tail, wilson,
};

/// Confidence of the interval a probe's verdict in the search is taken at: stricter than the
/// 95 % each level's figure states, because the reported interval rests on two verdicts (its two
/// ends) picked out of up to eight probes, several of them near the truth.
pub const SEARCH_CONFIDENCE: f64 = 0.99;

/// A level judged against the target attainment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LevelVerdict {
    /// The attainment interval lies wholly at or above the target.
    Meets,
    /// Wholly below it.
    Misses,
    /// Across it: more requests would be needed to tell.
    Undecided,
}

impl LevelVerdict {
    /// `met` of `requests` met every objective (failed requests count as misses), judged by
    /// the 95 % Wilson interval (requests taken as independent).
    pub fn of(met: u64, requests: u64, target: f64) -> LevelVerdict {
        LevelVerdict::by(wilson(met, requests, ATTAINMENT_CONFIDENCE), target)
    }

    /// Which side of `target` the interval lies on.
    pub fn by(interval: Option<Interval>, target: f64) -> LevelVerdict {
        match interval {
            Some(i) if i.lo >= target => LevelVerdict::Meets,
            Some(i) if i.hi < target => LevelVerdict::Misses,
            _ => LevelVerdict::Undecided,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            LevelVerdict::Meets => "meets",
            LevelVerdict::Misses => "misses",
            LevelVerdict::Undecided => "undecided",
        }
    }
}

/// What the search varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadAxis {
    /// Requests per second, open loop (Poisson arrivals).
    Rate,
    /// Requests in flight, closed loop (whole numbers).
    Concurrency,
}

impl LoadAxis {
    pub fn unit(&self) -> &'static str {
        match self {
            LoadAxis::Rate => "req/s",
            LoadAxis::Concurrency => "concurrent",
        }
    }

    /// `42.0`, `12`: the load without its unit.
    pub fn number(&self, load: f64) -> String {
        match self {
            LoadAxis::Rate if load < 10.0 => format!("{load:.2}"),
            LoadAxis::Rate => format!("{load:.1}"),
            LoadAxis::Concurrency => format!("{load:.0}"),
        }
    }

    /// `42.0 req/s`, `12 concurrent`.
    pub fn format(&self, load: f64) -> String {
        format!("{} {}", self.number(load), self.unit())
    }
}

/// How a search runs; the defaults are what docs/capacity.md states.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchSettings {
    pub axis: LoadAxis,
    /// The first load probed.
    pub start: f64,
    /// Lowest and highest load the search may probe.
    pub min_load: f64,
    pub max_load: f64,
    /// Factor the load grows (or shrinks) by while bracketing.
    pub growth: f64,
    /// The search stops once (upper − lower) / lower is at most this (0.05: 5 %).
    pub width: f64,
    /// Most levels probed.
    pub max_probes: u32,
    /// Once bracketed, the interval's ends are confirmed by a probe this far below the estimate
    /// (0.06: 6 %) and one [`UPPER_STEP`] times as far above, farther when those were
    /// undecided ([`ESCALATION`]), while the probe budget lasts.
    pub confirm_step: f64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            axis: LoadAxis::Rate,
            start: 1.0,
            min_load: 0.05,
            max_load: 10_000.0,
            growth: 2.0,
            width: 0.05,
            max_probes: 8,
            confirm_step: 0.06,
        }
    }
}

/// Default width of the capacity bracket.
pub const DEFAULT_WIDTH: f64 = 0.05;

/// Default most probe levels of one search.
pub const DEFAULT_MAX_PROBES: u32 = 8;

// A search inside one run ("find capacity", `LoadShape::FindCapacity`) stores each probe as a
// level of the run; a level's index *is* its load's place on a fixed grid, so every candidate's
// own probes are levels of the run keyed like any level, with no list of loads to keep in step.
// Concurrency: the level is the concurrency. Request rate: three significant digits, one step in
// the last up to 199 and two above (at most 1 % apart, 500 a decade), from 0.01 to 9,980 req/s.
/// Lowest and highest rate on the grid.
pub const GRID_MIN_RATE: f64 = 0.01;
pub const GRID_MAX_RATE: f64 = 9_980.0;
const GRID_FIRST_DECADE: i32 = -2;
const GRID_PER_DECADE: u32 = 500;

/// The rate on the grid nearest `load` (within 0.01–9,980 req/s): shown as typed (`42.4`).
pub fn snap(load: f64) -> f64 {
    rate_of_level(rate_level(load))
}

/// The level index of `load` on `axis`'s grid.
pub fn level_of(axis: LoadAxis, load: f64) -> u32 {
    match axis {
        LoadAxis::Concurrency => load.round().clamp(1.0, f64::from(u32::MAX)) as u32,
        LoadAxis::Rate => rate_level(load),
    }
}

/// The load of `level` on `axis`'s grid.
pub fn load_of_level(axis: LoadAxis, level: u32) -> f64 {
    match axis {
        LoadAxis::Concurrency => f64::from(level),
        LoadAxis::Rate => rate_of_level(level),
    }
}

fn rate_level(load: f64) -> u32 {
    let load = if load.is_finite() { load } else { GRID_MIN_RATE };
    let load = load.clamp(GRID_MIN_RATE, GRID_MAX_RATE);
    let mut decade = load.log10().floor() as i32;
    let mut mantissa = (load / 10f64.powi(decade - 2)).round() as u32;
    if mantissa >= 200 {
        mantissa = mantissa.div_ceil(2) * 2;
    }
    if mantissa >= 1000 {
        decade += 1;
        mantissa = 100;
    }
    let place = if mantissa < 200 {
        mantissa.max(100) - 100
    } else {
        100 + (mantissa - 200) / 2
    };
    ((decade - GRID_FIRST_DECADE).max(0) as u32 * GRID_PER_DECADE + place).min(rate_level_max())
}

fn rate_level_max() -> u32 {
    // 9,980 req/s: the last place of the sixth decade.
    6 * GRID_PER_DECADE - 1
}

fn rate_of_level(level: u32) -> f64 {
    let level = level.min(rate_level_max());
    let decade = (level / GRID_PER_DECADE) as i32 + GRID_FIRST_DECADE;
    let place = level % GRID_PER_DECADE;
    let mantissa = if place < 100 {
        100 + place
    } else {
        200 + (place - 100) * 2
    };
    // A division by an exact power of ten keeps the typed digits (0.0234, not 0.023399…).
    let exp = decade - 2;
    if exp < 0 {
        f64::from(mantissa) / 10f64.powi(-exp)
    } else {
        f64::from(mantissa) * 10f64.powi(exp)
    }
}

/// One probed level, as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub load: f64,
    /// Requests counted (final attempts, warm-ups excluded; failures count as misses).
    pub requests: u64,
    /// Those that met every objective.
    pub met: u64,
    /// The level's queue was growing (`saturation_signs`): its figures describe a transient.
    #[serde(default)]
    pub past_saturation: bool,
    /// Its outcomes in send order, in contiguous (requests, met) batches
    /// (`LevelFigures::slo_attainment_batches`): what its interval is taken over.
    #[serde(default)]
    pub batches: Vec<Batch>,
}

impl Probe {
    pub fn attainment(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.met as f64 / self.requests as f64)
    }

    /// The 95 % interval every page shows.
    pub fn interval(&self) -> Option<Interval> {
        self.interval_at(ATTAINMENT_CONFIDENCE)
    }

    pub fn interval_at(&self, confidence: f64) -> Option<Interval> {
        attainment_interval(self.met, self.requests, &self.batches, confidence)
    }

    /// Its verdict in the search, at [`SEARCH_CONFIDENCE`]. A level past saturation never meets
    /// the target: its attainment only looks good for as long as the queue has not yet grown.
    pub fn verdict(&self, target: f64) -> LevelVerdict {
        match LevelVerdict::by(self.interval_at(SEARCH_CONFIDENCE), target) {
            LevelVerdict::Meets if self.past_saturation => LevelVerdict::Undecided,
            v => v,
        }
    }

    /// Whether its measured attainment is at or above the target (past saturation: never).
    fn at_or_above(&self, target: f64) -> bool {
        !self.past_saturation && self.attainment().is_some_and(|a| a >= target)
    }
}

/// One probe level as run: by a search of its own runs (`bakeoff measure --find-capacity`),
/// each probe is a run of its own (`run_id`); inside a find-capacity run, a level of that run
/// (`run_id` is the run's, the level `level_of(axis, probe.load)`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRun {
    pub run_id: i64,
    pub probe: Probe,
    #[serde(default)]
    pub signs: SaturationSigns,
    /// The level's figures (goodput, throughput, decode rate per stream: the charts' points).
    #[serde(default)]
    pub figures: Option<crate::calibers::LevelFigures>,
}

/// One candidate's search: stored as it goes (`run_capacity`), so a restarted run resumes it
/// and its page shows it whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateCapacity {
    pub candidate_id: i64,
    pub name: String,
    pub search: CapacitySearch,
    pub probes: Vec<ProbeRun>,
    /// None while the search goes on, or when it was cancelled before it ended.
    pub outcome: Option<CapacityOutcome>,
}

impl CandidateCapacity {
    pub fn new(candidate_id: i64, name: String, settings: SearchSettings, target: f64) -> CandidateCapacity {
        CandidateCapacity {
            candidate_id,
            name,
            search: CapacitySearch::new(settings, target),
            probes: Vec::new(),
            outcome: None,
        }
    }

    /// Records a probe level and, when that ends the search, its outcome.
    pub fn record(&mut self, probe: ProbeRun) {
        self.search.record(probe.probe.clone());
        self.probes.push(probe);
        if let SearchState::Done(outcome) = self.search.state() {
            self.outcome = Some(outcome);
        }
    }
}

/// A probe level at `load` judged from its records (one candidate's, of that level only:
/// warm-ups and other phases are left out): its figures, its signs of over-saturation against
/// the probe just below it in `before` and the client's `in_flight_cap` (`usize::MAX` for a
/// closed loop, at its cap by design), and the probe the search is told.
pub fn judge_probe(
    run_id: i64,
    records: &[RequestRecord],
    config: &crate::run::RunConfig,
    candidate_id: i64,
    load: f64,
    in_flight_cap: usize,
    before: &[ProbeRun],
) -> ProbeRun {
    let figures = crate::calibers::run_figures(records, config, candidate_id, |_| None);
    let level = figures.levels.into_iter().next();
    // The level just below (by load) this one, for "throughput flat while load rose".
    let previous = before
        .iter()
        .filter(|p| p.probe.load < load)
        .max_by(|a, b| a.probe.load.total_cmp(&b.probe.load))
        .and_then(|p| Some((p.probe.load, p.figures.as_ref()?.req_per_s?)));
    let this = level.as_ref().and_then(|l| Some((load, l.req_per_s?)));
    let signs = level_signs(records, in_flight_cap, previous, this);
    let (requests, met) = level.as_ref().map_or((0, 0), |l| (l.requests, l.slo_met));
    let probe = Probe {
        load,
        requests,
        met,
        past_saturation: signs.past_saturation(),
        batches: level
            .as_ref()
            .map(|l| l.slo_attainment_batches.clone())
            .unwrap_or_default(),
    };
    ProbeRun {
        run_id,
        probe,
        signs,
        figures: level,
    }
}

/// `capacity probe 3 at 42.0 req/s: 280 of 300 requests met every objective (undecided)`, and
/// why it was past saturation: the event a probe level ends with.
pub fn probe_message(index: usize, axis: LoadAxis, p: &ProbeRun, target: f64) -> String {
    format!(
        "capacity probe {} at {}: {} of {} requests met every objective ({}){}",
        index + 1,
        axis.format(p.probe.load),
        p.probe.met,
        p.probe.requests,
        p.probe.verdict(target).as_str(),
        if p.signs.past_saturation() {
            format!("; past saturation: {}", p.signs.describe())
        } else {
            String::new()
        },
    )
}

/// Where a search stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SearchState {
    /// Probe this load next.
    Probe { load: f64 },
    /// Done: see the outcome.
    Done(CapacityOutcome),
}

/// How a search ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityOutcome {
    /// The estimate: where the measured attainment crosses the target, interpolated (in log
    /// load) between the closest probes either side; with none above it, the highest load
    /// probed (None: no probe met the target).
    pub capacity: Option<f64>,
    /// The interval's lower end: the highest load below the estimate whose attainment interval
    /// (at [`SEARCH_CONFIDENCE`]) lies wholly at or above the target (None: none did).
    #[serde(default)]
    pub lower: Option<f64>,
    /// Its upper end: the lowest load above `lower` whose interval lies wholly below the
    /// target (None: none did, up to the highest load probed).
    pub upper: Option<f64>,
    /// Why it stopped.
    pub reason: StopReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A probe landed within the stated width of the estimate (or the bracket is that narrow).
    Converged,
    /// Out of probes before a probe landed within the stated width of the estimate.
    ProbesSpent,
    /// Even the lowest load allowed does not clear the target.
    BelowMinimum,
    /// The highest load allowed still clears it.
    AboveMaximum,
}

impl StopReason {
    pub fn describe(&self) -> &'static str {
        match self {
            StopReason::Converged => "located within the stated width",
            StopReason::ProbesSpent => "probe budget spent before a probe landed within the stated width",
            StopReason::BelowMinimum => "even the lowest load allowed misses the target",
            StopReason::AboveMaximum => "the highest load allowed still meets the target",
        }
    }
}

impl CapacityOutcome {
    /// `capacity @ SLO = 42.0 req/s [38.6–45.4]`, or why there is none.
    pub fn describe(&self, axis: LoadAxis) -> String {
        let end = |v: Option<f64>, none: &str| v.map_or_else(|| none.to_string(), |v| axis.number(v));
        match (self.capacity, self.reason) {
            (Some(c), StopReason::AboveMaximum) => {
                format!("capacity @ SLO ≥ {} ({})", axis.format(c), self.reason.describe())
            }
            (Some(c), _) => format!(
                "capacity @ SLO = {} [{}–{}]",
                axis.format(c),
                end(self.lower, "0"),
                end(self.upper, "?")
            ),
            (None, _) => match self.upper {
                Some(u) => format!("capacity @ SLO < {} ({})", axis.format(u), self.reason.describe()),
                None => "capacity @ SLO: nothing measured".to_string(),
            },
        }
    }

    /// Whether `true_capacity` lies inside the reported interval.
    pub fn covers(&self, true_capacity: f64) -> bool {
        self.lower.is_none_or(|c| c <= true_capacity) && self.upper.is_none_or(|u| true_capacity <= u)
    }

    /// (upper − lower) / estimate: the interval's width relative to the estimate (None while an
    /// end is open).
    pub fn relative_width(&self) -> Option<f64> {
        Some((self.upper? - self.lower?) / self.capacity?)
    }
}

/// The capacity search: feed it each probe's outcome, ask it for the next load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacitySearch {
    pub settings: SearchSettings,
    pub target: f64,
    pub probes: Vec<Probe>,
}

impl CapacitySearch {
    pub fn new(settings: SearchSettings, target: f64) -> CapacitySearch {
        CapacitySearch {
            settings,
            target,
            probes: Vec::new(),
        }
    }

    pub fn record(&mut self, probe: Probe) {
        self.probes.push(probe);
    }

    /// The closest probes either side of the crossing, by measured attainment: (the highest
    /// at or above the target below `upper`, the lowest below it or past saturation).
    pub fn bracket(&self) -> (Option<&Probe>, Option<&Probe>) {
        let upper = self
            .probes
            .iter()
            .filter(|p| p.requests > 0 && !p.at_or_above(self.target))
            .min_by(|a, b| a.load.total_cmp(&b.load));
        // A level at or above the target above one below it is noise on the wrong side.
        let lower = self
            .probes
            .iter()
            .filter(|p| p.at_or_above(self.target) && upper.is_none_or(|u| p.load < u.load))
            .max_by(|a, b| a.load.total_cmp(&b.load));
        (lower, upper)
    }

    /// Where the measured attainment crosses the target between `l` and `u` (log load).
    fn crossing(&self, l: &Probe, u: &Probe) -> f64 {
        let (al, au) = (l.attainment().unwrap_or(1.0), u.attainment().unwrap_or(0.0));
        let f = if al > au {
            ((al - self.target) / (al - au)).clamp(0.0, 1.0)
        } else {
            0.5
        };
        (l.load.ln() + f * (u.load.ln() - l.load.ln())).exp()
    }

    /// The interval's ends around `estimate` (see [`CapacityOutcome`]).
    fn ends(&self, estimate: f64) -> (Option<f64>, Option<f64>) {
        let lower = self
            .probes
            .iter()
            .filter(|p| p.load <= estimate && p.verdict(self.target) == LevelVerdict::Meets)
            .map(|p| p.load)
            .max_by(f64::total_cmp);
        let upper = self
            .probes
            .iter()
            .filter(|p| lower.is_none_or(|l| p.load > l) && p.verdict(self.target) == LevelVerdict::Misses)
            .map(|p| p.load)
            .min_by(f64::total_cmp);
        (lower, upper)
    }

    fn round(&self, load: f64) -> f64 {
        let s = &self.settings;
        let load = load.clamp(s.min_load, s.max_load);
        match s.axis {
            // On the grid a search inside one run keys its levels by (`level_of`).
            LoadAxis::Rate => snap(load),
            LoadAxis::Concurrency => load.round().max(1.0),
        }
    }

    fn probed(&self, load: f64) -> bool {
        self.probes
            .iter()
            .any(|p| (p.load - load).abs() <= 1e-9 * load.abs().max(1.0))
    }

    pub fn state(&self) -> SearchState {
        let s = &self.settings;
        if self.probes.is_empty() {
            return SearchState::Probe {
                load: self.round(s.start),
            };
        }
        let spent = self.probes.len() as u32 >= s.max_probes;
        let (lower, upper) = self.bracket();
        let (l, u) = match (lower, upper) {
            (Some(l), Some(u)) => (l, u),
            (Some(l), None) => {
                let next = self.round(l.load * s.growth);
                if l.load >= s.max_load || spent || self.probed(next) {
                    let (lo, _) = self.ends(l.load);
                    let reason = if l.load >= s.max_load {
                        StopReason::AboveMaximum
                    } else {
                        StopReason::ProbesSpent
                    };
                    return SearchState::Done(CapacityOutcome {
                        capacity: Some(l.load),
                        lower: lo,
                        upper: None,
                        reason,
                    });
                }
                return SearchState::Probe { load: next };
            }
            (None, Some(u)) => {
                let next = self.round(u.load / s.growth);
                if u.load <= s.min_load || spent || self.probed(next) {
                    let reason = if u.load <= s.min_load {
                        StopReason::BelowMinimum
                    } else {
                        StopReason::ProbesSpent
                    };
                    let (_, hi) = self.ends(0.0);
                    return SearchState::Done(CapacityOutcome {
                        capacity: None,
                        lower: None,
                        upper: hi.or(Some(u.load)),
                        reason,
                    });
                }
                return SearchState::Probe { load: next };
            }
            (None, None) => unreachable!("a probe with requests is on one side"),
        };
        let estimate = self.crossing(l, u);
        let located = (u.load - l.load) / l.load <= s.width
            || self.probes.iter().any(|p| {
                (p.load / estimate - 1.0).abs() <= s.width && p.verdict(self.target) == LevelVerdict::Undecided
            });
        let done = |reason| {
            let (lower, upper) = self.ends(estimate);
            SearchState::Done(CapacityOutcome {
                capacity: Some(estimate),
                lower,
                upper,
                reason,
            })
        };
        if spent {
            return done(if located {
                StopReason::Converged
            } else {
                StopReason::ProbesSpent
            });
        }
        let (lo, hi) = self.ends(estimate);
        // Confirm the interval's upper end first: a probe above the estimate also narrows the
        // bracket. The step grows when a probe there was undecided (the attainment varies more
        // above the capacity than below it, so the upper step is half as long again).
        let up = s.confirm_step * UPPER_STEP;
        for k in ESCALATION {
            let d = up * k;
            if hi.is_some_and(|h| (h - estimate) / estimate <= d * 1.01) {
                break;
            }
            let above = self.round(estimate * (1.0 + d));
            // Not beyond a probe above that already misses confidently.
            let beyond = u.load <= above * 1.01 && u.verdict(self.target) == LevelVerdict::Misses;
            if !self.near(above) && !beyond {
                return SearchState::Probe { load: above };
            }
        }
        for k in ESCALATION {
            let d = s.confirm_step * k;
            if lo.is_some_and(|l| (estimate - l) / estimate <= d * 1.01) {
                break;
            }
            let below = self.round(estimate * (1.0 - d));
            if !self.near(below) {
                return SearchState::Probe { load: below };
            }
        }
        // Then locate: a probe at the estimate itself.
        let at = self.round(estimate);
        if !located && !self.probed(at) {
            return SearchState::Probe { load: at };
        }
        done(if located {
            StopReason::Converged
        } else {
            StopReason::ProbesSpent
        })
    }

    /// Whether a probe was already run at, or within [`NEAR`] of, `load`.
    fn near(&self, load: f64) -> bool {
        self.probed(load) || self.probes.iter().any(|p| (p.load / load - 1.0).abs() < NEAR)
    }
}

/// The upper end's confirmation step, as a multiple of `confirm_step`.
pub const UPPER_STEP: f64 = 1.5;
/// Multiples of a confirmation step tried in turn while the probe nearer was undecided.
pub const ESCALATION: [f64; 3] = [1.0, 1.75, 3.0];
/// Loads closer than this (relative) to a probe already run are not probed again.
pub const NEAR: f64 = 0.03;

/// Confidence of the intervals that stop a level early ("stop when decided"): stricter than the
/// 95 % every figure states, because the level looks again and again. Each side of the target
/// gets (1 − 0.99) / 2 = 0.5 % at each look ([`DECIDE_ALPHA`]).
pub const DECIDE_CONFIDENCE: f64 = 0.99;
/// One-sided error each look allows: the exact binomial tail at the target.
pub const DECIDE_ALPHA: f64 = (1.0 - DECIDE_CONFIDENCE) / 2.0;
/// Fewest requests a level counts before it may stop early: enough to see past the level's
/// start (every user sending at once) and for batch means to have batches of several requests.
pub const DECIDE_MIN_REQUESTS: u64 = 40;

/// A level's running attainment against the target, told each request's outcome as it ends
/// (failed requests count as misses), judged every [`DECIDE_EVERY`] outcomes from
/// [`DECIDE_MIN_REQUESTS`] on. Decided when two 99 % intervals lie wholly on one side of the
/// target:
///
/// - the exact (Clopper–Pearson) interval of met / counted ([`exact_side`]), which covers at
///   least its confidence for every true attainment and every count: the error of one look is
///   at most 0.5 % each side. Wilson's interval, which every figure shows, is not exact near
///   90 %: its upper end is too low there, and a rule judged by it decided "misses" for a level
///   exactly at a 90 % target 3.7 % of the time over 120 requests (0.5 % "meets"), where this
///   one decides either way at most 1.3 % ([`DECIDE_ERROR`], computed exactly in the tests).
///   It also needs fewer requests to say "meets" when every one met: 55 (Wilson's: 60);
/// - the batch-means interval over the outcomes in the order they ended (as the level's figure
///   takes it in send order), which widens when misses come in bursts (requests under load are
///   not independent: one queue burst makes many neighbours miss together).
///
/// The stopped level is then judged like any level, by its 95 % figure over every request it
/// counted (those in flight at the decision end and count).
#[derive(Debug, Clone, PartialEq)]
pub struct LevelDecision {
    pub target: f64,
    pub met: u64,
    pub counted: u64,
    outcomes: Vec<bool>,
    /// The verdict and the outcomes counted when it was reached: final, whatever the requests
    /// still in flight then bring.
    verdict: Option<(LevelVerdict, u64)>,
}

/// Outcomes between two judgements of a running level.
pub const DECIDE_EVERY: u64 = 5;

/// Over a level of 120 requests whose outcomes are independent with an attainment exactly at a
/// 90 % target, the chance the rule ever decides (meets, misses): what its unit test computes
/// exactly over every path of outcomes (batch means left out: it only ever widens the interval).
pub const DECIDE_ERROR: (f64, f64) = (0.0091, 0.0132);

/// Which side of `target` the exact (Clopper–Pearson) interval of `met` of `n` lies on, at a
/// one-sided error of `alpha`: meets when P(X ≥ met) ≤ alpha for X ~ Binomial(n, target) (the
/// interval's lower end is at or above the target), misses when P(X ≤ met) ≤ alpha.
pub fn exact_side(met: u64, n: u64, target: f64, alpha: f64) -> LevelVerdict {
    if n == 0 || met > n {
        return LevelVerdict::Undecided;
    }
    if met as f64 >= target * n as f64 {
        if binomial_upper_tail(met, n, target) <= alpha {
            return LevelVerdict::Meets;
        }
    // P(X ≤ met) is the chance of at least n − met misses, each with probability 1 − target.
    } else if binomial_upper_tail(n - met, n, 1.0 - target) <= alpha {
        return LevelVerdict::Misses;
    }
    LevelVerdict::Undecided
}

/// One look at `outcomes` (in the order they ended): the side both 99 % intervals lie on.
fn judge(outcomes: &[bool], target: f64) -> Option<LevelVerdict> {
    let met = outcomes.iter().filter(|&&m| m).count() as u64;
    let exact = exact_side(met, outcomes.len() as u64, target, DECIDE_ALPHA);
    let batches = batches_of(outcomes.iter().map(|&m| (1, u64::from(m))), ATTAINMENT_BATCHES);
    let spread = batch_means(&batches, DECIDE_CONFIDENCE).map(|i| LevelVerdict::by(Some(i), target));
    match (exact, spread) {
        (LevelVerdict::Undecided, _) => None,
        (v, None) => Some(v),
        (v, Some(s)) if s == v => Some(v),
        _ => None,
    }
}

impl LevelDecision {
    pub fn new(target: f64) -> LevelDecision {
        LevelDecision {
            target,
            met: 0,
            counted: 0,
            outcomes: Vec::new(),
            verdict: None,
        }
    }

    /// One more outcome. Once decided, outcomes are still counted (the requests in flight at the
    /// decision end and count) but the verdict stands: a level stopped does not start again.
    pub fn add(&mut self, met: bool) {
        self.counted += 1;
        self.met += u64::from(met);
        if self.verdict.is_some() {
            return;
        }
        self.outcomes.push(met);
        if self.counted >= DECIDE_MIN_REQUESTS && self.counted.is_multiple_of(DECIDE_EVERY) {
            self.verdict = judge(&self.outcomes, self.target).map(|v| (v, self.counted));
        }
    }

    /// The verdict, once decided.
    pub fn decided(&self) -> Option<LevelVerdict> {
        self.verdict.map(|v| v.0)
    }

    /// The outcomes counted when the verdict was reached.
    pub fn decided_after(&self) -> Option<u64> {
        self.verdict.map(|v| v.1)
    }
}

/// Why a level was judged past saturation; empty when it was not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SaturationSigns {
    /// TTFT of the level's last third of requests over its first third (by send time), when
    /// that ratio is above [`TTFT_GROWTH_LIMIT`].
    pub ttft_growth: Option<f64>,
    /// In-flight requests reached the client's cap.
    pub in_flight_at_cap: bool,
    /// Load rose by more than [`FLAT_LOAD_RISE`] over the previous level, throughput by less
    /// than [`FLAT_THROUGHPUT_GAIN`] of that rise.
    pub throughput_flat: bool,
}

/// Last third's median TTFT over the first third's beyond which the queue is growing.
pub const TTFT_GROWTH_LIMIT: f64 = 1.5;
/// A load rise worth judging throughput by.
pub const FLAT_LOAD_RISE: f64 = 0.10;
/// Share of the load rise throughput must keep to count as rising with it.
pub const FLAT_THROUGHPUT_GAIN: f64 = 0.25;

impl SaturationSigns {
    pub fn past_saturation(&self) -> bool {
        self.ttft_growth.is_some() || self.in_flight_at_cap || self.throughput_flat
    }

    /// "TTFT ×3.2 from the first third to the last; throughput flat while load rose".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(g) = self.ttft_growth {
            parts.push(format!("TTFT ×{g:.1} from the level's first third to its last"));
        }
        if self.in_flight_at_cap {
            parts.push("requests in flight at the client's cap".to_string());
        }
        if self.throughput_flat {
            parts.push("throughput flat while load rose".to_string());
        }
        parts.join("; ")
    }
}

/// The signs of a growing queue in one level: `ttft_by_send` is every successful request's
/// (send time, TTFT) in any order; `in_flight_at_cap` whether the client ever had as many
/// requests in flight as it allows; `previous` and `this` are (offered load, measured req/s) of
/// the level below and this one, when both are known.
pub fn saturation_signs(
    ttft_by_send: &[(i64, f64)],
    in_flight_at_cap: bool,
    previous: Option<(f64, f64)>,
    this: Option<(f64, f64)>,
) -> SaturationSigns {
    let mut sorted = ttft_by_send.to_vec();
    sorted.sort_by_key(|s| s.0);
    let third = sorted.len() / 3;
    // Too few requests for thirds worth comparing: no trend claimed.
    let ttft_growth = (third >= 5)
        .then(|| {
            let median_of = |part: &[(i64, f64)]| {
                let mut v: Vec<f64> = part.iter().map(|s| s.1).collect();
                crate::stats::median(&mut v)
            };
            let first = median_of(&sorted[..third]);
            let last = median_of(&sorted[sorted.len() - third..]);
            (first > 0.0).then_some(last / first)
        })
        .flatten()
        .filter(|g| *g > TTFT_GROWTH_LIMIT);
    let throughput_flat = throughput_flat(previous, this);
    SaturationSigns {
        ttft_growth,
        in_flight_at_cap,
        throughput_flat,
    }
}

/// Whether throughput stayed flat while load rose from `previous` to `this` (each (offered
/// load, measured req/s)): the load rose by more than [`FLAT_LOAD_RISE`], req/s by less than
/// [`FLAT_THROUGHPUT_GAIN`] of that rise.
pub fn throughput_flat(previous: Option<(f64, f64)>, this: Option<(f64, f64)>) -> bool {
    match (previous, this) {
        (Some((load0, tput0)), Some((load1, tput1))) if load0 > 0.0 && tput0 > 0.0 => {
            let load_rise = load1 / load0 - 1.0;
            let gain = tput1 / tput0 - 1.0;
            load_rise > FLAT_LOAD_RISE && gain < FLAT_THROUGHPUT_GAIN * load_rise
        }
        _ => false,
    }
}

/// [`saturation_signs`] of one level's records (warm-ups and other phases left out): each
/// successful request's TTFT by send time, and whether the requests in flight at once ever
/// reached `in_flight_cap` (the client's limit for the level).
pub fn level_signs(
    records: &[RequestRecord],
    in_flight_cap: usize,
    previous: Option<(f64, f64)>,
    this: Option<(f64, f64)>,
) -> SaturationSigns {
    let measured: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| !r.is_warmup && matches!(r.phase, Phase::Throughput | Phase::Quality))
        .collect();
    let ttft: Vec<(i64, f64)> = measured
        .iter()
        .filter_map(|r| Some((r.sent_at_us, RequestFigures::of(r)?.ttft_ms)))
        .collect();
    // Sends before ends at the same instant: a request replaced at once was not in flight twice.
    let mut edges: Vec<(i64, i32)> = measured
        .iter()
        .flat_map(|r| {
            [
                (r.sent_at_us, 1),
                (r.sent_at_us + r.end_us.get().unwrap_or(0).max(0), -1),
            ]
        })
        .collect();
    edges.sort_by_key(|&(at, step)| (at, step));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    saturation_signs(&ttft, most as usize >= in_flight_cap, previous, this)
}

/// What a self-hosted deployment costs per answer when it serves at its measured capacity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostAtCapacity {
    /// USD per hour of the deployment (GPUs × price per GPU-hour).
    pub usd_per_hour: f64,
    /// USD per 1,000 answers at the capacity (answers/hour = capacity req/s × 3600).
    pub per_1k_answers: f64,
    /// USD per 1,000 correct answers (None without an accuracy).
    pub per_1k_correct: Option<f64>,
}

/// A candidate's capacity @ SLO from a find-capacity run, and its cost there: what a
/// scorecard's `capacity_at_slo` and cost-at-capacity rules judge.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityEvidence {
    pub axis: LoadAxis,
    /// None: the search did not end.
    pub outcome: Option<CapacityOutcome>,
    /// Requests counted over every probe level.
    pub requests: u64,
    /// A self-hosted candidate's cost at the estimate, and at the interval's upper and lower
    /// ends (the upper end gives the lower cost); None without prices or a capacity over rate.
    pub cost: Option<CostAtCapacity>,
    pub cost_at_upper: Option<CostAtCapacity>,
    pub cost_at_lower: Option<CostAtCapacity>,
}

impl CapacityEvidence {
    /// `accuracy` (0–1): the candidate's, for the cost per 1,000 correct answers.
    pub fn of(search: &CandidateCapacity, spec: &CandidateSpec, accuracy: Option<f64>) -> CapacityEvidence {
        let axis = search.search.settings.axis;
        let outcome = search.outcome.clone();
        let cost_at = |load: Option<f64>| {
            load.filter(|_| axis == LoadAxis::Rate)
                .and_then(|l| cost_at_capacity(spec, l, accuracy))
        };
        CapacityEvidence {
            axis,
            requests: search.probes.iter().map(|p| p.probe.requests).sum(),
            cost: cost_at(outcome.as_ref().and_then(|o| o.capacity)),
            cost_at_upper: cost_at(outcome.as_ref().and_then(|o| o.upper)),
            cost_at_lower: cost_at(outcome.as_ref().and_then(|o| o.lower)),
            outcome,
        }
    }

    /// `0.2000 USD per 1,000 answers [0.1900–0.2300], 0.2500 per 1,000 correct (2 × H100 at
    /// 3.60 USD per GPU-hour)`: None without a cost.
    pub fn describe_cost(&self, spec: &CandidateSpec) -> Option<String> {
        let cost = self.cost?;
        let end = |c: Option<CostAtCapacity>| c.map_or("?".to_string(), |c| format!("{:.4}", c.per_1k_answers));
        Some(format!(
            "cost at capacity: {:.4} USD per 1,000 answers [{}–{}]{} ({} × {} at {} USD per GPU-hour)",
            cost.per_1k_answers,
            end(self.cost_at_upper),
            end(self.cost_at_lower),
            cost.per_1k_correct
                .map(|c| format!(", {c:.4} per 1,000 correct answers"))
                .unwrap_or_default(),
            spec.gpu_count?,
            spec.gpu_kind.as_deref().unwrap_or("GPU"),
            spec.gpu_hour_price?
        ))
    }
}

/// The cost per answer of a candidate with `gpu_count` GPUs at `gpu_hour_price` USD each,
/// serving `capacity_req_s` (a capacity over request rate); `accuracy` (0–1) gives the cost per
/// correct answer. None when the price or count is not stated or the capacity is not positive.
pub fn cost_at_capacity(spec: &CandidateSpec, capacity_req_s: f64, accuracy: Option<f64>) -> Option<CostAtCapacity> {
    let usd_per_hour = f64::from(spec.gpu_count?) * spec.gpu_hour_price?;
    if capacity_req_s <= 0.0 || !capacity_req_s.is_finite() {
        return None;
    }
    let per_1k_answers = usd_per_hour / (capacity_req_s * 3600.0) * 1000.0;
    Some(CostAtCapacity {
        usd_per_hour,
        per_1k_answers,
        per_1k_correct: accuracy.filter(|a| *a > 0.0).map(|a| per_1k_answers / a),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_and_its_cost_at_capacity_are_rules_judged_by_the_search_interval() {
        use crate::scorecard::measurement::{CandidateRecords, Extras, measure};
        use crate::scorecard::{RuleState, assess};
        use crate::thresholds::{Comparator, ThresholdRule, key::MetricKey};
        let mut spec = CandidateSpec::openai_chat("self-hosted", "http://127.0.0.1:1", "m");
        spec.gpu_count = Some(2);
        spec.gpu_hour_price = Some(3.6);
        let settings = SearchSettings::default();
        let mut found = CandidateCapacity::new(1, "self-hosted".into(), settings, 0.9);
        found.probes.push(ProbeRun {
            run_id: 7,
            probe: Probe {
                load: 40.0,
                requests: 300,
                met: 290,
                past_saturation: false,
                batches: Vec::new(),
            },
            signs: SaturationSigns::default(),
            figures: None,
        });
        found.outcome = Some(CapacityOutcome {
            capacity: Some(42.0),
            lower: Some(38.0),
            upper: Some(45.0),
            reason: StopReason::Converged,
        });
        let evidence = CapacityEvidence::of(&found, &spec, Some(0.8));
        // 7.2 USD an hour over 42 × 3,600 answers.
        let cost = evidence.cost.unwrap();
        assert!((cost.per_1k_answers - 7.2 / (42.0 * 3.6)).abs() < 1e-12);
        assert!((cost.per_1k_correct.unwrap() - cost.per_1k_answers / 0.8).abs() < 1e-12);
        assert!(
            evidence
                .describe_cost(&spec)
                .unwrap()
                .contains("per 1,000 correct answers")
        );
        let judge = |metric: &str, comparator, value| {
            let key = MetricKey::parse(metric).unwrap();
            let extras = Extras {
                capacity: Some(&evidence),
                ..Extras::default()
            };
            let m = measure(
                &key,
                &CandidateRecords::default(),
                4,
                &std::collections::HashMap::new(),
                &extras,
            );
            let rule = ThresholdRule {
                metric: metric.into(),
                comparator,
                value,
                unit: key.def().unit.stored_name().into(),
                rationale: String::new(),
            };
            assess(&rule, &key, &m).state
        };
        // The search's interval [38–45] decides: wholly above 35, straddling 40, wholly below 50.
        assert_eq!(judge("capacity_at_slo", Comparator::AtLeast, 35.0), RuleState::Pass);
        assert_eq!(
            judge("capacity_at_slo", Comparator::AtLeast, 40.0),
            RuleState::Inconclusive
        );
        assert_eq!(judge("capacity_at_slo", Comparator::AtLeast, 50.0), RuleState::Fail);
        assert_eq!(
            judge("cost_per_1k_correct_at_capacity", Comparator::AtMost, 1.0),
            RuleState::Pass
        );
        assert_eq!(
            judge("cost_per_1k_answers_at_capacity", Comparator::AtMost, 0.01),
            RuleState::Fail
        );
        // Another run's candidate: not measured, and saying why.
        let key = MetricKey::parse("capacity_at_slo").unwrap();
        let m = measure(
            &key,
            &CandidateRecords::default(),
            4,
            &std::collections::HashMap::new(),
            &Extras::default(),
        );
        assert!(m.missing.unwrap().contains("find-capacity run"));
        // A search over request rate is in req/s: a rule in users is not judged against it.
        let users = MetricKey::parse("capacity_at_slo_users").unwrap();
        let extras = Extras {
            capacity: Some(&evidence),
            ..Extras::default()
        };
        let m = measure(
            &users,
            &CandidateRecords::default(),
            4,
            &std::collections::HashMap::new(),
            &extras,
        );
        assert!(m.value.is_none());
        assert!(m.missing.unwrap().contains("in req/s, not users"));
    }

    #[test]
    fn a_search_over_concurrency_is_judged_in_users() {
        use crate::scorecard::measurement::{CandidateRecords, Extras, measure};
        use crate::scorecard::{RuleState, assess};
        use crate::thresholds::{Comparator, ThresholdRule, key::MetricKey};
        let mut spec = CandidateSpec::openai_chat("self-hosted", "http://127.0.0.1:1", "m");
        spec.gpu_count = Some(2);
        spec.gpu_hour_price = Some(3.6);
        let settings = SearchSettings {
            axis: LoadAxis::Concurrency,
            ..SearchSettings::default()
        };
        let mut found = CandidateCapacity::new(1, "self-hosted".into(), settings, 0.9);
        found.outcome = Some(CapacityOutcome {
            capacity: Some(24.0),
            lower: Some(22.0),
            upper: Some(26.0),
            reason: StopReason::Converged,
        });
        let evidence = CapacityEvidence::of(&found, &spec, Some(0.8));
        let measured = |metric: &str| {
            let key = MetricKey::parse(metric).unwrap();
            let extras = Extras {
                capacity: Some(&evidence),
                ..Extras::default()
            };
            let m = measure(
                &key,
                &CandidateRecords::default(),
                4,
                &std::collections::HashMap::new(),
                &extras,
            );
            let rule = ThresholdRule {
                metric: metric.into(),
                comparator: Comparator::AtLeast,
                value: 20.0,
                unit: key.def().unit.stored_name().into(),
                rationale: String::new(),
            };
            (assess(&rule, &key, &m).state, m)
        };
        let (state, m) = measured("capacity_at_slo_users");
        assert_eq!(
            (state, m.value, m.interval),
            (RuleState::Pass, Some(24.0), Some((22.0, 26.0)))
        );
        assert_eq!(
            MetricKey::parse("capacity_at_slo_users")
                .unwrap()
                .def()
                .unit
                .format(24.0),
            "24 users"
        );
        // The same figure is not compared with a rule in req/s: the mismatch is named.
        let (state, m) = measured("capacity_at_slo");
        assert_eq!(state, RuleState::NotMeasured);
        assert!(m.missing.unwrap().contains("in users, not req/s"));
        let (state, _) = measured("cost_per_1k_answers_at_capacity");
        assert_eq!(state, RuleState::NotMeasured);
    }

    #[test]
    fn probe_loads_on_the_grid_keep_their_digits_and_their_level() {
        // Three significant digits, at most 1 % apart, every level's load mapping back to it.
        for level in 0..=rate_level_max() {
            let load = rate_of_level(level);
            assert_eq!(rate_level(load), level, "{load}");
            assert_eq!(snap(load), load);
            if level > 0 {
                let below = rate_of_level(level - 1);
                assert!(load > below && load / below <= 1.0101, "{below} → {load}");
            }
        }
        assert_eq!(snap(42.17), 42.2);
        assert_eq!(snap(0.0234), 0.0234);
        assert_eq!(snap(63.96), 64.0);
        assert_eq!(snap(9_999.0), GRID_MAX_RATE);
        assert_eq!(snap(0.0), GRID_MIN_RATE);
        assert_eq!(format!("{}", snap(1.234_567)), "1.23");
        assert!(rate_level(GRID_MAX_RATE) < u32::MAX / crate::run::LEVEL_STRIDE);
        assert_eq!(level_of(LoadAxis::Concurrency, 12.4), 12);
        assert_eq!(load_of_level(LoadAxis::Concurrency, 12), 12.0);
    }

    /// A level of `n` requests whose attainment is what a server of true capacity `truth`
    /// gives at `load`: everything below, nothing above (a sharp knee).
    fn sharp(load: f64, truth: f64, n: u64) -> Probe {
        Probe {
            load,
            requests: n,
            met: if load <= truth { n } else { 0 },
            past_saturation: false,
            batches: Vec::new(),
        }
    }

    fn search_until_done(
        mut search: CapacitySearch,
        measure: impl Fn(f64) -> Probe,
    ) -> (CapacitySearch, CapacityOutcome) {
        loop {
            match search.state() {
                SearchState::Probe { load } => search.record(measure(load)),
                SearchState::Done(outcome) => return (search, outcome),
            }
        }
    }

    #[test]
    fn verdicts_follow_the_interval_not_the_point() {
        assert_eq!(LevelVerdict::of(400, 400, 0.95), LevelVerdict::Meets);
        assert_eq!(
            LevelVerdict::of(10, 10, 0.95),
            LevelVerdict::Undecided,
            "10 of 10 is too few for 95 %"
        );
        assert_eq!(LevelVerdict::of(300, 400, 0.95), LevelVerdict::Misses);
        assert_eq!(LevelVerdict::of(380, 400, 0.95), LevelVerdict::Undecided);
    }

    #[test]
    fn brackets_then_locates_within_the_width_in_few_probes() {
        let settings = SearchSettings {
            start: 10.0,
            ..SearchSettings::default()
        };
        let (search, outcome) = search_until_done(CapacitySearch::new(settings, 0.95), |l| sharp(l, 42.0, 400));
        let c = outcome.capacity.unwrap();
        assert!((c / 42.0 - 1.0).abs() <= 0.05, "{outcome:?}");
        assert!(search.probes.len() <= 8, "{}", search.probes.len());
        assert!(outcome.covers(42.0));
        assert!(outcome.describe(LoadAxis::Rate).starts_with("capacity @ SLO = "));
    }

    #[test]
    fn starts_above_capacity_and_shrinks() {
        let settings = SearchSettings {
            start: 100.0,
            ..SearchSettings::default()
        };
        let (_, outcome) = search_until_done(CapacitySearch::new(settings, 0.9), |l| sharp(l, 7.0, 400));
        assert!(outcome.covers(7.0), "{outcome:?}");
    }

    #[test]
    fn concurrency_stops_at_neighbours() {
        let settings = SearchSettings {
            axis: LoadAxis::Concurrency,
            start: 1.0,
            width: 0.01,
            max_probes: 20,
            ..SearchSettings::default()
        };
        let (search, outcome) = search_until_done(CapacitySearch::new(settings, 0.9), |l| sharp(l, 5.0, 400));
        assert_eq!((outcome.lower, outcome.upper), (Some(5.0), Some(6.0)), "{outcome:?}");
        assert!(outcome.capacity.is_some_and(|c| (5.0..=6.0).contains(&c)));
        assert!(search.probes.iter().all(|p| p.load.fract() == 0.0));
    }

    #[test]
    fn limits_and_budget_end_the_search_with_their_reason() {
        let low = SearchSettings {
            start: 1.0,
            min_load: 0.5,
            ..SearchSettings::default()
        };
        let (_, o) = search_until_done(CapacitySearch::new(low, 0.9), |l| sharp(l, 0.1, 400));
        assert_eq!((o.reason, o.capacity), (StopReason::BelowMinimum, None));
        let high = SearchSettings {
            max_load: 50.0,
            ..SearchSettings::default()
        };
        let (_, o) = search_until_done(CapacitySearch::new(high, 0.9), |l| sharp(l, 1e6, 400));
        assert_eq!((o.reason, o.capacity), (StopReason::AboveMaximum, Some(50.0)));
        let short = SearchSettings {
            max_probes: 3,
            ..SearchSettings::default()
        };
        let (s, o) = search_until_done(CapacitySearch::new(short, 0.9), |l| sharp(l, 40.0, 400));
        assert_eq!((o.reason, s.probes.len()), (StopReason::ProbesSpent, 3));
    }

    #[test]
    fn cost_at_capacity_spreads_the_hourly_price_over_the_answers_served() {
        let spec = CandidateSpec {
            gpu_count: Some(2),
            gpu_hour_price: Some(3.6),
            ..CandidateSpec::openai_chat("self-hosted", "http://127.0.0.1:1/v1", "m")
        };
        // 7.2 USD an hour over 10 req/s = 36,000 answers an hour: 0.2 USD per 1,000.
        let cost = cost_at_capacity(&spec, 10.0, Some(0.8)).unwrap();
        assert!((cost.per_1k_answers - 0.2).abs() < 1e-12, "{cost:?}");
        assert!((cost.per_1k_correct.unwrap() - 0.25).abs() < 1e-12);
        let api = CandidateSpec::openai_chat("api", "http://127.0.0.1:1/v1", "m");
        assert!(cost_at_capacity(&api, 10.0, None).is_none());
        assert!(cost_at_capacity(&spec, 0.0, None).is_none());
    }

    #[test]
    fn a_level_decides_only_with_enough_requests_wholly_on_one_side() {
        let mut d = LevelDecision::new(0.9);
        (0..30).for_each(|_| d.add(true));
        assert_eq!(d.decided(), None, "too few to stop");
        (0..30).for_each(|_| d.add(true));
        assert_eq!(d.decided(), Some(LevelVerdict::Meets));
        let mut near = LevelDecision::new(0.9);
        (0..200).for_each(|i| near.add(i % 10 != 0));
        assert_eq!(near.decided(), None, "90 % of 200 against a 90 % target is not decided");
        let mut low = LevelDecision::new(0.9);
        (0..60).for_each(|i| low.add(i % 2 == 0));
        assert_eq!(low.decided(), Some(LevelVerdict::Misses));
        // 85 % of 200, every miss in one run of 30 (a queue burst): the exact interval alone
        // would stop (its 99 % interval starts near 78 %), batch means sees the burst and does not.
        let burst: Vec<bool> = (0..200).map(|i| !(80..110).contains(&i)).collect();
        assert_eq!(exact_side(170, 200, 0.7, DECIDE_ALPHA), LevelVerdict::Meets);
        assert_eq!(judge(&burst, 0.7), None);
    }

    /// The chance a sequential rule judged by `side` at every [`DECIDE_EVERY`] outcomes from
    /// [`DECIDE_MIN_REQUESTS`] to `n` ever decides (meets, misses), for independent outcomes met
    /// with probability `p`: exact, over every path (the distribution of the count met, less
    /// the paths already decided).
    fn ever_decides(side: impl Fn(u64, u64) -> LevelVerdict, p: f64, n: u64) -> (f64, f64) {
        let mut paths = vec![1.0f64];
        let (mut meets, mut misses) = (0.0, 0.0);
        for counted in 1..=n {
            let mut next = vec![0.0; paths.len() + 1];
            for (met, &q) in paths.iter().enumerate() {
                next[met] += q * (1.0 - p);
                next[met + 1] += q * p;
            }
            paths = next;
            if counted >= DECIDE_MIN_REQUESTS && counted.is_multiple_of(DECIDE_EVERY) {
                for (met, q) in paths.iter_mut().enumerate() {
                    match side(met as u64, counted) {
                        LevelVerdict::Meets => meets += *q,
                        LevelVerdict::Misses => misses += *q,
                        LevelVerdict::Undecided => continue,
                    }
                    *q = 0.0;
                }
            }
        }
        (meets, misses)
    }

    #[test]
    fn the_exact_rule_errs_at_most_its_stated_chance_each_side_and_wilson_would_not() {
        let exact = |met, n| exact_side(met, n, 0.9, DECIDE_ALPHA);
        let (meets, misses) = ever_decides(exact, 0.9, 120);
        assert!((meets - DECIDE_ERROR.0).abs() < 5e-4, "{meets}");
        assert!((misses - DECIDE_ERROR.1).abs() < 5e-4, "{misses}");
        // The same looks judged by Wilson's 99 % interval: "misses" 7 times its nominal 0.5 %.
        let by_wilson = |met, n| LevelVerdict::by(wilson(met, n, DECIDE_CONFIDENCE), 0.9);
        let (w_meets, w_misses) = ever_decides(by_wilson, 0.9, 120);
        assert!(
            (w_meets - 0.0053).abs() < 5e-4 && (w_misses - 0.0369).abs() < 5e-4,
            "{w_meets} {w_misses}"
        );
        // Wrong side further from the target: rarer still (the tails shrink).
        let (meets_below, _) = ever_decides(exact, 0.88, 120);
        let (_, misses_above) = ever_decides(exact, 0.92, 120);
        assert!(
            meets_below < meets && misses_above < misses,
            "{meets_below} {misses_above}"
        );
        // Every request met: decided at 55 (Wilson's lower end needs 60).
        let first = |side: &dyn Fn(u64, u64) -> LevelVerdict| {
            (DECIDE_MIN_REQUESTS..=200)
                .step_by(DECIDE_EVERY as usize)
                .find(|&n| side(n, n) == LevelVerdict::Meets)
        };
        assert_eq!(first(&exact), Some(55));
        assert_eq!(first(&by_wilson), Some(60));
        let mut d = LevelDecision::new(0.9);
        (0..54).for_each(|_| d.add(true));
        assert_eq!(d.decided(), None);
        d.add(true);
        assert_eq!((d.decided(), d.counted), (Some(LevelVerdict::Meets), 55));
        // The requests in flight then count, but the verdict stands, even were they all misses.
        (0..40).for_each(|_| d.add(false));
        assert_eq!(
            (d.decided(), d.decided_after(), d.counted, d.met),
            (Some(LevelVerdict::Meets), Some(55), 95, 55)
        );
    }

    #[test]
    fn the_exact_side_follows_the_binomial_tails() {
        // 0.9^50 = 0.52 % > 0.5 %; 0.9^51 = 0.46 %.
        assert_eq!(exact_side(50, 50, 0.9, 0.005), LevelVerdict::Undecided);
        assert_eq!(exact_side(51, 51, 0.9, 0.005), LevelVerdict::Meets);
        // 30 of 40 met at a 90 % target: P(X ≤ 30) for X ~ B(40, 0.9) is 0.51 %; 29: 0.15 %.
        assert_eq!(exact_side(30, 40, 0.9, 0.005), LevelVerdict::Undecided);
        assert_eq!(exact_side(29, 40, 0.9, 0.005), LevelVerdict::Misses);
        assert_eq!(exact_side(0, 0, 0.9, 0.005), LevelVerdict::Undecided);
        assert_eq!(exact_side(36, 40, 0.9, 0.005), LevelVerdict::Undecided);
    }

    #[test]
    fn a_level_past_saturation_never_meets() {
        let p = Probe {
            load: 10.0,
            requests: 400,
            met: 400,
            past_saturation: true,
            batches: Vec::new(),
        };
        assert_eq!(p.verdict(0.9), LevelVerdict::Undecided);
    }

    #[test]
    fn a_growing_queue_shows_in_ttft_and_flat_throughput() {
        let steady: Vec<(i64, f64)> = (0..60).map(|i| (i * 1000, 100.0 + (i % 3) as f64)).collect();
        assert!(!saturation_signs(&steady, false, Some((10.0, 10.0)), Some((20.0, 19.5))).past_saturation());
        let growing: Vec<(i64, f64)> = (0..60).map(|i| (i * 1000, 100.0 + 10.0 * i as f64)).collect();
        let signs = saturation_signs(&growing, false, None, None);
        assert!(signs.ttft_growth.unwrap() > 3.0 && signs.past_saturation(), "{signs:?}");
        let flat = saturation_signs(&steady, false, Some((10.0, 10.0)), Some((20.0, 10.5)));
        assert!(flat.throughput_flat && flat.describe().contains("flat"));
        assert!(saturation_signs(&steady[..10], true, None, None).in_flight_at_cap);
    }
}
