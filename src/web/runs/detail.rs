//! `GET /runs/{id}` and its live fragment `GET /runs/{id}/live`: status, conditions, progress
//! per candidate, the event log, and — once records exist — the first side-by-side table.
//!
//! While the run is unfinished the fragment carries htmx polling attributes (and the full page
//! a `<noscript>` refresh); once it is terminal they are omitted, so polling stops by itself.
//!
//! What the page shows from the run's records is computed (and, once the run ended, stored) by
//! `app::pages::run_page`; this module adds the status, units, stops and event log.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::response::Redirect;

use super::again::{AgainButton, StopView, buttons};
use crate::app::pages::charts::Chart;
use crate::app::pages::report::{HarnessView, LevelsView, QualityView, harness_view};
pub use crate::app::pages::run_page::{CaseRow, OverTimeView, ProgressRow, RateLimitRow, Scorecard};
use crate::app::pages::run_page::{cached_record_parts, candidate_name};
use crate::app::runs::{RunRecords, RunVersion};
use crate::domain::candidate::Candidate;
use crate::domain::evalset::EvalSetHeader;
use crate::domain::format::visible_controls;
use crate::domain::run::{Run, RunConfig, RunStatus};
use crate::store::EvalSetVersionHead;
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::views::{NOT_MEASURED, or_dash, short_hash};

/// Most recent event-log lines shown.
pub const EVENT_LINES: usize = 100;

#[derive(Template, WebTemplate)]
#[template(path = "runs/detail.html")]
pub struct RunPage {
    pub nav: &'static str,
    pub id: i64,
    pub name: String,
    pub evalset_name: String,
    pub evalset_version_id: i64,
    pub evalset_hash: String,
    /// (label, value) of every condition the run was configured with.
    pub config: Vec<(&'static str, String)>,
    pub live: LiveView,
    /// Other runs that sent requests to one of this run's candidates at the same time: their
    /// load shares the server, so neither run's speed figures stand alone.
    pub overlaps: Vec<Overlap>,
    /// The servers' telemetry in brief, once the run has ended (None: nothing was scraped).
    pub telemetry: Option<crate::app::telemetry::TelemetryBrief>,
}

#[derive(Debug, Clone)]
pub struct Overlap {
    pub run_id: i64,
    pub run_name: String,
    pub candidates: String,
}

/// The part of the run page that changes while it runs.
#[derive(Template, WebTemplate)]
#[template(path = "runs/live.html")]
pub struct LivePartial {
    pub live: LiveView,
}

#[derive(Debug, Clone)]
pub struct LiveView {
    pub run_id: i64,
    /// Sent over server-sent events (no polling attributes needed).
    pub pushed: bool,
    pub status: &'static str,
    pub terminal: bool,
    /// Paused (the database stayed away): stopped until resumed, so not polled.
    pub paused: bool,
    pub created: String,
    pub started: String,
    pub finished: String,
    pub error: Option<String>,
    /// Why a queued run has not started, e.g. "waiting: run #12 is measuring swift-7b".
    pub waiting: Option<String>,
    pub progress: Vec<ProgressRow>,
    /// Per candidate whose provider stated rate limits or answered 429.
    pub rate_limits: Vec<RateLimitRow>,
    /// A run over conversation cases: figures by turn (templates/runs/conversations.html).
    pub conversations: Option<crate::app::pages::conversations::ConversationsView>,
    pub scorecard: Option<Scorecard>,
    pub cases: Vec<CaseRow>,
    pub cases_note: Option<String>,
    /// The harness's report on itself (stored when the run's execution ends).
    pub harness: Option<HarnessView>,
    /// Per-level figures of a load-shape run.
    pub levels: Option<LevelsView>,
    /// Quality reports per candidate, from the grades.
    pub quality: Vec<QualityView>,
    /// Pass rate per grader × candidate as bars (quality section).
    pub pass_rates: Option<Chart>,
    /// Throughput, TTFT and errors per time bucket (refreshed with the live fragment).
    pub over_time: Option<OverTimeView>,
    /// A find-capacity run's searches (templates/runs/capacity.html): read on every call, they
    /// change after each probe.
    pub capacity: Option<crate::app::pages::capacity::CapacityView>,
    /// A replay run's fidelity per candidate (templates/runs/replay.html): read on every call.
    pub replay: Option<crate::app::pages::replay::ReplayView>,
    /// Tool figures per candidate and load level (templates/runs/tool_levels.html).
    pub tool_levels: Option<crate::app::pages::tool_levels::ToolLevelsView>,
    /// Structured output per candidate and level (templates/runs/structured.html).
    pub structured: Option<crate::app::pages::tool_levels::StructuredView>,
    pub events: Vec<EventRow>,
    /// Candidates stopped within the run, with their outcome (NO-GO).
    pub stops: Vec<StopView>,
    /// "Run again" (any ended run) / "Run again without X" (runs that failed or stopped a
    /// candidate).
    pub again: Vec<AgainButton>,
    /// The units the run is measured in (one per candidate, then the closing step) and which
    /// worker measured each; empty for runs from before workers. Read on every call, never
    /// cached: they change while the run goes.
    pub units: Vec<UnitRow>,
    /// Each candidate's verdict by the profile that judges the run (once it ended).
    pub verdicts: Option<RunVerdicts>,
}

/// The run's verdicts by one threshold profile: the decision the page opens with.
#[derive(Debug, Clone)]
pub struct RunVerdicts {
    pub profile_id: i64,
    pub profile: String,
    /// In the run's candidate order; empty while the run is not judged yet.
    pub cells: Vec<crate::web::archive::list::VerdictCell>,
    /// Candidates of the run without a verdict yet.
    pub missing: usize,
    /// The profile is the one chosen for the run's eval set (else the default one).
    pub own: bool,
    /// Why the profile may not fit the run's eval set (written for another), if it may not.
    pub fit: Option<String>,
}

/// The run's verdicts by the default threshold profile (the one the archive shows), or None
/// before the run ended or without any profile.
async fn run_verdicts(state: &AppState, run: &Run, candidates: &[Candidate]) -> Result<Option<RunVerdicts>, WebError> {
    if !run.status.is_terminal() {
        return Ok(None);
    }
    let profiles = state.store.list_threshold_profiles().await?;
    // The profile written for the run's eval set, else the default one (saying it may not fit).
    let evalset = state
        .store
        .get_evalset_version_head(run.evalset_version_id)
        .await?
        .map(|v| v.header.name);
    let Some((id, own)) = crate::app::profiles::judging_profile(&state.store, evalset.as_deref()).await? else {
        return Ok(None);
    };
    let Some(p) = profiles.iter().find(|p| p.id == id) else {
        return Ok(None);
    };
    let shown = crate::web::archive::list::ShownProfile {
        id: p.id,
        name: p.name.clone(),
        current_version: p.version,
    };
    let names: Vec<String> = run
        .candidate_ids
        .iter()
        .map(|&c| candidate_name(candidates, c))
        .collect();
    let mut all = state.store.list_run_verdicts(&[run.id], p.id).await?;
    // Not judged yet (the background judge waits for an idle runner): judge it now when no run
    // is measuring — the same computation, so the page opens with its decision.
    let idle = tokio::time::timeout(std::time::Duration::ZERO, state.runner.until_idle())
        .await
        .is_ok();
    if all.is_empty() && idle {
        match crate::app::verdicts::store_verdicts(&state.store, run.id, p.id).await {
            Ok(_) => all = state.store.list_run_verdicts(&[run.id], p.id).await?,
            Err(e) => tracing::warn!(run_id = run.id, error = %e, "judging the run for its page failed"),
        }
    }
    let cells = crate::web::archive::list::verdict_cells(&shown, &run.candidate_ids, &names, run.id, &all);
    let fit = match (&evalset, own) {
        (Some(name), false) => crate::app::profiles::fit_note(&state.store, name, p.id, &p.name).await?,
        _ => None,
    };
    Ok(Some(RunVerdicts {
        fit,
        own,
        profile_id: p.id,
        profile: p.name.clone(),
        missing: run.candidate_ids.len().saturating_sub(cells.len()),
        cells,
    }))
}

/// One unit of the run: what it measures, who measured it, and its harness report.
#[derive(Debug, Clone)]
pub struct UnitRow {
    pub seq: u32,
    /// The candidate's name, or "closing step".
    pub what: String,
    /// queued, leased or done.
    pub status: &'static str,
    /// The worker that holds or last held it; "—" before any.
    pub worker: String,
    pub claims: u32,
    pub started: String,
    pub finished: String,
    /// Its harness report, summarised; None for the closing step or before the unit is done.
    pub harness: Option<UnitHarness>,
}

/// A unit's harness report in four figures.
#[derive(Debug, Clone)]
pub struct UnitHarness {
    /// "1.2 CPU-s / 8.4 s wall".
    pub cpu: String,
    /// "35.1 CPU-s/Mtok".
    pub cpu_per_mtok: String,
    /// "p99 1.4 ms" (the event loop's lag).
    pub lag_p99: String,
    pub unreliable: bool,
    pub reasons: Vec<String>,
}

fn unit_rows(units: &[crate::domain::workers::RunUnit], candidates: &[Candidate]) -> Vec<UnitRow> {
    use crate::domain::format::significant;
    units
        .iter()
        .map(|u| UnitRow {
            seq: u.seq,
            what: match u.candidate_id {
                // A split load's share, with its worker's clock offset to the database's.
                Some(id) if u.shards > 1 => format!(
                    "{}, share {} of {}{}",
                    candidate_name(candidates, id),
                    u.shard + 1,
                    u.shards,
                    match (u.clock_offset_ms, u.clock_rtt_ms) {
                        (Some(off), Some(rtt)) => format!(" (clock {off:+.2} ms ± {:.2})", rtt / 2.0),
                        _ => String::new(),
                    }
                ),
                Some(id) => candidate_name(candidates, id),
                None => "closing step".to_string(),
            },
            status: u.status.as_str(),
            worker: u.worker.clone().unwrap_or_else(|| NOT_MEASURED.to_string()),
            claims: u.claims,
            started: or_clock(u.started_at),
            finished: match (u.started_at, u.finished_at) {
                (Some(a), Some(b)) => format!(
                    "{} ({})",
                    clock(b),
                    crate::domain::format::duration((b.0 - a.0) as f64 / 1000.0)
                ),
                (None, Some(b)) => clock(b),
                _ => NOT_MEASURED.to_string(),
            },
            harness: u.harness.as_ref().map(|h| UnitHarness {
                cpu: match h.cpu_s {
                    Some(c) => format!("{} CPU-s / {} s wall", significant(c), significant(h.wall_s)),
                    None => format!("not measurable ({} s wall)", significant(h.wall_s)),
                },
                cpu_per_mtok: h.cpu_s_per_million_tokens.map_or_else(
                    || format!("{NOT_MEASURED} CPU-s/Mtok"),
                    |p| format!("{} CPU-s/Mtok", significant(p)),
                ),
                lag_p99: h.runtime_lag_ms.as_ref().map_or_else(
                    || format!("p99 {NOT_MEASURED}"),
                    |d| format!("p99 {} ms", significant(d.p99)),
                ),
                unreliable: h.unreliable,
                reasons: h.reasons.clone(),
            }),
        })
        .collect()
}

/// `14:03:07`: a unit's times to the second, UTC (the run's dates are in its header).
fn clock(t: crate::domain::Timestamp) -> String {
    let format = time::macros::format_description!("[hour]:[minute]:[second]");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.0) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| NOT_MEASURED.to_string())
}

fn or_clock(t: Option<crate::domain::Timestamp>) -> String {
    t.map_or_else(|| NOT_MEASURED.to_string(), clock)
}

impl LiveView {
    /// Whether the charts section has anything to show.
    pub fn has_charts(&self) -> bool {
        self.over_time.is_some() || self.levels.as_ref().is_some_and(|l| !l.charts.is_empty())
    }
}

/// The run over time: its charts and the same figures as a table.

#[derive(Debug, Clone)]
pub struct EventRow {
    pub at: String,
    pub level: String,
    pub message: String,
}

pub async fn page(State(state): State<AppState>, Path(raw): Path<String>) -> Result<RunPage, WebError> {
    let (run, version, candidates) = load(&state, &raw).await?;
    let live = live_view(&state, &run, &candidates).await?;
    let telemetry = if run.status.is_terminal() {
        crate::app::telemetry::brief(&state.store, run.id).await?
    } else {
        None
    };
    Ok(RunPage {
        telemetry,
        nav: "runs",
        id: run.id,
        name: run.name.clone(),
        evalset_name: version
            .as_ref()
            .map(|v| v.header.name.clone())
            .unwrap_or_else(|| format!("eval set version #{}", run.evalset_version_id)),
        evalset_version_id: run.evalset_version_id,
        evalset_hash: version
            .as_ref()
            .map(|v| short_hash(&v.content_hash).to_string())
            .unwrap_or_default(),
        config: config_rows(&run.config, version.as_ref().map(|v| &v.header)),
        overlaps: overlapping_runs(&state, &run, &candidates).await?,
        live,
    })
}

/// How many of each candidate's newest runs are checked for overlap.
const OVERLAP_LOOKBACK: i64 = 50;

/// Runs that shared a candidate with `run` while both were executing (start to end, or now
/// for an unfinished run).
async fn overlapping_runs(state: &AppState, run: &Run, candidates: &[Candidate]) -> Result<Vec<Overlap>, WebError> {
    let Some(start) = run.started_at else {
        return Ok(Vec::new());
    };
    // An imported run was measured elsewhere: it overlaps nothing here, nor anything here it.
    if state.store.run_import_hash(run.id).await?.is_some() {
        return Ok(Vec::new());
    }
    let now = crate::domain::Timestamp::now();
    let end = run.finished_at.unwrap_or(now);
    let mut out: Vec<Overlap> = Vec::new();
    for &candidate_id in &run.candidate_ids {
        let filter = crate::store::RunFilter {
            candidate_id: Some(candidate_id),
            measured_here: true,
            ..Default::default()
        };
        for other in state.store.list_runs_filtered(&filter, OVERLAP_LOOKBACK, 0).await? {
            let o = &other.run;
            let Some(o_start) = o.started_at else { continue };
            let o_end = o.finished_at.unwrap_or(now);
            if o.id == run.id || o_start.0 >= end.0 || start.0 >= o_end.0 {
                continue;
            }
            let name = candidate_name(candidates, candidate_id);
            match out.iter_mut().find(|x| x.run_id == o.id) {
                Some(x) => {
                    x.candidates.push_str(", ");
                    x.candidates.push_str(&name);
                }
                None => out.push(Overlap {
                    run_id: o.id,
                    run_name: o.name.clone(),
                    candidates: name,
                }),
            }
        }
    }
    Ok(out)
}

pub async fn live(State(state): State<AppState>, Path(raw): Path<String>) -> Result<LivePartial, WebError> {
    let (run, _, candidates) = load(&state, &raw).await?;
    Ok(LivePartial {
        live: live_view(&state, &run, &candidates).await?,
    })
}

/// `POST /runs/{id}/cancel`: stops an unfinished run. Records already stored are kept; a run
/// that this process is not executing (e.g. queued before a restart) is marked cancelled directly.
pub async fn cancel(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    let run = crate::app::runs::cancel_run(&state.store, &state.runner, id, "the run page").await?;
    crate::web::audit::record(
        &state,
        crate::domain::audit::Action::RunCancelled,
        format!("run #{id} {:?}", run.name),
        String::new(),
    )
    .await?;
    Ok(Redirect::to(&format!("/runs/{id}")))
}

/// The run, its eval-set version's head (its cases are read only where a summary is computed
/// from them: `RunVersion`) and its candidates.
pub(super) async fn load(
    state: &AppState,
    raw: &str,
) -> Result<(Run, Option<EvalSetVersionHead>, Vec<Candidate>), WebError> {
    let id = parse_id(raw, "run")?;
    let run = state
        .store
        .get_run(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run #{id}")))?;
    let version = state.store.get_evalset_version_head(run.evalset_version_id).await?;
    // As the run measured them (its snapshot), not as they are now.
    let candidates = state.store.run_candidates(run.id).await?;
    Ok((run, version, candidates))
}

/// Every condition of the run, in words, for the header and the table's caption.
fn config_rows(c: &RunConfig, header: Option<&EvalSetHeader>) -> Vec<(&'static str, String)> {
    let inherited = |v: Option<String>| match v {
        Some(v) => format!("{v} (from the eval set)"),
        None => "candidate's default".to_string(),
    };
    let mut rows = vec![
        ("concurrency", c.concurrency.to_string()),
        ("streaming", if c.stream { "on" } else { "off" }.to_string()),
        (
            "tool calls",
            format!(
                "{} — for tool cases; providers without a native tool API use prompt mode",
                crate::app::pages::tool_levels::mode_text(c.tool_mode)
            ),
        ),
        (
            "max_tokens",
            match c.max_tokens {
                Some(n) => n.to_string(),
                None => inherited(header.and_then(|h| h.max_tokens).map(|n| n.to_string())),
            },
        ),
        (
            "temperature",
            match c.temperature {
                Some(t) => t.to_string(),
                None => inherited(header.and_then(|h| h.temperature).map(|t| t.to_string())),
            },
        ),
        ("repetitions", c.repetitions.to_string()),
        ("warm-ups (excluded)", c.warmup_requests.to_string()),
        (
            "staged start (excluded)",
            if c.staged_rollout {
                "on: shortest case, longest case, 4 at once".to_string()
            } else {
                "off".to_string()
            },
        ),
        (
            "timeout",
            format!(
                "{} s whole request · first token {} s · stall {} s",
                c.timeout_secs,
                c.first_token_timeout(),
                c.stall_timeout()
            ),
        ),
        ("retries", c.retries.to_string()),
        (
            "cases",
            match c.case_limit {
                Some(n) => format!("first {n}"),
                None => "all".to_string(),
            },
        ),
        ("load", crate::app::pages::report::shape_text(c)),
        (
            "staged rollout",
            if c.staged_rollout {
                "on (shortest case, longest case, a few at once, then everything; not in the figures)"
            } else {
                "off"
            }
            .to_string(),
        ),
        (
            "past saturation",
            if c.measure_past_saturation {
                "measured: a sweep goes on past a level whose server queue was growing"
            } else {
                "a sweep skips the levels above a level whose server queue was growing"
            }
            .to_string(),
        ),
        (
            "stop when decided",
            if c.stop_when_decided {
                "on: each level stops once its SLO attainment's 99 % interval is on one side of the target"
            } else {
                "off: every level sends its whole plan"
            }
            .to_string(),
        ),
        (
            "SLOs (goodput)",
            c.judging_slo().describe().unwrap_or_else(|| "none set".to_string()),
        ),
    ];
    rows.push((
        "telemetry scrapes",
        format!(
            "every {} s and at each level's start and end (candidates with a metrics URL)",
            crate::domain::format::shortest(c.scrape_interval())
        ),
    ));
    if let Some(think) = c.think_time {
        rows.push((
            "think time (conversations)",
            format!(
                "{} between a reply and the next turn; {}; {}; measured window: {}",
                think.label(),
                crate::domain::conversation::stagger_label(&think),
                crate::domain::conversation::SESSION_RULE,
                crate::domain::conversation::RAMP_RULE
            ),
        ));
    }
    if let Some(n) = c.requests_per_level {
        rows.push((
            "requests per level",
            format!("{n} per repetition, cycling through the cases"),
        ));
    }
    if let Some(s) = c.duration_secs {
        rows.push(("duration per level", format!("at most {s} s per repetition")));
    }
    rows
}

pub(super) async fn live_view(state: &AppState, run: &Run, candidates: &[Candidate]) -> Result<LiveView, WebError> {
    let parts = cached_record_parts(
        &state.store,
        &state.views.run_page,
        run,
        &RunVersion::of(run),
        candidates,
        &RunRecords::of(run.id),
    )
    .await?;
    // Read on every call (one row): it is stored just before the run turns terminal.
    let harness = state.store.get_run_harness(run.id).await?.as_ref().map(harness_view);
    let stops = state.store.list_candidate_stops(run.id).await?;
    let failing: Vec<i64> = if run.status == RunStatus::Failed {
        let progress = state.store.run_progress(run.id).await?;
        progress
            .iter()
            .filter(|p| p.failed_attempts > 0)
            .map(|p| p.candidate_id)
            .collect()
    } else {
        Vec::new()
    };
    let mut again = buttons(run, &stops, &failing, candidates);
    // A run whose tool cases were graded offers the other tool mode, and links the run that
    // measured it (read on every call: it may come later).
    let mut tool_levels = parts.tool_levels;
    if let Some(tl) = &mut tool_levels {
        again.extend(super::again::other_mode_button(run));
        tl.other_mode = crate::app::pages::tool_levels::other_mode_run(&state.store, run).await?;
    }
    let stops = stops
        .iter()
        .map(|s| StopView {
            candidate_id: s.candidate_id,
            candidate: candidate_name(candidates, s.candidate_id),
            outcome: s.outcome(),
            at: s.at.display(),
        })
        .collect();
    let units = unit_rows(&state.store.list_run_units(run.id).await?, candidates);
    let verdicts = run_verdicts(state, run, candidates).await?;
    // Cost per 1,000 answers at capacity here; per correct answer on the scorecard.
    let capacity = crate::app::pages::capacity::capacity_view(
        &state.store.list_run_capacity(run.id).await?,
        !run.status.is_terminal(),
        candidates,
        |_| None,
    );
    let replay = crate::app::pages::replay::replay_view(&state.store, run, candidates).await?;
    let mut levels = parts.levels;
    if let (Some(lv), Some(rp)) = (&mut levels, &replay) {
        crate::app::pages::replay::mark_levels(lv, rp);
    }
    let mut events = state.store.list_run_events(run.id).await?;
    let skip = events.len().saturating_sub(EVENT_LINES);
    let events = events
        .drain(skip..)
        .map(|e| EventRow {
            at: e.at.display(),
            level: e.level,
            message: visible_controls(&e.message).into_owned(),
        })
        .collect();

    Ok(LiveView {
        run_id: run.id,
        pushed: false,
        status: run.status.as_str(),
        terminal: run.status.is_terminal(),
        paused: run.status == RunStatus::Paused,
        created: run.created_at.display(),
        started: or_dash(run.started_at),
        finished: or_dash(run.finished_at),
        error: run.error.clone(),
        waiting: state.runner.waiting_reason(run.id),
        progress: parts.progress,
        rate_limits: parts.rate_limits,
        conversations: parts.conversations,
        scorecard: parts.scorecard,
        cases: parts.cases,
        cases_note: parts.cases_note,
        harness,
        levels,
        quality: parts.quality,
        pass_rates: parts.pass_rates,
        over_time: parts.over_time,
        capacity,
        replay,
        tool_levels,
        structured: parts.structured,
        events,
        stops,
        again,
        units,
        verdicts,
    })
}
