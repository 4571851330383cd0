//! Measurement workers coordinated through the database (docs/workers.md). Every process that
//! measures — `serve`'s embedded worker, each `bakeoff worker` — keeps a heartbeat row, and runs
//! are measured in *units* taken under leases. Pure: what a worker takes next, given what the
//! database holds (read in one transaction by `Store::claim_unit`).
//!
//! A run is *admitted* (holds its slot under the caps, across every worker) while it has a unit
//! not done. Its units go in order: one per candidate — that candidate's staged start, warm-ups
//! and every level, so each per-level figure comes from one client — then the closing step
//! (server-side token counts, the harness report, judging, the final status). A unit's lease is
//! renewed by its worker's heartbeat; a lease that runs out (the worker was killed or cut off)
//! lets another worker take the unit over, and it resumes from the stored records.
use std::collections::HashMap;

use crate::Timestamp;
use crate::admission::{self, Blocker, Caps, Entry};
use crate::calibers::HarnessReport;

/// The longest label accepted.
const LABEL_MAX: usize = 40;

/// Labels as typed ("gpu-a, eu"): split on commas and spaces, lowercased, sorted, without
/// repeats. Each is letters, digits, `.`, `_` or `-`, at most 40 characters.
pub fn parse_labels(text: &str) -> Result<Vec<String>, String> {
    let mut labels = Vec::new();
    for raw in text
        .split([',', ' ', '\t', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        let label = raw.to_ascii_lowercase();
        let valid = label.len() <= LABEL_MAX
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid {
            return Err(format!(
                "label {raw:?}: use letters, digits, '.', '_' or '-' (at most {LABEL_MAX} characters)"
            ));
        }
        labels.push(label);
    }
    labels.sort();
    labels.dedup();
    Ok(labels)
}

/// Labels as stored and shown: "eu,gpu-a".
pub fn labels_text(labels: &[String]) -> String {
    labels.join(",")
}

/// Labels as stored ([`labels_text`]) read back.
pub fn stored_labels(text: &str) -> Vec<String> {
    text.split(',').filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// Whether a worker carrying `worker` labels may measure what requires `required`.
pub fn carries(worker: &[String], required: &[String]) -> bool {
    required.iter().all(|r| worker.contains(r))
}

/// Where a unit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitStatus {
    Queued,
    Leased,
    Done,
}

impl UnitStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            UnitStatus::Queued => "queued",
            UnitStatus::Leased => "leased",
            UnitStatus::Done => "done",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "queued" => Some(UnitStatus::Queued),
            "leased" => Some(UnitStatus::Leased),
            "done" => Some(UnitStatus::Done),
            _ => None,
        }
    }
}

/// One unit of an admitted run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunUnit {
    pub run_id: i64,
    /// Its place in the run: candidates in the run's order, then the closing step.
    pub seq: u32,
    /// The candidate measured; None for the closing step.
    pub candidate_id: Option<i64>,
    /// Its share of the candidate's load, `shard` of `shards` (0 of 1 unless the load is split
    /// over several clients).
    pub shard: u32,
    pub shards: u32,
    pub status: UnitStatus,
    /// The worker that holds (or last held) it.
    pub worker: Option<String>,
    /// When its lease runs out unless renewed (the database's clock).
    pub lease_until: Option<Timestamp>,
    /// How many times it was taken: more than one means a worker took it over.
    pub claims: u32,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// The harness report of the worker that measured it (candidate units).
    pub harness: Option<HarnessReport>,
    /// A split load's share: its worker's clock minus the database's (ms), and the round trip
    /// that offset was measured over (its uncertainty is half of it).
    pub clock_offset_ms: Option<f64>,
    pub clock_rtt_ms: Option<f64>,
}

impl RunUnit {
    /// Whether a worker may take it now: nobody holds it, or its holder's lease ran out.
    pub fn is_free(&self, now: Timestamp) -> bool {
        match self.status {
            UnitStatus::Queued => true,
            UnitStatus::Leased => self.lease_until.is_none_or(|t| t.0 < now.0),
            UnitStatus::Done => false,
        }
    }
}

/// One unit as a run is planned: the candidate (None: the closing step) and its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitPlan {
    pub candidate_id: Option<i64>,
    pub shard: u32,
    pub shards: u32,
}

/// The units a run is measured in, by seq: each candidate in order — `clients` shares of it
/// when its load is split — then the closing step.
pub fn units_of(candidates: &[(i64, String)], clients: u32) -> Vec<UnitPlan> {
    let shards = clients.max(1);
    candidates
        .iter()
        .flat_map(|(id, _)| {
            (0..shards).map(move |shard| UnitPlan {
                candidate_id: Some(*id),
                shard,
                shards,
            })
        })
        .chain([UnitPlan {
            candidate_id: None,
            shard: 0,
            shards: 1,
        }])
        .collect()
}

/// A worker as its heartbeat row shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerStatus {
    pub name: String,
    pub labels: Vec<String>,
    pub version: String,
    pub host: String,
    pub pid: u32,
    /// Units it measures at once, at most.
    pub capacity: u32,
    /// `serve`'s own worker rather than a `bakeoff worker` process.
    pub embedded: bool,
    pub started_at: Timestamp,
    pub heartbeat_at: Timestamp,
    /// How long its leases last: silent for longer, it has lost them.
    pub lease_ms: i64,
    pub units_held: u32,
    /// Its process's CPU time over wall time since the previous heartbeat (1.0 = one core).
    pub cpu_share: Option<f64>,
    /// The host's one-minute load average.
    pub load_avg: Option<f64>,
}

impl WorkerStatus {
    /// Whether it beat within its lease of `now` (the database's clock): a worker silent for
    /// longer has lost its leases.
    pub fn is_live(&self, now: Timestamp) -> bool {
        now.0 - self.heartbeat_at.0 <= self.lease_ms
    }
}

/// A queued or running run, as the claim reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRun {
    pub run_id: i64,
    /// Its candidates (id, name), in the run's order.
    pub candidates: Vec<(i64, String)>,
    /// Clients each candidate's load is split over (1: one).
    pub clients: u32,
    /// Its units, by seq (none before it is first admitted).
    pub units: Vec<RunUnit>,
}

impl OpenRun {
    /// Holds a slot: some unit is not done.
    pub fn is_admitted(&self) -> bool {
        self.units.iter().any(|u| u.status != UnitStatus::Done)
    }

    /// The units to measure next, (seq, plan): every share not done of the first candidate
    /// with one not done (the shares of a split load go at once), else the closing step.
    fn next_units(&self) -> Vec<(u32, UnitPlan)> {
        let pending: Vec<(u32, UnitPlan)> = units_of(&self.candidates, self.clients)
            .into_iter()
            .enumerate()
            .map(|(seq, plan)| (seq as u32, plan))
            .filter(|(seq, _)| !self.units.iter().any(|u| u.seq == *seq && u.status == UnitStatus::Done))
            .collect();
        let Some(&(_, first)) = pending.first() else {
            return Vec::new();
        };
        pending
            .into_iter()
            .filter(|(_, p)| p.candidate_id == first.candidate_id)
            .collect()
    }

    fn name_of(&self, candidate: Option<i64>) -> String {
        match candidate {
            None => "the closing step".to_string(),
            Some(id) => self
                .candidates
                .iter()
                .find(|(c, _)| *c == id)
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| format!("candidate #{id}")),
        }
    }
}

/// What the claim reads, in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Coordination {
    pub caps: Caps,
    /// The database's clock.
    pub now: Timestamp,
    /// Every queued or running run, by id.
    pub runs: Vec<OpenRun>,
    /// Labels a worker must carry, by candidate (candidates that need none are absent).
    pub labels: HashMap<i64, Vec<String>>,
}

/// The worker asking for a unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimant {
    pub name: String,
    pub labels: Vec<String>,
    /// Units it may still take now (its capacity less what it holds); 0 only looks.
    pub free: usize,
    /// Candidates its process is probing now (no run starts on them).
    pub probing: Vec<i64>,
    /// Units it measures now, (run, seq): a lease under its name that is not one of them is
    /// left from before its restart, and taken back at once.
    pub holding: Vec<(i64, u32)>,
    /// Takes units of these runs only (a process measuring the runs it was asked to, like
    /// `bakeoff run start`); None takes any (`serve`'s embedded worker, `bakeoff worker`).
    pub only_runs: Option<Vec<i64>>,
}

/// A unit the worker takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub run_id: i64,
    pub seq: u32,
    pub unit: UnitPlan,
    /// The run was waiting and is admitted now: its units are to be written.
    pub admits: Option<Vec<UnitPlan>>,
    /// The worker whose lease ran out, when the unit is taken over.
    pub taken_over_from: Option<String>,
}

/// The queue as one claim saw it, for pages and event logs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueSnapshot {
    pub caps: Caps,
    /// Admitted runs: (run id, its candidates as (id, name)), by run id.
    pub executing: Vec<(i64, Vec<(i64, String)>)>,
    /// Runs waiting for a slot, with why, in the order they will start.
    pub waiting: Vec<(i64, Blocker)>,
    /// Admitted runs whose next unit waits for a worker with labels: (run id, why).
    pub unplaced: Vec<(i64, Blocker)>,
}

/// What a claim decides.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    pub claim: Option<Claim>,
    pub queue: QueueSnapshot,
    /// Runs admitted now that share a candidate with an executing run (only when the
    /// per-candidate cap is above 1): (run admitted, run executing, candidate name).
    pub sharing: Vec<(i64, i64, String)>,
}

/// Decides which unit `me` takes: first the next unit of an admitted run that is free (or its
/// own, left from before a restart) and that it carries the labels for, in run order; else the
/// first waiting run the caps let start (`admission::plan`, over every worker's runs) whose
/// first unit it may take. Caps are counted over admitted runs, whoever measures them.
pub fn decide(c: &Coordination, me: &Claimant) -> Decision {
    let needs = |candidate: Option<i64>| -> &[String] {
        candidate
            .and_then(|id| c.labels.get(&id))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    };
    let mine = |run_id: i64| me.only_runs.as_ref().is_none_or(|only| only.contains(&run_id));
    let takes = |run_id: i64, candidate: Option<i64>| {
        me.free > 0
            && mine(run_id)
            && carries(&me.labels, needs(candidate))
            && candidate.is_none_or(|id| !me.probing.contains(&id))
    };
    let needs_worker = |run: &OpenRun, candidate: Option<i64>| Blocker::NeedsWorker {
        candidate: run.name_of(candidate),
        labels: labels_text(needs(candidate)),
    };
    let (admitted, waiting): (Vec<&OpenRun>, Vec<&OpenRun>) = c.runs.iter().partition(|r| r.is_admitted());
    let mut out = Decision {
        queue: QueueSnapshot {
            caps: c.caps,
            executing: admitted.iter().map(|r| (r.run_id, r.candidates.clone())).collect(),
            ..QueueSnapshot::default()
        },
        ..Decision::default()
    };
    for run in &admitted {
        let next = run.next_units();
        let Some(&(_, first)) = next.first() else {
            continue;
        };
        let candidate = first.candidate_id;
        // A worker measures one share of a split load at most: N shares, N clients.
        let holds_a_share = next.iter().any(|(seq, _)| me.holding.contains(&(run.run_id, *seq)));
        let free = next.iter().find(|(seq, _)| {
            let unit = run.units.iter().find(|u| u.seq == *seq);
            let own_stale = unit.is_some_and(|u| {
                u.status == UnitStatus::Leased
                    && u.worker.as_deref() == Some(me.name.as_str())
                    && !me.holding.contains(&(run.run_id, *seq))
            });
            unit.is_none_or(|u| u.is_free(c.now)) || own_stale
        });
        let Some(&(seq, plan)) = free else {
            continue;
        };
        if out.claim.is_none() && !holds_a_share && takes(run.run_id, candidate) {
            let unit = run.units.iter().find(|u| u.seq == seq);
            out.claim = Some(Claim {
                run_id: run.run_id,
                seq,
                unit: plan,
                admits: None,
                taken_over_from: unit
                    .filter(|u| u.status == UnitStatus::Leased)
                    .and_then(|u| u.worker.clone()),
            });
        } else if !carries(&me.labels, needs(candidate)) {
            out.queue.unplaced.push((run.run_id, needs_worker(run, candidate)));
        }
    }
    let entry = |r: &OpenRun| Entry {
        run_id: r.run_id,
        candidates: Some(r.candidates.clone()),
    };
    let executing: Vec<Entry> = admitted.iter().map(|r| entry(r)).collect();
    let queued: Vec<Entry> = waiting.iter().map(|r| entry(r)).collect();
    let plan = admission::plan(c.caps, &executing, &queued, &me.probing);
    for (run, decision) in waiting.iter().zip(plan) {
        match decision {
            admission::Decision::Wait(blocker) => out.queue.waiting.push((run.run_id, blocker)),
            admission::Decision::Start => {
                let Some(&(seq, first)) = run.next_units().first() else {
                    continue;
                };
                let candidate = first.candidate_id;
                if out.claim.is_none() && takes(run.run_id, candidate) {
                    for (id, name) in &run.candidates {
                        for other in admitted.iter().filter(|o| o.candidates.iter().any(|(c, _)| c == id)) {
                            out.sharing.push((run.run_id, other.run_id, name.clone()));
                        }
                    }
                    out.queue.executing.push((run.run_id, run.candidates.clone()));
                    out.claim = Some(Claim {
                        run_id: run.run_id,
                        seq,
                        unit: first,
                        admits: Some(units_of(&run.candidates, run.clients)),
                        taken_over_from: None,
                    });
                } else if !carries(&me.labels, needs(candidate)) {
                    out.queue.waiting.push((run.run_id, needs_worker(run, candidate)));
                } else {
                    // Free to start: this worker (when it has room) or another takes it next.
                    out.queue.waiting.push((run.run_id, Blocker::Preparing));
                }
            }
        }
    }
    out.queue.executing.sort_by_key(|(id, _)| *id);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(run_id: i64, candidates: &[i64], units: &[(u32, UnitStatus, Option<&str>, i64)]) -> OpenRun {
        let candidates: Vec<(i64, String)> = candidates.iter().map(|c| (*c, format!("m{c}"))).collect();
        let all = units_of(&candidates, 1);
        OpenRun {
            run_id,
            clients: 1,
            units: units
                .iter()
                .map(|&(seq, status, worker, lease_until)| RunUnit {
                    run_id,
                    seq,
                    candidate_id: all[seq as usize].candidate_id,
                    shard: 0,
                    shards: 1,
                    status,
                    worker: worker.map(str::to_string),
                    lease_until: Some(Timestamp(lease_until)),
                    claims: 1,
                    started_at: None,
                    finished_at: None,
                    harness: None,
                    clock_offset_ms: None,
                    clock_rtt_ms: None,
                })
                .collect(),
            candidates,
        }
    }

    fn coordination(runs: Vec<OpenRun>) -> Coordination {
        Coordination {
            caps: Caps::default(),
            now: Timestamp(1_000),
            runs,
            labels: HashMap::new(),
        }
    }

    fn me(name: &str, labels: &[&str]) -> Claimant {
        Claimant {
            name: name.into(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            free: 1,
            probing: vec![],
            holding: vec![],
            only_runs: None,
        }
    }

    #[test]
    fn labels_are_normalised_and_checked() {
        assert_eq!(parse_labels(" GPU-a, eu eu ").unwrap(), ["eu", "gpu-a"]);
        assert_eq!(parse_labels("").unwrap(), Vec::<String>::new());
        let err = parse_labels("eu, gpu/a").unwrap_err();
        assert!(err.contains("gpu/a"), "{err}");
        assert!(carries(&["eu".into(), "gpu-a".into()], &["gpu-a".into()]));
        assert!(!carries(&["eu".into()], &["gpu-a".into()]));
    }

    #[test]
    fn a_waiting_run_is_admitted_with_all_its_units() {
        let d = decide(&coordination(vec![run(1, &[7, 8], &[])]), &me("w1", &[]));
        let claim = d.claim.unwrap();
        assert_eq!((claim.run_id, claim.seq, claim.unit.candidate_id), (1, 0, Some(7)));
        let admits: Vec<Option<i64>> = claim.admits.unwrap().iter().map(|u| u.candidate_id).collect();
        assert_eq!(admits, [Some(7), Some(8), None]);
        assert_eq!(
            d.queue.executing,
            [(1, vec![(7, "m7".to_string()), (8, "m8".to_string())])]
        );
    }

    #[test]
    fn an_admitted_runs_next_unit_goes_first_and_a_live_lease_is_left_alone() {
        let c = coordination(vec![
            run(
                1,
                &[7, 8],
                &[(0, UnitStatus::Done, Some("w1"), 0), (1, UnitStatus::Queued, None, 0)],
            ),
            run(2, &[9], &[(0, UnitStatus::Leased, Some("w2"), 5_000)]),
            run(3, &[10], &[]),
        ]);
        let claim = decide(&c, &me("w3", &[])).claim.unwrap();
        assert_eq!(
            (claim.run_id, claim.seq, claim.unit.candidate_id, claim.admits),
            (1, 1, Some(8), None)
        );
    }

    #[test]
    fn a_lease_that_ran_out_is_taken_over_and_an_own_stale_one_at_once() {
        let c = coordination(vec![run(2, &[9], &[(0, UnitStatus::Leased, Some("w2"), 999)])]);
        let claim = decide(&c, &me("w3", &[])).claim.unwrap();
        assert_eq!(claim.taken_over_from.as_deref(), Some("w2"));
        // Still leased for a while, but by this worker's name before its restart.
        let c = coordination(vec![run(2, &[9], &[(0, UnitStatus::Leased, Some("w2"), 9_999)])]);
        assert_eq!(decide(&c, &me("w2", &[])).claim.unwrap().run_id, 2);
        let mut holding = me("w2", &[]);
        holding.holding = vec![(2, 0)];
        assert!(
            decide(&c, &holding).claim.is_none(),
            "a unit it measures now is not taken twice"
        );
    }

    #[test]
    fn a_candidate_needing_labels_goes_only_to_a_worker_carrying_them() {
        let mut c = coordination(vec![run(1, &[7], &[])]);
        c.labels.insert(7, vec!["gpu-a".into()]);
        let d = decide(&c, &me("plain", &["eu"]));
        assert!(d.claim.is_none());
        assert_eq!(
            d.queue.waiting[0].1.describe(),
            "waiting: m7 needs a worker labelled gpu-a"
        );
        assert_eq!(decide(&c, &me("gpu", &["gpu-a", "eu"])).claim.unwrap().run_id, 1);
    }

    #[test]
    fn caps_count_runs_admitted_by_any_worker() {
        let mut c = coordination(vec![
            run(1, &[7], &[(0, UnitStatus::Leased, Some("elsewhere"), 9_999)]),
            run(2, &[7], &[]),
            run(3, &[8], &[]),
        ]);
        c.caps.max_runs = 2;
        let d = decide(&c, &me("here", &[]));
        assert_eq!(d.claim.unwrap().run_id, 3, "run 2 waits for candidate 7, run 3 starts");
        assert_eq!(d.queue.waiting[0].1.describe(), "waiting: run #1 is measuring m7");
        c.caps.max_runs = 1;
        let d = decide(&c, &me("here", &[]));
        assert!(d.claim.is_none(), "one run executes elsewhere: the cap holds here too");
    }

    #[test]
    fn a_worker_kept_to_its_own_runs_leaves_the_others() {
        let mut only = me("cli", &[]);
        only.only_runs = Some(vec![2]);
        let c = coordination(vec![run(1, &[7], &[]), run(2, &[8], &[])]);
        assert_eq!(decide(&c, &only).claim.unwrap().run_id, 2);
    }

    #[test]
    fn the_shares_of_a_split_load_go_to_different_workers_at_once() {
        let mut split = run(1, &[7], &[]);
        split.clients = 2;
        let d = decide(&coordination(vec![split.clone()]), &me("w1", &[]));
        let claim = d.claim.unwrap();
        assert_eq!((claim.seq, claim.unit.shard, claim.unit.shards), (0, 0, 2));
        assert_eq!(claim.admits.unwrap().len(), 3, "two shares, then the closing step");
        // Share 0 is leased to w1: share 1 is free at once, but not for w1.
        let unit = |seq: u32, status, worker: Option<&str>| RunUnit {
            run_id: 1,
            seq,
            candidate_id: Some(7),
            shard: seq,
            shards: 2,
            status,
            worker: worker.map(str::to_string),
            lease_until: Some(Timestamp(9_999)),
            claims: 1,
            started_at: None,
            finished_at: None,
            harness: None,
            clock_offset_ms: None,
            clock_rtt_ms: None,
        };
        split.units = vec![
            unit(0, UnitStatus::Leased, Some("w1")),
            unit(1, UnitStatus::Queued, None),
        ];
        let c = coordination(vec![split]);
        let mut w1 = me("w1", &[]);
        w1.holding = vec![(1, 0)];
        assert!(decide(&c, &w1).claim.is_none(), "one share per worker");
        let claim = decide(&c, &me("w2", &[])).claim.unwrap();
        assert_eq!((claim.seq, claim.unit.shard), (1, 1));
    }

    #[test]
    fn a_full_worker_only_looks() {
        let mut full = me("w", &[]);
        full.free = 0;
        let d = decide(&coordination(vec![run(1, &[7], &[])]), &full);
        assert!(d.claim.is_none());
        assert_eq!(d.queue.waiting, [(1, Blocker::Preparing)]);
    }
}
