//! Stop when decided, checked on the same requests: a fixed-length run's levels replayed through
//! the stopping rule (`capacity::LevelDecision`).
//!
//! Comparing a stopped run with an independent fixed-length run measures the run-to-run noise as
//! much as the rule: a level whose attainment sits near the target comes out "undecided" in one
//! run and decided in the next, however each is measured. The replay isolates the rule. Each
//! level's outcomes, in the order they ended, go through the rule exactly as a running level's
//! do; where it decides, the level is cut the way a stopped run cuts it ([`IN_FLIGHT`]) and the
//! truncated level is judged as a stopped level is — its 95 % figure (`calibers::run_figures`)
//! over the requests it would have kept — against the full-length level's verdict on the same
//! requests ([`LevelReplay::same`]).
//!
//! No I/O: the decide bench feeds it each fixed run's records.
use std::collections::BTreeMap;

use crate::calibers::{LevelFigures, RequestFigures, run_figures};
use crate::capacity::{LevelDecision, LevelVerdict};
use crate::run::{RequestRecord, RunConfig, Slo, split_repetition};

/// What a level stopped when decided does with the requests still in flight at the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// They end and count (the level only stops sending).
    Counted,
    /// They are cancelled: no record is stored, so they are in no figure (like a run cancelled
    /// mid-level). Not what the engine does (the requests in flight are the slow ones: leaving
    /// them out would raise the attainment, docs/capacity.md); kept to replay what it would cut.
    Excluded,
}

/// What the engine does: the replay cuts a level the same way.
pub const IN_FLIGHT: InFlight = InFlight::Counted;

/// One counted request of a level: when it was sent and ended (wall clock, µs), whether it met
/// every objective (a failed request is a miss).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub sent_at_us: i64,
    pub ended_at_us: i64,
    pub met: bool,
}

/// A record's outcome against `slo` as the level figures count it: None for a record they do not
/// count (a failed attempt that is retried, a success without a first token or an end).
pub fn outcome_of(r: &RequestRecord, slo: &Slo, retries_allowed: u32) -> Option<Outcome> {
    let met = if r.succeeded() {
        RequestFigures::of(r)?.meets(slo)
    } else {
        let retried = r.attempt < retries_allowed && r.error_class.is_some_and(|c| c.is_retryable());
        if retried {
            return None;
        }
        false
    };
    // A failure may have no end event: its latest event, else its send.
    let last = [r.end_us, r.last_token_us, r.first_chunk_us, r.headers_us, r.connect_us]
        .iter()
        .filter_map(|o| o.get())
        .max()
        .unwrap_or(0);
    Some(Outcome {
        sent_at_us: r.sent_at_us,
        ended_at_us: r.sent_at_us + last.max(0),
        met,
    })
}

/// When the stopping rule decides a level's outcomes, fed in the order they ended: the verdict,
/// the outcomes counted and the instant of the deciding one; None when it never decides.
pub fn decision_of(outcomes: &[Outcome], target: f64) -> Option<(LevelVerdict, u64, i64)> {
    let mut by_end: Vec<&Outcome> = outcomes.iter().collect();
    by_end.sort_by_key(|o| (o.ended_at_us, o.sent_at_us));
    let mut decision = LevelDecision::new(target);
    for o in by_end {
        decision.add(o.met);
        if let Some(v) = decision.decided() {
            return Some((v, decision.counted, o.ended_at_us));
        }
    }
    None
}

/// Whether a stopped level keeps an outcome, the rule having decided at `decided_at_us`.
pub fn kept(o: &Outcome, decided_at_us: i64, in_flight: InFlight) -> bool {
    match in_flight {
        // Sent before the decision: it was in flight (or done) and counts.
        InFlight::Counted => o.sent_at_us <= decided_at_us,
        InFlight::Excluded => o.ended_at_us <= decided_at_us,
    }
}

/// A level and its prompt bin.
type LevelKey = (u32, Option<u32>);

/// One fixed-length level replayed through the stopping rule.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelReplay {
    /// The level's index in the run and its prompt bin.
    pub level: u32,
    pub bin: Option<u32>,
    /// Requests the full-length level counted.
    pub counted: u64,
    /// The rule's verdict, the outcomes it had counted and when it decided; None: never decided,
    /// the level runs its plan.
    pub decided: Option<(LevelVerdict, u64, i64)>,
    /// Requests the level stopped when decided would have counted.
    pub kept: u64,
    /// The full-length level's verdict (its 95 % figure over every request).
    pub full: LevelVerdict,
    /// The truncated level's verdict, judged as a stopped level is (its 95 % figure over the
    /// requests it keeps).
    pub stopped: LevelVerdict,
    /// The level's first send and last end (wall clock, µs).
    pub first_sent_us: i64,
    pub last_ended_us: i64,
}

impl LevelReplay {
    pub fn same(&self) -> bool {
        self.full == self.stopped
    }
}

/// Every level of `candidate_id` in a fixed-length run's `records`, replayed through the
/// stopping rule against the run's SLO target (none without a target), in level order.
pub fn replay_run(
    records: &[RequestRecord],
    config: &RunConfig,
    candidate_id: i64,
    bin_of: impl Fn(&str) -> Option<u32> + Copy,
    in_flight: InFlight,
) -> Vec<LevelReplay> {
    let slo = config.effective_slo();
    let Some(target) = slo.target_attainment else {
        return Vec::new();
    };
    let phase = config.measured_phase();
    let loads = config.loads();
    // (level, prompt bin) → its outcomes, each with its record's index.
    let mut levels: BTreeMap<LevelKey, Vec<(usize, Outcome)>> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        if r.candidate_id != candidate_id || r.is_warmup || r.in_ramp() || r.phase != phase {
            continue;
        }
        if let Some(o) = outcome_of(r, &slo, config.retries) {
            let (level, _, _) = split_repetition(r.repetition);
            levels.entry((level, bin_of(&r.case_id))).or_default().push((i, o));
        }
    }
    // The records a run stopped when decided would have stored: every level cut at its decision.
    let mut cut = vec![false; records.len()];
    let mut replays = Vec::new();
    for (&(level, bin), outcomes) in &levels {
        let plain: Vec<Outcome> = outcomes.iter().map(|(_, o)| *o).collect();
        let decided = decision_of(&plain, target);
        if let Some((_, _, at)) = decided {
            for (i, o) in outcomes {
                cut[*i] = !kept(o, at, in_flight);
            }
        }
        replays.push(LevelReplay {
            level,
            bin,
            counted: plain.len() as u64,
            decided,
            kept: outcomes.iter().filter(|(i, _)| !cut[*i]).count() as u64,
            full: LevelVerdict::Undecided,
            stopped: LevelVerdict::Undecided,
            first_sent_us: plain.iter().map(|o| o.sent_at_us).min().unwrap_or(0),
            last_ended_us: plain.iter().map(|o| o.ended_at_us).max().unwrap_or(0),
        });
    }
    let verdicts = |figures: Vec<LevelFigures>| -> BTreeMap<(String, Option<u32>), LevelVerdict> {
        figures
            .into_iter()
            .map(|l| {
                let verdict = LevelVerdict::by(l.slo_attainment_interval, target);
                ((l.load.label(), l.prompt_tokens), verdict)
            })
            .collect()
    };
    let full = verdicts(run_figures(records, config, candidate_id, bin_of).levels);
    let truncated = records.iter().zip(&cut).filter(|(_, c)| !**c).map(|(r, _)| r);
    let stopped = verdicts(run_figures(truncated, config, candidate_id, bin_of).levels);
    for replay in &mut replays {
        let Some(load) = loads.get(replay.level as usize) else {
            continue;
        };
        let key = (load.label(), replay.bin);
        replay.full = full.get(&key).copied().unwrap_or(LevelVerdict::Undecided);
        replay.stopped = stopped.get(&key).copied().unwrap_or(LevelVerdict::Undecided);
    }
    replays
}

/// How often the truncated levels' verdicts equal the full-length ones, per level and per run
/// (a run agrees when every one of its levels does).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Agreement {
    pub runs: u64,
    pub runs_same: u64,
    pub levels: u64,
    pub levels_same: u64,
}

impl Agreement {
    /// One run's levels (every candidate's), as `(verdict, verdict)` pairs.
    pub fn add_run(&mut self, pairs: impl IntoIterator<Item = (LevelVerdict, LevelVerdict)>) {
        let (mut n, mut same) = (0, 0);
        for (a, b) in pairs {
            n += 1;
            same += u64::from(a == b);
        }
        self.runs += 1;
        self.runs_same += u64::from(n > 0 && same == n);
        self.levels += n;
        self.levels_same += same;
    }

    pub fn run_share(&self) -> f64 {
        self.runs_same as f64 / self.runs.max(1) as f64
    }

    pub fn level_share(&self) -> f64 {
        self.levels_same as f64 / self.levels.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LoadShape;
    use crate::run::{ErrorClass, Phase, join_repetition};

    const LEVELS: [u32; 2] = [1, 4];

    fn config() -> RunConfig {
        RunConfig {
            load: LoadShape::Levels {
                levels: LEVELS.to_vec(),
            },
            requests_per_level: Some(120),
            slo: Slo {
                ttft_ms: Some(35.0),
                target_attainment: Some(0.9),
                ..Slo::default()
            },
            stop_when_decided: true,
            ..RunConfig::default()
        }
    }

    /// A measured request of `level`, sent at `sent_ms`, first token after `ttft_ms`, ending 10
    /// ms later.
    fn request(level: u32, sent_ms: i64, ttft_ms: i64) -> RequestRecord {
        let at = |ms: i64| Some(ms * 1000).into();
        RequestRecord {
            phase: Phase::Throughput,
            repetition: join_repetition(level, 0, 0),
            concurrency: LEVELS[level as usize],
            sent_at_us: sent_ms * 1000,
            headers_us: at(ttft_ms),
            first_chunk_us: at(ttft_ms),
            first_content_us: at(ttft_ms),
            last_token_us: at(ttft_ms + 10),
            end_us: at(ttft_ms + 10),
            output_tokens: Some(2),
            chunks: vec![(ttft_ms * 1000, 1), ((ttft_ms + 10) * 1000, 1)].into(),
            ..RequestRecord::test_quality(&format!("c{level}-{sent_ms}"))
        }
    }

    /// Level 0: 120 requests one after another, every one in time (meets); level 1: 120 at
    /// four in flight, `met(i)` deciding which are in time.
    fn run(met: impl Fn(usize) -> bool) -> Vec<RequestRecord> {
        run_of(120, met)
    }

    fn run_of(level_1: usize, met: impl Fn(usize) -> bool) -> Vec<RequestRecord> {
        let mut records: Vec<RequestRecord> = (0..120).map(|i| request(0, i * 40, 10)).collect();
        records.extend((0..level_1).map(|i| request(1, 10_000 + (i as i64 / 4) * 40, if met(i) { 10 } else { 60 })));
        records
    }

    #[test]
    fn a_decided_level_is_cut_where_the_rule_decides_and_judged_like_a_stopped_level() {
        let records = run(|i| i % 2 == 0);
        let replays = replay_run(&records, &config(), 1, |_| None, InFlight::Counted);
        assert_eq!(replays.len(), 2);
        let meets = &replays[0];
        // Every request met: the exact 99 % lower end clears 90 % at 55 outcomes.
        assert_eq!(meets.decided.map(|d| (d.0, d.1)), Some((LevelVerdict::Meets, 55)));
        assert_eq!(
            (meets.counted, meets.kept),
            (120, 55),
            "one at a time: nothing in flight"
        );
        assert_eq!((meets.full, meets.stopped), (LevelVerdict::Meets, LevelVerdict::Meets));
        let misses = &replays[1];
        assert_eq!(misses.decided.map(|d| (d.0, d.1)), Some((LevelVerdict::Misses, 40)));
        // Four sent every 40 ms, a miss ending 70 ms after its send: the 40th outcome (a miss of
        // the tenth four) ends after the eleventh four were sent, and those four count too.
        assert_eq!(misses.kept, 44);
        assert!(misses.same());
        // Excluded instead of counted: a level cut mid-group keeps only what had ended.
        let records = run(|i| i % 2 == 0 && i < 100);
        let excluded = replay_run(&records, &config(), 1, |_| None, InFlight::Excluded);
        assert!(excluded.iter().all(|r| r.kept <= r.counted && r.same()), "{excluded:?}");
    }

    #[test]
    fn the_replay_follows_the_figure_not_the_rule_when_they_part() {
        // Level 1: every request in time for the first 60 (the rule says "meets" at 55), then
        // 140 misses the full-length level sees: its 95 % figure is below 90 %.
        let records = run_of(200, |i| i < 60);
        let replays = replay_run(&records, &config(), 1, |_| None, InFlight::Counted);
        let level = &replays[1];
        assert_eq!(level.decided.map(|d| d.0), Some(LevelVerdict::Meets));
        assert_eq!(level.stopped, LevelVerdict::Meets);
        assert_eq!(level.full, LevelVerdict::Misses);
        assert!(!level.same());
        let mut agreement = Agreement::default();
        agreement.add_run(replays.iter().map(|r| (r.full, r.stopped)));
        agreement.add_run(
            replay_run(&run(|i| i % 2 == 0), &config(), 1, |_| None, IN_FLIGHT)
                .iter()
                .map(|r| (r.full, r.stopped)),
        );
        assert_eq!(
            agreement,
            Agreement {
                runs: 2,
                runs_same: 1,
                levels: 4,
                levels_same: 3
            }
        );
    }

    #[test]
    fn a_level_never_decided_keeps_every_request_and_failures_count_as_misses() {
        // 90 % in time against a 90 % target: never decided.
        let mut records = run(|i| i % 10 != 0);
        let replays = replay_run(&records, &config(), 1, |_| None, IN_FLIGHT);
        assert_eq!(replays[1].decided, None);
        assert_eq!((replays[1].kept, replays[1].counted), (120, 120));
        assert_eq!(
            (replays[1].full, replays[1].stopped),
            (LevelVerdict::Undecided, LevelVerdict::Undecided)
        );
        // A failure is a miss; a failed attempt that will be retried is not an outcome.
        let mut failed = request(1, 0, 10);
        failed.error_class = Some(ErrorClass::TotalTimeout);
        assert!(!outcome_of(&failed, &config().slo, 0).unwrap().met);
        assert_eq!(outcome_of(&failed, &config().slo, 1), None);
        // Without a target there is nothing to decide.
        records.truncate(10);
        let mut no_target = config();
        no_target.slo.target_attainment = None;
        assert!(replay_run(&records, &no_target, 1, |_| None, IN_FLIGHT).is_empty());
    }
}
