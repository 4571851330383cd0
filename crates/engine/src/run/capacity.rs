//! The capacity search, driven: for each candidate its own search (`domain::capacity`), each
//! probe level a one-level run of its own (stored, so every probe is kept in the archive with
//! its records), executed by the same executor as every run. The probe's attainment, its
//! verdict and its signs of over-saturation come from the records; the search says what to
//! probe next. docs/capacity.md describes it for users.
use crate::cancel::Cancel;
use crate::domain::calibers::{LevelFigures, run_figures};
use crate::domain::capacity::{
    CapacityOutcome, CapacitySearch, LoadAxis, Probe, SaturationSigns, SearchSettings, SearchState, level_signs,
};
use crate::domain::load::{Load, LoadShape};
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

/// One probe level as run.
#[derive(Debug, Clone)]
pub struct ProbeRun {
    pub run_id: i64,
    pub probe: Probe,
    pub signs: SaturationSigns,
    pub figures: Option<LevelFigures>,
}

/// One candidate's search.
#[derive(Debug, Clone)]
pub struct CandidateCapacity {
    pub candidate_id: i64,
    pub name: String,
    pub search: CapacitySearch,
    pub probes: Vec<ProbeRun>,
    /// None when the search was cancelled before it ended.
    pub outcome: Option<CapacityOutcome>,
}

/// Runs every candidate's search to its end (or until cancelled).
pub async fn find_capacity(
    store: &DynStore,
    plan: &CapacityPlan,
    cancel: Cancel,
) -> Result<Vec<CandidateCapacity>, EngineError> {
    let target = plan
        .config
        .slo
        .target_attainment
        .ok_or_else(|| EngineError::CapacitySearch("its SLO needs a target attainment".into()))?;
    if !plan.config.slo.is_set() {
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
    config.load = match axis {
        LoadAxis::Rate => LoadShape::Rate {
            per_second: load,
            poisson: true,
        },
        LoadAxis::Concurrency => LoadShape::Levels {
            levels: vec![load as u32],
        },
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
    let figures = run_figures(&records, &config, candidate_id, |_| None);
    let level = figures.levels.into_iter().next();
    let cap = match config.loads().first() {
        Some(l @ Load::Rate { .. }) => l.max_in_flight(),
        // A closed loop is at its cap by design: no sign.
        _ => usize::MAX,
    };
    // The level just below (by load) this one, for "throughput flat while load rose".
    let previous = before
        .iter()
        .filter(|p| p.probe.load < load)
        .max_by(|a, b| a.probe.load.total_cmp(&b.probe.load))
        .and_then(|p| Some((p.probe.load, p.figures.as_ref()?.req_per_s?)));
    let this = level.as_ref().and_then(|l| Some((load, l.req_per_s?)));
    let signs = level_signs(&records, cap, previous, this);
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
    let verdict = probe.verdict(plan.config.slo.target_attainment.unwrap_or(1.0));
    let message = format!(
        "capacity probe {} at {}: {met} of {requests} requests met every objective ({}){}{}",
        index + 1,
        axis.format(load),
        verdict.as_str(),
        if signs.past_saturation() {
            format!("; past saturation: {}", signs.describe())
        } else {
            String::new()
        },
        if status == RunStatus::Finished {
            String::new()
        } else {
            format!("; the probe run ended {}", status.as_str())
        }
    );
    store.append_run_event(run_id, "info", &message).await?;
    Ok(ProbeRun {
        run_id,
        probe,
        signs,
        figures: level,
    })
}
