//! Stop when decided against fixed length: the same 3-candidate × 6-level run measured both
//! ways, repeatedly; how often the verdicts agree, how much wall time is saved and where the
//! stopped run's time goes.
//!
//! `cargo bench --bench decide` (env `BAKEOFF_DECIDE_REPEATS`, default 20)
//!
//! Candidates: three truth servers (`mock::truth`) of 2, 6 and 12 slots, 40 ms of service each;
//! levels: concurrency 1, 2, 4, 8, 16, 32, 120 requests each; SLO: TTFT ≤ first token + 25 ms
//! for 90 % of requests. A level's verdict (`domain::capacity::LevelVerdict`) is its attainment's
//! 95 % interval as every page shows it (Wilson's and batch means' hull) against the target.
//! Three agreements, each measuring something else:
//!
//! - **the rule** (paired, `domain::decide`): each fixed-length run's own levels replayed through
//!   the stopping rule, cut where it decides and judged as a stopped level is, against the same
//!   levels at full length — same requests, so only the rule can make them differ;
//! - **stopped vs fixed**: the run with `stop_when_decided` against the fixed-length run of the
//!   same repeat — two independent runs: the rule plus the run-to-run noise;
//! - **fixed vs fixed**: each fixed-length run against the previous repeat's — the noise alone.
use std::collections::BTreeMap;
use std::time::Instant;

use bakeoff::domain::calibers::run_figures;
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::capacity::LevelVerdict;
use bakeoff::domain::decide::{Agreement, IN_FLIGHT, LevelReplay, replay_run};
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::run::{NewRun, RunConfig, Slo};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::endpoint_measure::synthetic_evalset;
use bakeoff::engine::run::executor::execute;
use bakeoff::engine::wire::client::wall_clock_us;
use bakeoff::mock::MockConfig;
use bakeoff::mock::truth::TruthServer;
use bakeoff::store::DynStore;

const LEVELS: [u32; 6] = [1, 2, 4, 8, 16, 32];
const REQUESTS: u32 = 120;
const SLOTS: [u32; 3] = [2, 6, 12];
const TARGET: f64 = 0.9;

fn server(slots: u32) -> TruthServer {
    TruthServer {
        slots,
        first_token_ms: 10.0,
        inter_token_ms: 15.0,
        tokens: 3,
    }
}

fn config(stop_when_decided: bool) -> RunConfig {
    RunConfig {
        concurrency: 1,
        warmup_requests: 2,
        max_tokens: Some(3),
        timeout_secs: 30,
        retries: 0,
        stream: true,
        staged_rollout: false,
        load: LoadShape::Levels {
            levels: LEVELS.to_vec(),
        },
        requests_per_level: Some(REQUESTS),
        slo: Slo {
            ttft_ms: Some(35.0),
            target_attainment: Some(TARGET),
            ..Slo::default()
        },
        stop_when_decided,
        // Both ways measure every level, so that their verdicts compare level by level.
        measure_past_saturation: true,
        ..RunConfig::default()
    }
}

/// One run of the plan.
struct Measured {
    wall_s: f64,
    /// Every (candidate, level) verdict, candidate by candidate.
    verdicts: Vec<LevelVerdict>,
    /// Each candidate's levels replayed through the stopping rule (on a stopped run: its own
    /// decisions, for the time they took).
    replays: Vec<Vec<LevelReplay>>,
    /// Where its time went, in seconds.
    time: TimeSplit,
}

/// A run's wall time, split.
#[derive(Debug, Default, Clone, Copy)]
struct TimeSplit {
    /// From a candidate's start (the run's, or the previous candidate's last answer) to its
    /// first level's first send: reading the run, warm-ups.
    candidate_start: f64,
    /// Decided levels: from the first send to the outcome that decided.
    deciding: f64,
    /// Decided levels: from the decision to the level's last answer (requests in flight).
    draining: f64,
    /// Levels never decided: the whole level.
    undecided: f64,
    /// From a level's last answer to the next level's first send.
    between_levels: f64,
    /// From the last candidate's last answer to the run's end.
    after: f64,
}

impl TimeSplit {
    fn add(&mut self, o: &TimeSplit) {
        self.candidate_start += o.candidate_start;
        self.deciding += o.deciding;
        self.draining += o.draining;
        self.undecided += o.undecided;
        self.between_levels += o.between_levels;
        self.after += o.after;
    }

    fn describe(&self, wall: f64) -> String {
        let pct = |x: f64| 100.0 * x / wall.max(1e-9);
        format!(
            "candidate start (run read, warm-ups) {:.1} s ({:.0} %), deciding {:.1} s ({:.0} %), draining in-flight \
             {:.1} s ({:.0} %), undecided levels {:.1} s ({:.0} %), between levels {:.1} s ({:.0} %), after the last \
             level {:.1} s ({:.0} %)",
            self.candidate_start,
            pct(self.candidate_start),
            self.deciding,
            pct(self.deciding),
            self.draining,
            pct(self.draining),
            self.undecided,
            pct(self.undecided),
            self.between_levels,
            pct(self.between_levels),
            self.after,
            pct(self.after)
        )
    }
}

/// Runs the plan once.
async fn measure(store: &DynStore, version: i64, candidates: &[i64], stop: bool) -> Measured {
    let config = config(stop);
    let run_id = store
        .create_run(&NewRun {
            name: format!("decide bench, stop when decided: {stop}"),
            evalset_version_id: version,
            candidate_ids: candidates.to_vec(),
            config: config.clone(),
        })
        .await
        .expect("the run stored");
    let started = Instant::now();
    let started_us = wall_clock_us();
    execute(store.clone(), run_id, Cancel::never())
        .await
        .expect("the run ran");
    let wall_s = started.elapsed().as_secs_f64();
    let ended_us = wall_clock_us();
    let records = store.list_request_records(run_id).await.expect("the records");
    let verdicts = candidates
        .iter()
        .flat_map(|&id| {
            run_figures(&records, &config, id, |_| None)
                .levels
                .iter()
                .map(|l| LevelVerdict::by(l.slo_attainment_interval, TARGET))
                .collect::<Vec<_>>()
        })
        .collect();
    let replays: Vec<Vec<LevelReplay>> = candidates
        .iter()
        .map(|&id| replay_run(&records, &config, id, |_| None, IN_FLIGHT))
        .collect();
    let time = split(&replays, started_us, ended_us);
    Measured {
        wall_s,
        verdicts,
        replays,
        time,
    }
}

fn split(replays: &[Vec<LevelReplay>], started_us: i64, ended_us: i64) -> TimeSplit {
    let s = |us: i64| us as f64 / 1e6;
    let mut t = TimeSplit::default();
    let mut previous_end = started_us;
    for levels in replays {
        for (i, l) in levels.iter().enumerate() {
            if i == 0 {
                t.candidate_start += s(l.first_sent_us - previous_end);
            } else {
                t.between_levels += s(l.first_sent_us - previous_end);
            }
            match l.decided {
                Some((_, _, at)) => {
                    t.deciding += s(at - l.first_sent_us);
                    t.draining += s(l.last_ended_us - at);
                }
                None => t.undecided += s(l.last_ended_us - l.first_sent_us),
            }
            previous_end = l.last_ended_us;
        }
    }
    t.after = s(ended_us - previous_end);
    t
}

/// Per (candidate, level) over the stopped runs: time to decide, draining, requests kept.
#[derive(Default)]
struct LevelTimes {
    runs: u64,
    decided: u64,
    deciding_s: f64,
    draining_s: f64,
    whole_s: f64,
    kept: u64,
    counted_at_decision: u64,
}

fn main() {
    let repeats: u64 = std::env::var("BAKEOFF_DECIDE_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let store = bakeoff::store::connect(&url).await.expect("the store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let mock = bakeoff::mock::spawn(
            MockConfig {
                profiles: SLOTS.iter().map(|&s| server(s).profile(&format!("slots-{s}"))).collect(),
                answer_keys: Vec::new(),
                seed: 5,
            },
            listener,
        )
        .await
        .expect("the mock");
        let mut candidates = Vec::new();
        for s in SLOTS {
            let spec = CandidateSpec::openai_chat(format!("{s} slots"), mock.base_url(), format!("slots-{s}"));
            let new = bakeoff::domain::credentials::check_new(bakeoff::domain::accounts::Role::Admin, spec, false)
                .expect("an admin may store it");
            candidates.push(store.create_candidate(&new).await.expect("the candidate"));
        }
        let workload = synthetic_evalset(&[16], 40, 3).expect("the workload");
        let version = store.save_evalset_version(&workload).await.expect("the workload stored");
        let (mut rule, mut independent, mut noise) = (Agreement::default(), Agreement::default(), Agreement::default());
        let (mut fixed_s, mut decided_s) = (0.0, 0.0);
        let (mut fixed_time, mut decided_time) = (TimeSplit::default(), TimeSplit::default());
        let mut opposite = 0u64;
        let mut per_level: BTreeMap<(u32, u32), LevelTimes> = BTreeMap::new();
        let mut previous: Option<Vec<LevelVerdict>> = None;
        for repeat in 0..repeats {
            let fixed = measure(&store, version, &candidates, false).await;
            let decided = measure(&store, version, &candidates, true).await;
            let paired: Vec<&LevelReplay> = fixed.replays.iter().flatten().collect();
            rule.add_run(paired.iter().map(|r| (r.full, r.stopped)));
            independent.add_run(fixed.verdicts.iter().copied().zip(decided.verdicts.iter().copied()));
            opposite += fixed
                .verdicts
                .iter()
                .zip(&decided.verdicts)
                .filter(|(a, b)| a != b && **a != LevelVerdict::Undecided && **b != LevelVerdict::Undecided)
                .count() as u64;
            if let Some(before) = &previous {
                noise.add_run(before.iter().copied().zip(fixed.verdicts.iter().copied()));
            }
            for (c, levels) in decided.replays.iter().enumerate() {
                for l in levels {
                    let e = per_level.entry((SLOTS[c], LEVELS[l.level as usize])).or_default();
                    e.runs += 1;
                    e.kept += l.counted;
                    e.whole_s += (l.last_ended_us - l.first_sent_us) as f64 / 1e6;
                    if let Some((_, n, at)) = l.decided {
                        e.decided += 1;
                        e.counted_at_decision += n;
                        e.deciding_s += (at - l.first_sent_us) as f64 / 1e6;
                        e.draining_s += (l.last_ended_us - at) as f64 / 1e6;
                    }
                }
            }
            fixed_s += fixed.wall_s;
            decided_s += decided.wall_s;
            fixed_time.add(&fixed.time);
            decided_time.add(&decided.time);
            let words = |v: &[LevelVerdict]| v.iter().map(LevelVerdict::as_str).collect::<Vec<_>>().join(" ");
            println!(
                "repeat {}: fixed {:.1} s, stopped when decided {:.1} s; the rule on the fixed run's own requests: {} of {} \
                 levels the same; stopped vs fixed: {} of {}\n  fixed   {}\n  stopped {}\n  replay  {}\n  kept    {}",
                repeat + 1,
                fixed.wall_s,
                decided.wall_s,
                paired.iter().filter(|r| r.same()).count(),
                paired.len(),
                fixed.verdicts.iter().zip(&decided.verdicts).filter(|(a, b)| a == b).count(),
                fixed.verdicts.len(),
                words(&fixed.verdicts),
                words(&decided.verdicts),
                words(&paired.iter().map(|r| r.stopped).collect::<Vec<_>>()),
                paired.iter().map(|r| r.kept.to_string()).collect::<Vec<_>>().join(" "),
            );
            previous = Some(fixed.verdicts);
        }
        println!("\nWhere the stopped runs' time went, per (slots, concurrency), mean over {repeats} runs:");
        println!("slots  c  decided  outcomes@decision  to decide s  draining s  level s  requests counted");
        for ((slots, c), t) in &per_level {
            let d = t.decided.max(1) as f64;
            println!(
                "{slots:>5} {c:>2}  {:>2}/{:<2}   {:>17.1}  {:>11.2}  {:>10.2}  {:>7.2}  {:>16.1}",
                t.decided,
                t.runs,
                t.counted_at_decision as f64 / d,
                t.deciding_s / d,
                t.draining_s / d,
                t.whole_s / t.runs.max(1) as f64,
                t.kept as f64 / t.runs.max(1) as f64
            );
        }
        println!("fixed-length runs, {fixed_s:.1} s: {}", fixed_time.describe(fixed_s));
        println!("stopped runs,      {decided_s:.1} s: {}", decided_time.describe(decided_s));
        let pct = |a: &Agreement| (100.0 * a.run_share(), 100.0 * a.level_share());
        let (rr, rl) = pct(&rule);
        let (ir, il) = pct(&independent);
        let (nr, nl) = pct(&noise);
        println!(
            "\n{repeats} repeats of 3 candidates × 6 levels:\n\
             - the rule (each fixed run's own requests, replayed and cut where the rule decides): every verdict the same in \
             {} of {} runs ({rr:.1} %), {} of {} levels ({rl:.1} %)\n\
             - stopped vs fixed (independent runs: the rule and the run-to-run noise): {} of {} runs ({ir:.1} %), {} of {} \
             levels ({il:.1} %), opposite verdicts (meets vs misses) at {opposite} levels\n\
             - fixed vs fixed (consecutive repeats: the noise alone): {} of {} runs ({nr:.1} %), {} of {} levels ({nl:.1} %)\n\
             - wall time: fixed {fixed_s:.1} s, stopped when decided {decided_s:.1} s: {:.1} % less",
            rule.runs_same,
            rule.runs,
            rule.levels_same,
            rule.levels,
            independent.runs_same,
            independent.runs,
            independent.levels_same,
            independent.levels,
            noise.runs_same,
            noise.runs,
            noise.levels_same,
            noise.levels,
            100.0 * (1.0 - decided_s / fixed_s.max(1e-9))
        );
        mock.shutdown().await.expect("the mock stopped");
    });
}
