//! The capacity search, driven: for each candidate its own search (`domain::capacity`), each
//! probe level a one-level run of its own (stored, so every probe is kept in the archive with
//! its records), executed by the same executor as every run. The probe's attainment, its
//! verdict and its signs of over-saturation come from the records; the search says what to
//! probe next. docs/capacity.md describes it for users.
use crate::cancel::Cancel;
pub use crate::domain::capacity::{CandidateCapacity, ProbeRun};
use crate::domain::capacity::{CapacitySearch, SearchSettings, SearchState, judge_probe, probe_message};
use crate::domain::load::{Load, LoadShape, probe_load};
use crate::domain::run::{NewRun, RunConfig, RunStatus};
use crate::error::EngineError;
use crate::run::executor::execute;
use crate::store::DynStore;

/// What to search.
#[derive(Debug, Clone)]
pub struct CapacityPlan {
    /// A name the probe runs are stored under ("NAME: CANDIDATE probe 3 at 42.0 req/s").
    pub name: String,
    pub evalset_version_id: i64,
    /// Each searched on its own, in turn.
    pub candidate_ids: Vec<i64>,
    /// Every probe's configuration but its load: `slo` (with `target_attainment`) is what the
    /// search judges, `requests_per_level` each probe's size.
    pub config: RunConfig,
    pub settings: SearchSettings,
}

/// Runs every candidate's search to its end (or until cancelled).
pub async fn find_capacity(
    store: &DynStore,
    plan: &CapacityPlan,
    cancel: Cancel,
) -> Result<Vec<CandidateCapacity>, EngineError> {
    let slo = plan.config.effective_slo();
    let target = slo
        .target_attainment
        .ok_or_else(|| EngineError::CapacitySearch("its SLO needs a target attainment".into()))?;
    if !slo.is_set() {
        return Err(EngineError::CapacitySearch(
            "its SLO needs at least one objective (TTFT, TTFA, TPOT or E2E)".into(),
        ));
    }
    let mut results = Vec::new();
    for &candidate_id in &plan.candidate_ids {
        let candidate = store
            .get_candidate(candidate_id)
            .await?
            .ok_or_else(|| EngineError::CapacitySearch(format!("candidate {candidate_id} does not exist")))?;
        let name = candidate.spec.name.clone();
        let mut search = CapacitySearch::new(plan.settings, target);
        let mut probes: Vec<ProbeRun> = Vec::new();
        let outcome = loop {
            if cancel.is_cancelled() {
                break None;
            }
            let load = match search.state() {
                SearchState::Done(outcome) => break Some(outcome),
                SearchState::Probe { load } => load,
            };
            let probe = run_probe(
                store,
                plan,
                candidate_id,
                &name,
                load,
                probes.len(),
                &probes,
                cancel.clone(),
            )
            .await?;
            search.record(probe.probe.clone());
            probes.push(probe);
        };
        results.push(CandidateCapacity {
            candidate_id,
            name,
            search,
            probes,
            outcome,
        });
    }
    Ok(results)
}

/// The run of one probe level at `load`: stored, executed, judged.
#[allow(clippy::too_many_arguments)]
async fn run_probe(
    store: &DynStore,
    plan: &CapacityPlan,
    candidate_id: i64,
    name: &str,
    load: f64,
    index: usize,
    before: &[ProbeRun],
    cancel: Cancel,
) -> Result<ProbeRun, EngineError> {
    let axis = plan.settings.axis;
    let mut config = plan.config.clone();
    config.load = match probe_load(axis, load) {
        Load::Rate { per_second, poisson } => LoadShape::Rate { per_second, poisson },
        Load::Concurrency { concurrency } => LoadShape::Levels {
            levels: vec![concurrency],
        },
        Load::Replay { .. } => unreachable!("a capacity probe is a rate or a concurrency"),
    };
    // The staged start and warm-ups once per candidate: later probes find the server warm.
    if index > 0 {
        config.staged_rollout = false;
        config.warmup_requests = 0;
    }
    let run_id = store
        .create_run(&NewRun {
            name: format!("{}: {name} probe {} at {}", plan.name, index + 1, axis.format(load)),
            evalset_version_id: plan.evalset_version_id,
            candidate_ids: vec![candidate_id],
            config: config.clone(),
        })
        .await?;
    let status = execute(store.clone(), run_id, cancel).await?;
    let records = store.list_request_records(run_id).await?;
    let cap = match config.loads().first() {
        Some(l @ Load::Rate { .. }) => l.max_in_flight(),
        // A closed loop is at its cap by design: no sign.
        _ => usize::MAX,
    };
    let probe = judge_probe(run_id, &records, &config, candidate_id, load, cap, before);
    let mut message = probe_message(
        index,
        axis,
        &probe,
        plan.config.effective_slo().target_attainment.unwrap_or(1.0),
    );
    if status != RunStatus::Finished {
        message.push_str(&format!("; the probe run ended {}", status.as_str()));
    }
    store.append_run_event(run_id, "info", &message).await?;
    Ok(probe)
}
