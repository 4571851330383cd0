//! Creating a run from a request: what the run form submits (and what a terminal command or a
//! JSON API would): checked field by field, stored, and handed to the runner.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::AppError;
use crate::domain::calibers::resumes_of;
use crate::domain::candidate::Candidate;
use crate::domain::evalset::EvalSetFile;
use crate::domain::presets::LoadDraft;
use crate::domain::run::{JudgeConfig, NewRun, ProfileSlo, RequestRecord, Run, RunConfig, RunDraft, RunStatus};
use crate::domain::scorecard::{FedLevels, LevelsFold};
use crate::domain::validation::{FieldErrors, MAX_NAME_CHARS, truncate};
use crate::engine::run::Runner;
use crate::store::{DynStore, EvalCaseKey, EvalSetVersion, EvalSetVersionHead, StoreError};

/// Resumes a paused run (the database stayed away past the writer's limit): it is queued again
/// and picks up where it stopped, like an interrupted run after a restart. Refused unless paused.
pub async fn resume_paused(store: &DynStore, runner: &Runner, run_id: i64) -> Result<(), AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    if run.status != RunStatus::Paused {
        return Err(AppError::Invalid(format!(
            "run #{run_id} is {}: only a paused run can be resumed",
            run.status.as_str()
        )));
    }
    store.set_run_status(run_id, RunStatus::Queued, None).await?;
    store
        .append_run_event(run_id, "info", "resume asked for from the run page")
        .await?;
    runner.start(run_id);
    Ok(())
}

/// A run as asked for, every field as typed.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// Blank: named after the eval set and the candidates.
    pub name: String,
    /// The eval-set version's id.
    pub evalset_version: String,
    /// Candidate ids, in the order given (repeats are dropped).
    pub candidates: Vec<String>,
    pub draft: RunDraft,
    pub load: LoadDraft,
    /// Run the eval set's `llm-judge` graders after the measured requests.
    pub judge: bool,
    /// A candidate id sent every judge grader, or "" for the judges the graders name.
    pub judge_candidate: String,
}

impl RunRequest {
    /// The run configuration the request describes (without judging), or every field error.
    pub fn config(&self) -> Result<RunConfig, FieldErrors> {
        run_config(&self.draft, &self.load)
    }
}

/// The one check of a run's configuration, whatever door it came through (the run form, the
/// API, a settings file, `bakeoff measure`'s flags): the same limits everywhere (e.g.
/// concurrency and sweep maximum 1 to `domain::load::MAX_CONCURRENCY`), every wrong field named
/// at once by the form's name; a door renames them to its own (a file's key, a flag).
pub fn run_config(draft: &RunDraft, load: &LoadDraft) -> Result<RunConfig, FieldErrors> {
    let mut errors = FieldErrors::default();
    let mut config = match draft.validate() {
        Ok(config) => config,
        Err(e) => {
            errors.0.extend(e.0);
            RunConfig::default()
        }
    };
    load.apply(&mut config, &mut errors);
    errors.into_result(config)
}

/// Each candidate's speeds as its latest finished run measured them (the run's headline decode
/// tok/s/stream and TTFT p50s), for the candidates that have one: what the run form's estimate
/// times a run by.
pub async fn latest_measured_speeds(
    store: &DynStore,
    figures: &crate::live::Live<Vec<crate::domain::compare::Figures>>,
    candidate_ids: &[i64],
) -> Result<HashMap<i64, crate::domain::estimate::MeasuredSpeed>, AppError> {
    let mut out = HashMap::new();
    for &id in candidate_ids {
        let filter = crate::store::RunFilter {
            candidate_id: Some(id),
            status: Some(RunStatus::Finished),
            terminal_only: true,
            ..Default::default()
        };
        // Newest first.
        let Some(item) = store.list_runs_filtered(&filter, 1, 0).await?.into_iter().next() else {
            continue;
        };
        let run = &item.run;
        let Some(position) = run.candidate_ids.iter().position(|&c| c == id) else {
            continue;
        };
        let all =
            crate::pages::figures::run_figures(store, figures, run, &RunVersion::of(run), &RunRecords::of(run.id))
                .await?;
        if let Some(f) = all.get(position) {
            out.insert(
                id,
                crate::domain::estimate::MeasuredSpeed {
                    run_id: run.id,
                    decode_tok_s: f.decode_p50_tok_s,
                    ttft_s: f.ttft_p50_ms.map(|ms| ms / 1000.0),
                },
            );
        }
    }
    Ok(out)
}

/// What a run of `config` over `version` with `chosen` would send and cost (the run form's
/// estimate and a schedule's budget check). With no candidate, the estimate is for one
/// unnamed, unpriced candidate. `measured`: the candidates' speeds by their latest finished run
/// ([`latest_measured_speeds`]), which time the run where there are some.
pub fn estimate_of(
    config: &RunConfig,
    version: &EvalSetVersion,
    chosen: &[&Candidate],
    measured: &HashMap<i64, crate::domain::estimate::MeasuredSpeed>,
) -> crate::domain::estimate::Estimate {
    use crate::domain::estimate::{CandidateInput, EstimateInput, approx_tokens, estimate};
    let file = &version.file;
    let prompt_tokens: Vec<u32> = file
        .cases
        .iter()
        .map(|case| {
            file.messages_for(case)
                .iter()
                .map(|m| approx_tokens(&m.content))
                .sum::<u32>()
        })
        .collect();
    let max_tokens = |c: Option<&Candidate>| {
        config
            .max_tokens
            .or(file.header.max_tokens)
            .or(c.and_then(|c| c.spec.max_tokens))
    };
    let candidates: Vec<CandidateInput> = if chosen.is_empty() {
        vec![CandidateInput {
            name: "per candidate".into(),
            pricing: Default::default(),
            max_tokens: max_tokens(None),
            claimed_tok_s: None,
            measured: None,
        }]
    } else {
        chosen
            .iter()
            .map(|c| CandidateInput {
                name: c.spec.name.clone(),
                pricing: c.spec.pricing.clone(),
                max_tokens: max_tokens(Some(c)),
                claimed_tok_s: c.spec.claimed.as_ref().map(|f| f.tokens_per_second),
                measured: measured.get(&c.id).copied(),
            })
            .collect()
    };
    // Both tool modes: each candidate with a native tool API is measured twice.
    let candidates: Vec<CandidateInput> = if config.tool_mode == crate::domain::tool_calls::RunToolMode::Both {
        candidates
            .into_iter()
            .zip(chosen.iter().map(Some).chain(std::iter::repeat(None)))
            .flat_map(|(input, c)| {
                let twice = c.is_none_or(|c| crate::engine::wire::tools::sends_native_tools(c.spec.provider));
                let variant = twice.then(|| CandidateInput {
                    name: crate::domain::tool_calls::prompt_mode_name(&input.name),
                    ..input.clone()
                });
                std::iter::once(input).chain(variant)
            })
            .collect()
    } else {
        candidates
    };
    estimate(&EstimateInput {
        config,
        prompt_tokens: &prompt_tokens,
        candidates: &candidates,
    })
}

/// Checks the request, stores the run and starts it (it waits, queued, while the runner's caps
/// say so); returns its id. Every wrong field is reported at once as [`AppError::Fields`].
pub async fn create_run(store: &DynStore, runner: &Runner, request: &RunRequest) -> Result<i64, AppError> {
    let mut errors = FieldErrors::default();
    let config = match request.config() {
        Ok(config) => Some(config),
        Err(e) => {
            errors.0.extend(e.0);
            None
        }
    };
    let name = if request.name.trim().is_empty() {
        None
    } else {
        crate::domain::validation::name(&mut errors, "name", &request.name)
    };

    let version = match request.evalset_version.trim().parse::<i64>() {
        Ok(id) => store.get_evalset_version(id).await?,
        Err(_) => None,
    };
    if version.is_none() {
        errors.add(
            "evalset_version",
            "is not a known eval set version; choose one from the list",
        );
    }

    // A replay's workload version must exist (the form and files check its shape only).
    if let Some((workload_version, _)) = config.as_ref().and_then(|c| c.load.replay())
        && store.get_workload_version(workload_version).await?.is_none()
    {
        errors.add(
            "workload_version",
            format!("#{workload_version} is not a known workload version; choose one from the Workloads page"),
        );
    }

    let known = store.list_candidates().await?;
    let mut candidate_ids: Vec<i64> = Vec::new();
    for raw in &request.candidates {
        match raw
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|id| known.iter().any(|c| c.id == *id))
        {
            Some(id) if !candidate_ids.contains(&id) => candidate_ids.push(id),
            Some(_) => {}
            None => errors.add(
                "candidates",
                format!(
                    "unknown candidate {:?}; reload the page and choose again",
                    truncate(raw, 20)
                ),
            ),
        }
    }
    if request.candidates.is_empty() {
        errors.add("candidates", "choose at least one candidate");
    }

    let judge = match &version {
        Some(v) if request.judge => judge_config(request, &v.file, &known, &mut errors),
        _ => None,
    };
    // The judging profile's SLO, when it has one, judges the run (and a find-capacity run may
    // take it instead of an SLO of its own).
    let profile_slo = match &version {
        Some(v) => profile_slo_of(store, Some(&v.file.header.name)).await?,
        None => None,
    };
    let config = config.map(|c| RunConfig {
        judge,
        profile_slo,
        ..c
    });
    if let Some(c) = &config {
        crate::domain::presets::check_capacity_slo(c, &mut errors);
    }
    let (Some(config), Some(version), true) = (config, version, errors.is_empty()) else {
        return Err(AppError::Fields(errors));
    };
    let name = name.unwrap_or_else(|| {
        let names: Vec<&str> = candidate_ids
            .iter()
            .filter_map(|id| known.iter().find(|c| c.id == *id).map(|c| c.spec.name.as_str()))
            .collect();
        let set = &version.file.header.name;
        let full = format!("{set} · {}", names.join(" vs "));
        if full.chars().count() <= 60 {
            full
        } else {
            truncate(&format!("{set} · {} candidates", names.len()), MAX_NAME_CHARS)
        }
    });
    store_and_start(
        store,
        runner,
        NewRun {
            name,
            evalset_version_id: version.id,
            candidate_ids,
            config,
        },
    )
    .await
}

/// The SLO block of the profile that judges runs of eval set `evalset` (its current version),
/// as a run keeps it; None when that profile has none (or there is no profile).
pub async fn profile_slo_of(store: &DynStore, evalset: Option<&str>) -> Result<Option<ProfileSlo>, AppError> {
    let Some((id, _)) = crate::profiles::judging_profile(store, evalset).await? else {
        return Ok(None);
    };
    profile_slo_by_id(store, id).await
}

/// The SLO block of profile `id` (its current version), as a run keeps it; None when it has
/// none (or there is no such profile).
pub async fn profile_slo_by_id(store: &DynStore, id: i64) -> Result<Option<ProfileSlo>, AppError> {
    let Some(profile) = store.get_threshold_profile(id, None).await? else {
        return Ok(None);
    };
    Ok(profile.slo.filter(|s| s.is_set()).map(|slo| ProfileSlo {
        profile_id: profile.id,
        profile: profile.name.clone(),
        version: profile.version,
        slo,
    }))
}

/// Stores a checked run and hands it to the runner. The judging profile's SLO is taken now
/// (a run made again takes the profile's as it is now, not the first run's).
async fn store_and_start(store: &DynStore, runner: &Runner, mut run: NewRun) -> Result<i64, AppError> {
    let evalset = store
        .get_evalset_version_head(run.evalset_version_id)
        .await?
        .map(|v| v.header.name);
    run.config.profile_slo = profile_slo_of(store, evalset.as_deref()).await?;
    let mut errors = FieldErrors::default();
    crate::domain::presets::check_capacity_slo(&run.config, &mut errors);
    if !errors.is_empty() {
        return Err(AppError::Fields(errors));
    }
    let run = with_prompt_mode_variants(store, run).await?;
    let id = store.create_run(&run).await?;
    runner.start(id);
    tracing::info!(run_id = id, "run created and started");
    Ok(id)
}

/// A run whose tool mode is `both`: each candidate followed by its prompt-mode variant (created,
/// or brought up to date with the candidate as it is now), a candidate of the run of its own, so
/// every page gives each mode its own column, figures and verdict; the variants are listed in
/// `prompt_mode_candidates` (the executor sends them in prompt mode). A candidate whose provider
/// has no native tool API gets none: its tool cases go in prompt mode anyway. Variants the
/// configuration already lists (a run made again) are dropped first and made anew.
pub async fn with_prompt_mode_variants(store: &DynStore, mut run: NewRun) -> Result<NewRun, AppError> {
    use crate::domain::tool_calls::RunToolMode;
    let before = std::mem::take(&mut run.config.prompt_mode_candidates);
    run.candidate_ids.retain(|id| !before.contains(id));
    if run.config.tool_mode != RunToolMode::Both {
        return Ok(run);
    }
    let mut ids = Vec::with_capacity(run.candidate_ids.len() * 2);
    for &id in &run.candidate_ids {
        let candidate = store
            .get_candidate(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("candidate #{id}")))?;
        ids.push(id);
        if crate::engine::wire::tools::sends_native_tools(candidate.spec.provider) {
            let variant = crate::domain::credentials::prompt_mode_variant(&candidate);
            let variant_id = store.prompt_mode_variant(id, &variant).await?;
            ids.push(variant_id);
            run.config.prompt_mode_candidates.push(variant_id);
        }
    }
    run.candidate_ids = ids;
    Ok(run)
}

/// Cancels run `run_id` (`from` says where, for the run's event log: "the run page", "the API").
/// A run the runner is executing stops at its next request and ends as cancelled, keeping its
/// finished records; one it is not executing (queued in another process, or left over) is
/// marked cancelled at once. An ended run is left as it is. Returns the run as it was.
pub async fn cancel_run(store: &DynStore, runner: &Runner, run_id: i64, from: &str) -> Result<Run, AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    if !run.status.is_terminal() && !runner.cancel(run_id) {
        store.set_run_status(run_id, RunStatus::Cancelled, None).await?;
        store
            .append_run_event(run_id, "warn", &format!("cancelled from {from} (it was not executing)"))
            .await?;
    }
    tracing::info!(run_id, "run cancel requested");
    Ok(run)
}

/// "Run again" (`without: None`) or "run again without X": a new run of the same eval-set
/// version with exactly the same settings (the stored configuration, judging included) and
/// the same candidates in the same order, less `without`. Refused when the run is still going,
/// when `without` is not one of its candidates or is its only one, or when a candidate has been
/// deleted since.
pub async fn run_again(store: &DynStore, runner: &Runner, run_id: i64, without: Option<i64>) -> Result<i64, AppError> {
    run_again_in(store, runner, run_id, without, None).await
}

/// [`run_again`], its tool cases sent in `tool_mode` when given (the same cases and candidates
/// through the other mode, to compare the two side by side).
pub async fn run_again_in(
    store: &DynStore,
    runner: &Runner,
    run_id: i64,
    without: Option<i64>,
    tool_mode: Option<crate::domain::tool_calls::RunToolMode>,
) -> Result<i64, AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    if !run.status.is_terminal() {
        return Err(AppError::Invalid(format!(
            "run #{run_id} is still {}: run it again once it has ended",
            run.status.as_str()
        )));
    }
    if store.get_evalset_version_head(run.evalset_version_id).await?.is_none() {
        return Err(AppError::Invalid(format!(
            "the eval set version of run #{run_id} no longer exists"
        )));
    }
    let known = store.list_candidates().await?;
    let name_of = |id: i64| known.iter().find(|c| c.id == id).map(|c| c.spec.name.clone());
    let left_out = match without {
        Some(id) if !run.candidate_ids.contains(&id) => {
            return Err(AppError::Invalid(format!(
                "candidate #{id} is not part of run #{run_id}"
            )));
        }
        Some(_) if run.candidate_ids.len() == 1 => {
            return Err(AppError::Invalid(format!(
                "run #{run_id} has no other candidate to run without this one"
            )));
        }
        Some(id) => Some(name_of(id).unwrap_or_else(|| format!("candidate #{id}"))),
        None => None,
    };
    // A `both` run's prompt-mode variants are made anew from their candidates when stored.
    let candidate_ids: Vec<i64> = run
        .candidate_ids
        .iter()
        .copied()
        .filter(|&id| Some(id) != without && !run.config.prompt_mode_candidates.contains(&id))
        .collect();
    if let Some(gone) = candidate_ids.iter().find(|&&id| name_of(id).is_none()) {
        return Err(AppError::Invalid(format!(
            "candidate #{gone} of run #{run_id} has been deleted since; start a new run from the form"
        )));
    }
    let mut name = match &left_out {
        Some(x) => format!("{} without {x}", run.name),
        None => format!("{} (again)", run.name),
    };
    let mut config = run.config.clone();
    if let Some(mode) = tool_mode.filter(|m| *m != run.config.tool_mode) {
        name = format!("{} ({} mode)", run.name, mode.as_str());
        config.tool_mode = mode;
    }
    store_and_start(
        store,
        runner,
        NewRun {
            name: truncate(&name, MAX_NAME_CHARS),
            evalset_version_id: run.evalset_version_id,
            candidate_ids,
            config,
        },
    )
    .await
}

/// Judging switched on: every judge the eval set's graders name, resolved to a candidate now
/// (kept with the run, so its judge cost is priced by the candidate that judged), or the one
/// candidate chosen to judge them all. A judge that cannot be found is a field error.
fn judge_config(
    request: &RunRequest,
    file: &EvalSetFile,
    known: &[Candidate],
    errors: &mut FieldErrors,
) -> Option<JudgeConfig> {
    let names = file.judge_names(file.cases.len());
    if names.is_empty() {
        errors.add(
            "judge",
            "this eval set has no llm-judge grader to run; leave judging off",
        );
        return None;
    }
    let override_id = match request.judge_candidate.trim() {
        "" => None,
        raw => match raw.parse::<i64>().ok().filter(|id| known.iter().any(|c| c.id == *id)) {
            Some(id) => Some(id),
            None => {
                errors.add(
                    "judge_candidate",
                    "is not a known candidate; reload the page and choose again",
                );
                return None;
            }
        },
    };
    let mut judges = BTreeMap::new();
    for (name, case_id) in names {
        match known.iter().find(|c| c.spec.name == name) {
            Some(c) => {
                judges.insert(name, c.id);
            }
            None if override_id.is_some() => {}
            None => {
                errors.add(
                    "judge_candidate",
                    format!(
                        "the grader of case {case_id:?} names judge {name:?}, but no candidate has that name; \
                         choose a candidate to judge"
                    ),
                );
                return None;
            }
        }
    }
    Some(JudgeConfig { judges, override_id })
}

/// How many candidates' records the whole process holds at once, whatever the number of runs
/// ending and pages being viewed: each `RunRecords` holding records holds one of these places
/// (as does a run's case index while it reads every record's facts), and a reader waits for one
/// (a big candidate's records are hundreds of MB; twenty viewers of a live run each reading them
/// was gigabytes). One: six views of an unfinished million-request run peaked at 539 MiB with
/// two (the end step alone at 277), and took 1.1× as long with one.
pub const RECORD_HOLDERS: usize = 1;

fn record_holders() -> Arc<tokio::sync::Semaphore> {
    static HOLDERS: std::sync::LazyLock<Arc<tokio::sync::Semaphore>> =
        std::sync::LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(RECORD_HOLDERS)));
    HOLDERS.clone()
}

/// A place among the [`RECORD_HOLDERS`] for a read as big as a candidate's records that is not
/// a [`RunRecords`]' (every record's facts, for a run's case index), held while it is dropped.
pub async fn record_holder_place() -> tokio::sync::OwnedSemaphorePermit {
    record_holders()
        .acquire_owned()
        .await
        .expect("the record holders' semaphore is never closed")
}

/// A candidate's records as one reader holds them, with its place among the
/// [`RECORD_HOLDERS`].
struct Held {
    candidate_id: i64,
    /// Whether every record keeps its chunk times (see [`RunRecords::of_candidate_feeding`]).
    whole: bool,
    records: Arc<Vec<RequestRecord>>,
    _place: tokio::sync::OwnedSemaphorePermit,
}

/// Once the records are let go by their last holder, the memory they freed is handed back
/// before their place is: what malloc keeps of it stays with the arena of the thread that read
/// them, where the next reader (on another thread) cannot reuse it; six views of an unfinished
/// million-request run otherwise ratcheted the process up by ~140 MiB between reads.
impl Drop for Held {
    fn drop(&mut self) {
        let records = Arc::into_inner(std::mem::take(&mut self.records));
        let last_holder = records.is_some();
        drop(records);
        if last_holder {
            crate::memory::release_freed_memory();
        }
    }
}

/// A run's records, read a candidate at a time, and the instants it was resumed at. Its
/// summaries are computed per candidate from that candidate's records alone, so at most one
/// candidate's records are in memory; the last candidate read is kept, so the end-of-run step
/// computes every summary of a candidate from one read. A reader holds one place at a time (it
/// lets the last candidate's go before it waits for the next), so readers never wait on each
/// other in a circle.
pub struct RunRecords {
    run_id: i64,
    resumes: tokio::sync::OnceCell<Vec<i64>>,
    last: tokio::sync::Mutex<Option<Held>>,
}

impl RunRecords {
    pub fn of(run_id: i64) -> Self {
        RunRecords {
            run_id,
            resumes: tokio::sync::OnceCell::new(),
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// One candidate's records in send order (judge calls on its answers included).
    pub async fn of_candidate(
        &self,
        store: &DynStore,
        candidate_id: i64,
    ) -> Result<Arc<Vec<RequestRecord>>, StoreError> {
        self.read(store, candidate_id, None).await
    }

    /// [`RunRecords::of_candidate`], each record handed to `each` as it is read (before the
    /// next page is): `each` may feed the figures that read chunk times and let them go
    /// (`Chunks::keep_first_only`), so records read this way are never handed to another
    /// reader.
    pub async fn of_candidate_feeding(
        &self,
        store: &DynStore,
        candidate_id: i64,
        each: &mut (dyn FnMut(&mut RequestRecord) + Send),
    ) -> Result<Arc<Vec<RequestRecord>>, StoreError> {
        self.read(store, candidate_id, Some(each)).await
    }

    /// One candidate's records prepared for its figures, as an unfinished run's views read
    /// them: each record, as it is read, is fed to the level figures and to `also` (the run
    /// page's parts that read chunk times), then its chunk times are let go, so what a
    /// candidate's records hold no longer grows with their answers' lengths (the end-of-run
    /// step reads them so too, and seals their repetitions as it goes).
    pub async fn of_candidate_leveled(
        &self,
        store: &DynStore,
        candidate_id: i64,
        also: &mut (dyn FnMut(&RequestRecord) + Send),
    ) -> Result<(Arc<Vec<RequestRecord>>, FedLevels), AppError> {
        let resumes = self.resumes(store).await?.to_vec();
        let mut levels = LevelsFold::new(candidate_id, &resumes);
        let mut feed = |r: &mut RequestRecord| {
            also(r);
            levels.add(r);
            r.chunks.keep_first_only();
        };
        let records = self.of_candidate_feeding(store, candidate_id, &mut feed).await?;
        let levels = levels
            .finish()
            .expect("only a fold given groups to seal by finds a record read after sealing");
        Ok((records, levels))
    }

    async fn read(
        &self,
        store: &DynStore,
        candidate_id: i64,
        each: Option<&mut (dyn FnMut(&mut RequestRecord) + Send)>,
    ) -> Result<Arc<Vec<RequestRecord>>, StoreError> {
        let whole = each.is_none();
        let mut last = self.last.lock().await;
        if let Some(held) = last.as_ref()
            && held.candidate_id == candidate_id
            && held.whole
            && whole
        {
            return Ok(held.records.clone());
        }
        // The one held before goes first: two candidates' records are never held at once.
        *last = None;
        let place = record_holder_place().await;
        let mut keep = |_: &mut RequestRecord| {};
        let each = each.unwrap_or(&mut keep);
        let records = Arc::new(
            store
                .candidate_records_for_summaries(self.run_id, candidate_id, each)
                .await?,
        );
        *last = Some(Held {
            candidate_id,
            whole,
            records: records.clone(),
            _place: place,
        });
        Ok(records)
    }

    /// The error of a candidate's records that do not hold together as read (a repetition read
    /// after it was sealed, attempts that are not final), naming the run and the candidate.
    pub fn corrupt(&self, candidate_id: i64, e: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt(format!(
            "records of candidate {candidate_id} of run {}: {e}",
            self.run_id
        ))
    }

    /// Lets the last candidate's records (and their place) go, once every summary of it is
    /// computed.
    pub async fn release(&self) {
        *self.last.lock().await = None;
    }

    /// The instants the run was resumed at (`calibers::resumes_of`).
    pub async fn resumes(&self, store: &DynStore) -> Result<&[i64], StoreError> {
        let resumes = self
            .resumes
            .get_or_try_init(|| async {
                let events = store.list_run_events(self.run_id).await?;
                Ok::<_, StoreError>(resumes_of(events.iter().map(|e| (e.at.0, e.message.as_str()))))
            })
            .await?;
        Ok(resumes)
    }
}

/// Whether a run's summaries (page parts, figures, scorecard inputs, case index) are stored
/// once computed: it has ended, and is not an import that did not complete.
pub fn summaries_are_stored(run: &Run) -> bool {
    run.status.is_terminal() && run.error.as_deref() != Some(crate::store::IMPORT_INCOMPLETE)
}

/// A run's stored summary of `kind` (the JSON of `T`); None when the run's summaries are not
/// stored, this one is not yet, or it no longer reads (it is then recomputed).
pub async fn stored_summary<T: serde::de::DeserializeOwned>(
    store: &DynStore,
    run: &Run,
    kind: &str,
) -> Result<Option<T>, StoreError> {
    if !summaries_are_stored(run) {
        return Ok(None);
    }
    let Some(body) = store.get_run_summary(run.id, kind).await? else {
        return Ok(None);
    };
    match serde_json::from_str(&body) {
        Ok(summary) => Ok(Some(summary)),
        Err(e) => {
            tracing::warn!(run_id = run.id, kind, error = %e, "stored summary unreadable; recomputing");
            Ok(None)
        }
    }
}

/// Stores a run's summary of `kind` when its summaries are stored (else does nothing).
pub async fn store_summary<T: serde::Serialize + ?Sized>(
    store: &DynStore,
    run: &Run,
    kind: &str,
    summary: &T,
) -> Result<(), StoreError> {
    if !summaries_are_stored(run) {
        return Ok(());
    }
    match serde_json::to_string(summary) {
        Ok(body) => store.save_run_summary(run.id, kind, &body).await,
        Err(e) => {
            tracing::warn!(run_id = run.id, kind, error = %e, "could not store the summary");
            Ok(())
        }
    }
}

/// A run's eval-set version as its summaries read it, each part at most once and only when a
/// summary is computed rather than read stored: its outline (head, case ids, tags, weights), and
/// the whole version only where a case's graders are needed (naming judges). Read whole, a
/// 100,000-case version takes half a second and ~95 MB, held beside the run's records.
pub struct RunVersion {
    version_id: i64,
    loaded: tokio::sync::OnceCell<Option<EvalSetVersion>>,
    outline: tokio::sync::OnceCell<Option<VersionOutline>>,
}

/// A version's head and its cases' keys (id, tags, weight), in file order.
pub struct VersionOutline {
    pub head: EvalSetVersionHead,
    pub cases: Vec<EvalCaseKey>,
}

impl VersionOutline {
    /// Case id → weight (a case the map lacks weighs 1).
    pub fn weights(&self) -> HashMap<&str, f64> {
        self.cases.iter().map(|c| (c.id.as_str(), c.weight)).collect()
    }

    /// Case id → position in the file.
    pub fn order(&self) -> HashMap<&str, usize> {
        self.cases.iter().enumerate().map(|(i, c)| (c.id.as_str(), i)).collect()
    }
}

impl RunVersion {
    pub fn of(run: &Run) -> Self {
        RunVersion {
            version_id: run.evalset_version_id,
            loaded: tokio::sync::OnceCell::new(),
            outline: tokio::sync::OnceCell::new(),
        }
    }

    /// The version's outline, None when it no longer exists.
    pub async fn outline(&self, store: &DynStore) -> Result<Option<&VersionOutline>, StoreError> {
        let outline = self
            .outline
            .get_or_try_init(|| async {
                let Some(head) = store.get_evalset_version_head(self.version_id).await? else {
                    return Ok::<_, StoreError>(None);
                };
                let cases = store.list_eval_case_keys(self.version_id).await?;
                Ok(Some(VersionOutline { head, cases }))
            })
            .await?;
        Ok(outline.as_ref())
    }

    /// The version, None when it no longer exists.
    pub async fn get(&self, store: &DynStore) -> Result<Option<&EvalSetVersion>, StoreError> {
        let version = self
            .loaded
            .get_or_try_init(|| store.get_evalset_version(self.version_id))
            .await?;
        Ok(version.as_ref())
    }
}
