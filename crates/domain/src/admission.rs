//! Which waiting runs may start now, under a global cap on executing runs and a cap on runs
//! per candidate. Pure: `domain::workers` feeds it what the database says is executing and
//! waiting (across every worker), and the claiming worker acts on the plan.
//!
//! Order is first come, first served (by run id, so a restart keeps each run's place):
//! - a run waits while any of its candidates is measured by `per_candidate` executing runs;
//! - a run never overtakes an earlier waiting run that needs one of its candidates, so a run
//!   on two candidates is not starved by a stream of runs on one of them;
//! - once an earlier run waits for a global slot, every later run waits too (no overtaking).
use std::collections::HashMap;

/// How many runs may execute at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Runs executing at once, whatever their candidates.
    pub max_runs: usize,
    /// Runs sending requests to one candidate at once. 1 keeps every figure undistorted; more
    /// lets runs share a server, and both runs are flagged.
    pub per_candidate: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            max_runs: 4,
            per_candidate: 1,
        }
    }
}

impl Caps {
    /// "at most 4 runs at once, 1 per candidate", for pages and logs.
    pub fn describe(&self) -> String {
        format!(
            "at most {} run{} at once, {} per candidate",
            self.max_runs,
            if self.max_runs == 1 { "" } else { "s" },
            self.per_candidate
        )
    }
}

/// A run known to the planner: its id and its candidates as (id, name); `None` while the
/// runner is still reading it from the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub run_id: i64,
    pub candidates: Option<Vec<(i64, String)>>,
}

/// Why a run cannot start yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// Executing runs already measure this candidate as often as allowed.
    Measuring { run_id: i64, candidate: String },
    /// An endpoint probe is checking this candidate (seconds); its requests would distort the
    /// run's figures and the run's load would fail the probe.
    Probing { candidate: String },
    /// An earlier waiting run needs this candidate first.
    QueuedFor { run_id: i64, candidate: String },
    /// The global cap is reached.
    Full { executing: usize, max: usize },
    /// An earlier run waits for a global slot (or is still being read) and goes first.
    Behind { run_id: i64 },
    /// An earlier run is still being read from the store (for milliseconds) and goes first.
    BehindPreparing { run_id: i64 },
    /// This run is still being read from the store.
    Preparing,
    /// Its next candidate must be measured by a worker carrying these labels, and none that
    /// could take it has.
    NeedsWorker { candidate: String, labels: String },
}

impl Blocker {
    /// The line shown on the run page and written to its event log.
    pub fn describe(&self) -> String {
        match self {
            Blocker::Measuring { run_id, candidate } => format!("waiting: run #{run_id} is measuring {candidate}"),
            Blocker::Probing { candidate } => format!("waiting: an endpoint probe is checking {candidate}"),
            Blocker::QueuedFor { run_id, candidate } => {
                format!("waiting: run #{run_id} is ahead in the queue for {candidate}")
            }
            Blocker::Full { executing, max } => format!(
                "waiting: {executing} run{} executing, at most {max} at once",
                if *executing == 1 { " is" } else { "s are" }
            ),
            Blocker::Behind { run_id } | Blocker::BehindPreparing { run_id } => {
                format!("waiting: run #{run_id} is ahead in the queue")
            }
            Blocker::Preparing => "waiting: being prepared".to_string(),
            Blocker::NeedsWorker { candidate, labels } => {
                format!("waiting: {candidate} needs a worker labelled {labels}")
            }
        }
    }

    /// Whether the wait is worth a line in the event log (preparing lasts milliseconds, and so
    /// does waiting behind a run that is only being prepared).
    pub fn is_worth_logging(&self) -> bool {
        !matches!(self, Blocker::Preparing | Blocker::BehindPreparing { .. })
    }
}

/// What to do with each waiting run, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Start,
    Wait(Blocker),
}

/// Decides, for every waiting run (in queue order), whether it starts now. `executing` are the
/// runs holding slots; `probing` the candidates an endpoint probe is checking now (no run
/// starts on them, whatever the per-candidate cap). Starting runs are counted against the caps
/// as the plan goes on.
pub fn plan(caps: Caps, executing: &[Entry], waiting: &[Entry], probing: &[i64]) -> Vec<Decision> {
    let mut running = executing.len();
    // Candidate → the executing runs measuring it, in start order.
    let mut measuring: HashMap<i64, Vec<i64>> = HashMap::new();
    for e in executing {
        for (c, _) in e.candidates.iter().flatten() {
            measuring.entry(*c).or_default().push(e.run_id);
        }
    }
    // Candidate → the first waiting run that needs it.
    let mut reserved: HashMap<i64, i64> = HashMap::new();
    // The first waiting run that holds up everyone after it.
    let mut head: Option<(i64, bool)> = None;
    let mut out = Vec::with_capacity(waiting.len());
    for w in waiting {
        let Some(candidates) = &w.candidates else {
            out.push(Decision::Wait(Blocker::Preparing));
            head.get_or_insert((w.run_id, true));
            continue;
        };
        let blocker = if let Some((run_id, preparing)) = head {
            Some(if preparing {
                Blocker::BehindPreparing { run_id }
            } else {
                Blocker::Behind { run_id }
            })
        } else if let Some((run_id, name)) = candidates.iter().find_map(|(c, name)| {
            measuring
                .get(c)
                .filter(|runs| runs.len() >= caps.per_candidate.max(1))
                .map(|runs| (runs[0], name))
        }) {
            Some(Blocker::Measuring {
                run_id,
                candidate: name.clone(),
            })
        } else if let Some((_, name)) = candidates.iter().find(|(c, _)| probing.contains(c)) {
            Some(Blocker::Probing {
                candidate: name.clone(),
            })
        } else if let Some((run_id, name)) = candidates
            .iter()
            .find_map(|(c, name)| reserved.get(c).map(|r| (*r, name)))
        {
            Some(Blocker::QueuedFor {
                run_id,
                candidate: name.clone(),
            })
        } else if running >= caps.max_runs.max(1) {
            head = Some((w.run_id, false));
            Some(Blocker::Full {
                executing: running,
                max: caps.max_runs.max(1),
            })
        } else {
            None
        };
        match blocker {
            None => {
                running += 1;
                for (c, _) in candidates {
                    measuring.entry(*c).or_default().push(w.run_id);
                }
                out.push(Decision::Start);
            }
            Some(b) => {
                for (c, _) in candidates {
                    reserved.entry(*c).or_insert(w.run_id);
                }
                out.push(Decision::Wait(b));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(run_id: i64, candidates: &[i64]) -> Entry {
        Entry {
            run_id,
            candidates: Some(candidates.iter().map(|c| (*c, format!("m{c}"))).collect()),
        }
    }

    const ONE_EACH: Caps = Caps {
        max_runs: 4,
        per_candidate: 1,
    };

    #[test]
    fn a_second_run_on_a_candidate_waits_for_the_first() {
        let d = plan(ONE_EACH, &[e(1, &[7])], &[e(2, &[7]), e(3, &[8])], &[]);
        assert_eq!(
            d,
            [
                Decision::Wait(Blocker::Measuring {
                    run_id: 1,
                    candidate: "m7".into()
                }),
                Decision::Start
            ]
        );
        assert_eq!(
            Blocker::Measuring {
                run_id: 12,
                candidate: "swift-7b".into()
            }
            .describe(),
            "waiting: run #12 is measuring swift-7b"
        );
    }

    #[test]
    fn runs_starting_in_one_plan_count_against_the_caps() {
        let d = plan(ONE_EACH, &[], &[e(1, &[7]), e(2, &[7]), e(3, &[8])], &[]);
        assert_eq!(d[0], Decision::Start);
        assert!(matches!(d[1], Decision::Wait(Blocker::Measuring { run_id: 1, .. })));
        assert_eq!(d[2], Decision::Start);
    }

    #[test]
    fn a_later_run_never_overtakes_an_earlier_one_on_a_shared_candidate() {
        // Run 2 needs 7 and 8; 7 is busy. Run 3 needs only 8, which is free, but 2 is first.
        let d = plan(ONE_EACH, &[e(1, &[7])], &[e(2, &[7, 8]), e(3, &[8]), e(4, &[9])], &[]);
        assert!(matches!(d[0], Decision::Wait(Blocker::Measuring { run_id: 1, .. })));
        assert_eq!(
            d[1],
            Decision::Wait(Blocker::QueuedFor {
                run_id: 2,
                candidate: "m8".into()
            })
        );
        assert_eq!(d[2], Decision::Start, "an unrelated candidate is not held up");
    }

    #[test]
    fn the_global_cap_is_first_come_first_served() {
        let caps = Caps {
            max_runs: 2,
            per_candidate: 1,
        };
        let d = plan(caps, &[e(1, &[1]), e(2, &[2])], &[e(3, &[3]), e(4, &[4])], &[]);
        assert_eq!(
            d,
            [
                Decision::Wait(Blocker::Full { executing: 2, max: 2 }),
                Decision::Wait(Blocker::Behind { run_id: 3 })
            ]
        );
        assert_eq!(
            Blocker::Full { executing: 2, max: 2 }.describe(),
            "waiting: 2 runs are executing, at most 2 at once"
        );
    }

    #[test]
    fn a_raised_per_candidate_cap_lets_runs_share_a_candidate() {
        let caps = Caps {
            max_runs: 8,
            per_candidate: 2,
        };
        let d = plan(caps, &[e(1, &[7])], &[e(2, &[7]), e(3, &[7])], &[]);
        assert_eq!(d[0], Decision::Start);
        assert!(matches!(d[1], Decision::Wait(Blocker::Measuring { run_id: 1, .. })));
    }

    #[test]
    fn a_probe_holds_its_candidate_whatever_the_per_candidate_cap() {
        let caps = Caps {
            max_runs: 8,
            per_candidate: 4,
        };
        let d = plan(caps, &[], &[e(1, &[7]), e(2, &[8]), e(3, &[7, 9])], &[7]);
        assert_eq!(d[0], Decision::Wait(Blocker::Probing { candidate: "m7".into() }));
        assert_eq!(d[1], Decision::Start);
        assert!(matches!(d[2], Decision::Wait(Blocker::Probing { .. })));
        assert_eq!(
            Blocker::Probing { candidate: "m7".into() }.describe(),
            "waiting: an endpoint probe is checking m7"
        );
    }

    #[test]
    fn a_run_still_being_read_holds_its_place() {
        let preparing = Entry {
            run_id: 2,
            candidates: None,
        };
        let d = plan(ONE_EACH, &[], &[preparing, e(3, &[8])], &[]);
        assert_eq!(
            d,
            [
                Decision::Wait(Blocker::Preparing),
                Decision::Wait(Blocker::BehindPreparing { run_id: 2 })
            ]
        );
        assert!(!Blocker::BehindPreparing { run_id: 2 }.is_worth_logging());
    }
}
