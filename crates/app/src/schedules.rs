//! Schedules: saving one (the form, the API and a schedule file all come through [`save`]),
//! and the scheduler that fires them.
//!
//! The scheduler runs in every `bakeoff serve` (not in `bakeoff worker`: a worker measures, a
//! web node decides what to measure). Each tick it asks every schedule what it owes
//! (`domain::schedule::Schedule::due`) and claims that due time in the database together with
//! the run it creates (`ScheduleStore::claim_firing`): two web nodes, or a node restarted in
//! the middle of a tick, cannot both fire one due time. The run is an ordinary run from then
//! on: queued, admitted under the same caps as any run (never beside another run of one of its
//! candidates), picked up by whichever worker may measure it. A due time that passed while no
//! scheduler ran is fired once, at the next start, and its run says so; several missed due
//! times become that one run.
use std::time::Duration;

use crate::AppError;
use crate::domain::Timestamp;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::candidate::Candidate;
use crate::domain::presets::LoadDraft;
use crate::domain::run::{NewRun, RunDraft};
use crate::domain::schedule::{Baseline, Due, Firing, Schedule, ScheduleSpec, local_time};
use crate::domain::validation::{FieldErrors, MAX_NAME_CHARS, truncate};
use crate::engine::run::Runner;
use crate::store::DynStore;

/// How often the scheduler looks for due schedules (well inside `ON_TIME_GRACE_MS`).
pub const TICK: Duration = Duration::from_secs(15);

/// A schedule as asked for, every field as typed (the form's names).
#[derive(Debug, Clone, Default)]
pub struct ScheduleRequest {
    pub name: String,
    /// The eval set's id.
    pub evalset: String,
    /// A version id of that eval set, or "latest" (also when blank).
    pub evalset_version: String,
    /// Candidate ids, in order (repeats dropped).
    pub candidates: Vec<String>,
    pub draft: RunDraft,
    pub load: LoadDraft,
    /// A threshold profile id, or blank for the team's default.
    pub profile: String,
    /// Cron: `MIN HOUR DOM MON DOW` or `@daily` and the like.
    pub cadence: String,
    /// IANA name; blank: UTC.
    pub time_zone: String,
    /// Blank: the user saving it.
    pub owner: String,
    /// Blank: no limit.
    pub max_requests: String,
    /// Blank: no limit.
    pub max_cost_usd: String,
    /// "last-passed" (also when blank) or a run id.
    pub baseline: String,
    pub paused: bool,
}

/// Checks a request against the store: the run configuration by the one check every run
/// takes (`runs::run_config`), the eval set, version, candidates and profile by id, the
/// schedule's own fields by `ScheduleSpec::check`. Every wrong field at once.
pub async fn check(store: &DynStore, request: &ScheduleRequest, actor: &str) -> Result<ScheduleSpec, AppError> {
    let mut errors = FieldErrors::default();
    let config = match crate::runs::run_config(&request.draft, &request.load) {
        Ok(c) => c,
        Err(e) => {
            errors.0.extend(e.0);
            Default::default()
        }
    };
    let evalsets = store.list_evalsets().await?;
    let evalset = request
        .evalset
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|id| evalsets.iter().find(|e| e.id == id));
    if evalset.is_none() {
        errors.add("evalset", "is not a known eval set; choose one from the list");
    }
    let version = match request.evalset_version.trim() {
        "" | "latest" => None,
        raw => match (raw.parse::<i64>(), evalset) {
            (Ok(id), Some(set)) => match store.get_evalset_version_head(id).await? {
                Some(head) if head.evalset_id == set.id => Some(id),
                _ => {
                    errors.add(
                        "evalset_version",
                        format!("is not a version of eval set {:?}", set.name),
                    );
                    None
                }
            },
            _ => {
                errors.add("evalset_version", "is \"latest\" or a version id");
                None
            }
        },
    };
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
            None => errors.add("candidates", format!("unknown candidate {:?}", truncate(raw, 20))),
        }
    }
    let profile_id = match request.profile.trim() {
        "" => None,
        raw => match raw.parse::<i64>() {
            Ok(id) if store.get_threshold_profile(id, None).await?.is_some() => Some(id),
            _ => {
                errors.add("profile", "is not a known threshold profile");
                None
            }
        },
    };
    let number = |errors: &mut FieldErrors, field: &str, raw: &str| -> Option<f64> {
        match raw.trim() {
            "" => None,
            t => match t.parse::<f64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    errors.add(field, format!("{:?} is not a number", truncate(t, 20)));
                    None
                }
            },
        }
    };
    let max_requests = number(&mut errors, "max_requests", &request.max_requests).map(|v| {
        if v.fract() != 0.0 || v < 0.0 {
            errors.add("max_requests", "must be a whole number of requests");
        }
        v.max(0.0) as u64
    });
    let max_cost_usd = number(&mut errors, "max_cost_usd", &request.max_cost_usd);
    let baseline = Baseline::parse(&request.baseline).unwrap_or_else(|| {
        errors.add("baseline", "is \"last-passed\" or a run id");
        Baseline::LastPassed
    });
    if let Baseline::Run(id) = baseline
        && store.get_run(id).await?.is_none()
    {
        errors.add("baseline", format!("run #{id} does not exist"));
    }
    let spec = ScheduleSpec {
        name: request.name.trim().to_string(),
        evalset_id: evalset.map_or(0, |e| e.id),
        evalset_version_id: version,
        candidate_ids,
        config,
        profile_id,
        cadence: request.cadence.trim().to_string(),
        time_zone: match request.time_zone.trim() {
            "" => "UTC".to_string(),
            zone => zone.to_string(),
        },
        owner: match request.owner.trim() {
            "" => actor.to_string(),
            owner => owner.to_string(),
        },
        max_requests,
        max_cost_usd,
        baseline,
        paused: request.paused,
    };
    spec.check(&mut errors);
    if errors.is_empty() {
        Ok(spec)
    } else {
        Err(AppError::Fields(errors))
    }
}

/// Checks and stores a schedule (new when `id` is None), audited as done by `actor`. A change
/// of cadence or zone, or a resume, starts counting again: due times before it are not owed.
pub async fn save(store: &DynStore, id: Option<i64>, request: &ScheduleRequest, actor: &str) -> Result<i64, AppError> {
    let spec = check(store, request, actor).await?;
    let (id, how) = match id {
        None => (store.create_schedule(&spec).await?, "created"),
        Some(id) => {
            let old = store
                .get_schedule(id)
                .await?
                .ok_or_else(|| AppError::NotFound(format!("schedule #{id}")))?;
            let recount = old.spec.cadence != spec.cadence
                || old.spec.time_zone != spec.time_zone
                || (old.spec.paused && !spec.paused);
            store.update_schedule(id, &spec, recount).await?;
            (id, "changed")
        }
    };
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::ScheduleSaved,
            target: format!("schedule #{id} {:?}", spec.name),
            detail: format!(
                "{how}: {}{}",
                spec.cadence_words(),
                if spec.paused { ", paused" } else { "" }
            ),
        })
        .await?;
    Ok(id)
}

/// Pauses or resumes a schedule (a resume owes nothing for the paused time).
pub async fn set_paused(store: &DynStore, id: i64, paused: bool, actor: &str) -> Result<(), AppError> {
    let schedule = store
        .get_schedule(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("schedule #{id}")))?;
    if schedule.spec.paused == paused {
        return Ok(());
    }
    let spec = ScheduleSpec {
        paused,
        ..schedule.spec
    };
    store.update_schedule(id, &spec, !paused).await?;
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::ScheduleSaved,
            target: format!("schedule #{id} {:?}", spec.name),
            detail: if paused { "paused" } else { "resumed" }.to_string(),
        })
        .await?;
    Ok(())
}

/// Deletes a schedule and its firing log; the runs it started stay in the archive.
pub async fn delete(store: &DynStore, id: i64, actor: &str) -> Result<(), AppError> {
    let schedule = store
        .get_schedule(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("schedule #{id}")))?;
    store.delete_schedule(id).await?;
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::ScheduleDeleted,
            target: format!("schedule #{id} {:?}", schedule.spec.name),
            detail: String::new(),
        })
        .await?;
    Ok(())
}

/// The run a firing would start, or why it starts none (a candidate deleted, the eval set
/// gone, over budget): the reason is the firing's note.
async fn run_for(store: &DynStore, schedule: &Schedule, due: Timestamp) -> Result<Result<NewRun, String>, AppError> {
    let spec = &schedule.spec;
    let version_id = match spec.evalset_version_id {
        Some(id) => id,
        None => match store
            .list_evalsets()
            .await?
            .into_iter()
            .find(|e| e.id == spec.evalset_id)
        {
            Some(set) => set.latest_version_id,
            None => return Ok(Err(format!("eval set #{} no longer exists", spec.evalset_id))),
        },
    };
    let Some(version) = store.get_evalset_version(version_id).await? else {
        return Ok(Err(format!("eval set version #{version_id} no longer exists")));
    };
    let known = store.list_candidates().await?;
    let mut chosen: Vec<&Candidate> = Vec::new();
    for id in &spec.candidate_ids {
        match known.iter().find(|c| c.id == *id) {
            Some(c) => chosen.push(c),
            None => return Ok(Err(format!("candidate #{id} has been deleted; edit the schedule"))),
        }
    }
    let estimate = crate::runs::estimate_of(&spec.config, &version, &chosen, &Default::default());
    if let Some(limit) = spec.max_requests
        && estimate.requests > limit
    {
        return Ok(Err(format!(
            "skipped: the run would send {} requests, over the budget of {limit} per run",
            estimate.requests
        )));
    }
    if let Some(limit) = spec.max_cost_usd {
        match estimate.max_cost_usd {
            Some(cost) if cost > limit => {
                return Ok(Err(format!(
                    "skipped: the run could cost up to ${cost:.2}, over the budget of ${limit:.2} per run"
                )));
            }
            _ if !estimate.unpriced.is_empty() => {
                return Ok(Err(format!(
                    "skipped: the budget is ${limit:.2} per run, but {} state no prices, so its cost cannot be bounded",
                    estimate.unpriced.join(", ")
                )));
            }
            _ => {}
        }
    }
    let name = truncate(
        &format!("{} · {}", spec.name, local_time(&spec.time_zone, due)),
        MAX_NAME_CHARS,
    );
    // The judging profile's SLO (the schedule's profile, else the eval set's), as any run takes it.
    let mut config = spec.config.clone();
    config.profile_slo = match spec.profile_id {
        Some(id) => crate::runs::profile_slo_by_id(store, id).await?,
        None => crate::runs::profile_slo_of(store, Some(&version.file.header.name)).await?,
    };
    let mut slo_errors = crate::domain::validation::FieldErrors::default();
    crate::domain::presets::check_capacity_slo(&config, &mut slo_errors);
    if !slo_errors.is_empty() {
        return Ok(Err(
            "skipped: finding the capacity needs an SLO with a target, in the schedule or its threshold profile"
                .to_string(),
        ));
    }
    Ok(Ok(NewRun {
        name,
        evalset_version_id: version.id,
        candidate_ids: spec.candidate_ids.clone(),
        config,
    }))
}

/// One look at every schedule at `now`: fires what is owed (each due time once, whatever
/// other scheduler looks at the same time) and starts the runs. Returns the firings this call
/// claimed.
pub async fn tick(store: &DynStore, runner: &Runner, now: Timestamp) -> Result<Vec<Firing>, AppError> {
    let mut fired = Vec::new();
    for schedule in store.list_schedules().await? {
        let last = store.last_firing_due(schedule.id).await?;
        let due = match schedule.due(now, last) {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(schedule = schedule.id, error = %e, "a schedule's cadence does not parse");
                continue;
            }
        };
        let (due_at, missed) = match due {
            Due::No => continue,
            Due::OnTime(at) => (at, false),
            Due::Missed(at) => (at, true),
        };
        let when = local_time(&schedule.spec.time_zone, due_at);
        let planned = run_for(store, &schedule, due_at).await?;
        let mut note = match (&planned, missed) {
            (Err(why), _) => why.clone(),
            (Ok(_), false) => format!("started on time for {when}"),
            (Ok(_), true) => format!(
                "due at {when}, missed while no scheduler was running: started once at {}",
                local_time(&schedule.spec.time_zone, now)
            ),
        };
        if let Some(last) = last
            && missed
            && let Ok((cadence, zone)) = schedule.spec.timing()
            && cadence.next_after(&zone, last).is_some_and(|first| first.0 < due_at.0)
        {
            note.push_str(" (earlier due times in the gap were not run)");
        }
        let firing = Firing {
            schedule_id: schedule.id,
            due_at,
            fired_at: now,
            run_id: None,
            missed,
            note,
        };
        let Some(claimed) = store.claim_firing(&firing, planned.as_ref().ok()).await? else {
            continue;
        };
        if let Some(run_id) = claimed.run_id {
            store
                .append_run_event(
                    run_id,
                    if missed { "warn" } else { "info" },
                    &format!("scheduled by {:?}: {}", schedule.spec.name, claimed.note),
                )
                .await?;
            runner.start(run_id);
        }
        store
            .append_audit(&NewAuditEntry {
                actor: format!("schedule #{}", schedule.id),
                action: Action::ScheduleFired,
                target: format!("schedule #{} {:?}", schedule.id, schedule.spec.name),
                detail: match claimed.run_id {
                    Some(run_id) => format!("run #{run_id}: {}", claimed.note),
                    None => claimed.note.clone(),
                },
            })
            .await?;
        tracing::info!(schedule = schedule.id, run = ?claimed.run_id, missed, "schedule fired");
        fired.push(claimed);
    }
    Ok(fired)
}

/// Starts the scheduler of this process (see the module comment): fires what is due, then
/// queues and sends the notifications of scheduled runs (`notify`). `base_url` is the server's
/// public URL, for the links in messages. Call once, from `serve`.
pub fn spawn(store: DynStore, runner: Runner, base_url: Option<String>) {
    tokio::spawn(async move {
        let client = crate::notify::client();
        loop {
            let now = Timestamp::now();
            if let Err(e) = tick(&store, &runner, now).await {
                tracing::warn!(error = %e, "the scheduler's look at the schedules failed; trying again");
            }
            if let Err(e) = crate::notify::queue_news(&store, now, base_url.as_deref()).await {
                tracing::warn!(error = %e, "queueing notifications failed; trying again");
            }
            if let Err(e) = crate::notify::deliver_due(&store, &client, Timestamp::now()).await {
                tracing::warn!(error = %e, "sending notifications failed; trying again");
            }
            tokio::time::sleep(TICK).await;
        }
    });
}
