//! `bakeoff run start`: a run from the terminal, judged by a threshold profile, with the exit
//! code CI gates on and JSON / JUnit / Markdown reports. Files named on the command line
//! (eval set, candidates, profile) are stored first, as their import commands store them; the
//! run goes through the same `app` code as the run form and lands in the same archive.
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::app::AppError;
use crate::app::candidates::Actor;
use crate::app::files::{FileError, candidates, profiles, settings};
use crate::app::gate::progress::{RunProgress, progress};
use crate::app::gate::{self, Exit, GateReport, GateRun, report};
use crate::config::DatabaseArgs;
use crate::engine::run::Runner;
use crate::engine::run::writer::WriterSettings;
use crate::store::DynStore;

/// The exit codes, as `--help` shows them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  GO: every candidate passes every rule (and no significant regression against --baseline)
  1  NO-GO: a candidate fails a rule, or is significantly less accurate than the baseline run
  2  INCONCLUSIVE: nothing fails, but some rule could not be decided (more data needed) or was not measured
  3  configuration error: a bad file, an unknown name or flag; nothing was run
  4  run error: the run failed or was cancelled (e.g. the staged rollout stopped on an unreachable server)

JUnit (--report-junit): one <testsuite> per candidate, one <testcase> per rule; a failing rule is a
<failure> whose message is the reason; an inconclusive rule is also a <failure> (type=\"inconclusive\",
message \"inconclusive: …\"), since the gate does not pass on it; a rule not measured is <skipped>;
a run that did not finish is an <error> per candidate.";

#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    /// The eval set: a file (bakeoff JSONL, OpenAI evals, promptfoo YAML or CSV; stored as a
    /// version, idempotent) or the name of a stored eval set (its newest version).
    #[arg(long, value_name = "FILE|NAME")]
    pub evalset: String,
    /// Candidates, comma-separated or repeated: names of stored candidates, or candidates files
    /// (`*.toml`, imported first as `bakeoff candidate import` would).
    #[arg(long, value_name = "A,B|FILE", value_delimiter = ',', required = true)]
    pub candidates: Vec<String>,
    /// The threshold profile that judges the run: a profile file (imported first; a changed file
    /// appends a version) or the name of a stored profile.
    #[arg(long, value_name = "FILE|NAME")]
    pub profile: String,
    /// A run-settings file (preset and overrides); default: the run form's defaults.
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
    /// An archived (finished) run: fail with exit 1 when a candidate is significantly less
    /// accurate than its counterpart there (exact McNemar test on shared cases, as on the scorecard).
    #[arg(long, value_name = "RUN")]
    pub baseline: Option<i64>,
    /// Write the report as JSON (`bakeoff.gate/1`).
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,
    /// Write the report as JUnit XML.
    #[arg(long, value_name = "FILE")]
    pub report_junit: Option<PathBuf>,
    /// Write the report as Markdown for a pull-request comment.
    #[arg(long, value_name = "FILE")]
    pub report_md: Option<PathBuf>,
    /// Who signs a profile version a profile file creates (with --server: the token's user signs).
    #[arg(long, env = "BAKEOFF_CHANGED_BY", default_value_t = super::files::default_signer())]
    pub changed_by: String,
    /// Submit the run to a team server (e.g. https://bakeoff.example.com) through its API instead
    /// of running it here, and wait for its verdict. Files named by --evalset, --candidates and
    /// --profile are uploaded to it; names are resolved there. Same reports and exit codes.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The API token for --server (an editor's: `bakeoff user token create`). Prefer the
    /// BAKEOFF_TOKEN environment variable: a flag's value is visible in process lists and CI logs.
    #[arg(
        long,
        env = "BAKEOFF_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        requires = "server"
    )]
    pub token: Option<String>,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

/// Why `run start` stopped before a verdict, with the exit code it means.
pub struct Stop {
    pub exit: Exit,
    pub error: anyhow::Error,
}

pub(super) fn config(error: impl Into<anyhow::Error>) -> Stop {
    Stop {
        exit: Exit::Configuration,
        error: error.into(),
    }
}

/// An app error while preparing: wrong input is a configuration error, a store failure a run error.
fn prepare(error: AppError) -> Stop {
    match error {
        AppError::Store(_) => Stop {
            exit: Exit::RunError,
            error: error.into(),
        },
        other => config(other),
    }
}

/// A value of --candidates, --profile or --evalset that names a file rather than a stored thing.
fn is_file(value: &str, extensions: &[&str]) -> bool {
    Path::new(value).is_file() || extensions.iter().any(|e| value.ends_with(e))
}

/// Everything the files on the command line say, read and checked before the database is opened.
pub(super) struct Inputs {
    pub settings: settings::RunSettings,
    /// Per --candidates value: the specs of a file, or a name.
    pub candidates: Vec<Result<Vec<crate::domain::candidate::CandidateSpec>, String>>,
    pub profile: Result<crate::domain::thresholds::form::ProfileSave, String>,
    pub evalset: Result<crate::domain::evalset::EvalSetFile, String>,
}

/// The --candidates values, as read (blank ones dropped).
pub(super) fn candidate_values(args: &StartArgs) -> impl Iterator<Item = &str> {
    args.candidates.iter().map(|v| v.trim()).filter(|v| !v.is_empty())
}

pub(super) fn read_inputs(args: &StartArgs) -> Result<Inputs, Stop> {
    let file_error = |e: FileError| config(anyhow::anyhow!(e.to_string()));
    let settings = match &args.settings {
        Some(path) => {
            let text = super::files::read_text(path).map_err(config)?;
            settings::parse(&path.display().to_string(), &text).map_err(file_error)?
        }
        None => settings::RunSettings::defaults(),
    };
    let mut candidates = Vec::new();
    for value in candidate_values(args) {
        if is_file(value, &[".toml"]) {
            let text = super::files::read_text(Path::new(value)).map_err(config)?;
            candidates.push(Ok(candidates::parse(value, &text).map_err(file_error)?));
        } else {
            candidates.push(Err(value.to_string()));
        }
    }
    if candidates.is_empty() {
        return Err(config(anyhow::anyhow!("--candidates names no candidate")));
    }
    let profile = if is_file(&args.profile, &[".toml"]) {
        let text = super::files::read_text(Path::new(&args.profile)).map_err(config)?;
        let rationale = format!("imported by bakeoff run start from {}", args.profile);
        Ok(profiles::parse(&args.profile, &text, &args.changed_by, &rationale).map_err(file_error)?)
    } else {
        Err(args.profile.clone())
    };
    let evalset = if is_file(&args.evalset, &[".jsonl", ".json", ".yaml", ".yml", ".csv"]) {
        let source = super::evalset::SourceArgs {
            format: crate::domain::evalset::import::FormatChoice::Auto,
            name: None,
            task: None,
            prompt: None,
            grader: crate::domain::evalset::import::GraderChoice::Proposed,
        };
        Ok(super::evalset::read(Path::new(&args.evalset), &source)
            .map_err(config)?
            .file)
    } else {
        Err(args.evalset.clone())
    };
    Ok(Inputs {
        settings,
        candidates,
        profile,
        evalset,
    })
}

pub(super) async fn start(args: StartArgs) -> Result<GateReport, Stop> {
    let inputs = read_inputs(&args)?;
    let store = crate::store::connect(&args.database.database_url)
        .await
        .map_err(|e| config(anyhow::Error::from(e).context("opening the database")))?;
    check_names(&store, &args, &inputs).await?;
    let actor = Actor::terminal();
    let (candidate_ids, profile_id, evalset_version_id) = store_inputs(&store, &inputs, &actor).await?;

    // Spills and pauses as a run of `serve` does: the terminal's run loses nothing either.
    let runner = Runner::new(store.clone()).with_writer(WriterSettings::for_database(&args.database.database_url));
    let request = GateRun {
        evalset_version_id,
        candidate_ids,
        settings: inputs.settings.clone(),
    };
    let run_id = start_run(&store, &runner, &request, &args).await?;
    store
        .append_audit(&crate::domain::audit::NewAuditEntry {
            actor: actor.name.clone(),
            action: crate::domain::audit::Action::RunStarted,
            target: format!("run #{run_id}"),
            detail: "bakeoff run start".to_string(),
        })
        .await
        .map_err(|e| prepare(e.into()))?;
    eprintln!("run #{run_id} started");
    watch(&store, &runner, run_id).await?;

    let report = gate::judge(&store, run_id, profile_id, args.baseline)
        .await
        .map_err(|e| Stop {
            exit: Exit::RunError,
            error: anyhow::Error::from(e).context(format!("judging run #{run_id}")),
        })?;
    write_reports(&args, &report).map_err(|error| Stop {
        exit: Exit::RunError,
        error,
    })?;
    print_summary(&report);
    Ok(report)
}

/// Every name given is checked before any file is stored, so a wrong name changes nothing.
async fn check_names(store: &DynStore, args: &StartArgs, inputs: &Inputs) -> Result<(), Stop> {
    for name in inputs.candidates.iter().filter_map(|c| c.as_ref().err()) {
        gate::candidate_by_name(store, name).await.map_err(prepare)?;
    }
    if let Err(name) = &inputs.profile {
        gate::profile_by_name(store, name).await.map_err(prepare)?;
    }
    if let Err(name) = &inputs.evalset {
        gate::evalset_by_name(store, name).await.map_err(prepare)?;
    }
    if let Some(b) = args.baseline {
        gate::check_baseline(store, b).await.map_err(prepare)?;
    }
    let judge = inputs.settings.judge_candidate.trim();
    if !judge.is_empty() {
        gate::candidate_by_name(store, judge)
            .await
            .map_err(|e| config(anyhow::anyhow!("judge_candidate in --settings: {e}")))?;
    }
    Ok(())
}

/// The files given stored (as their import commands store them) and the names looked up:
/// (candidate ids, profile id, eval-set version id).
async fn store_inputs(store: &DynStore, inputs: &Inputs, actor: &Actor) -> Result<(Vec<i64>, i64, i64), Stop> {
    let mut candidate_ids = Vec::new();
    for c in &inputs.candidates {
        let ids = match c {
            Ok(specs) => candidates::import(store, specs, actor)
                .await
                .map_err(prepare)?
                .into_iter()
                .map(|saved| {
                    if let Some(note) = saved.credentials_note() {
                        eprintln!("note: {note}");
                    }
                    saved.candidate.id
                })
                .collect(),
            Err(name) => vec![gate::candidate_by_name(store, name).await.map_err(prepare)?.id],
        };
        for id in ids {
            if !candidate_ids.contains(&id) {
                candidate_ids.push(id);
            }
        }
    }
    let profile_id = match &inputs.profile {
        Ok(save) => profiles::import(store, save, &actor.name).await.map_err(prepare)?.0.id,
        Err(name) => gate::profile_by_name(store, name).await.map_err(prepare)?,
    };
    let evalset_version_id = match &inputs.evalset {
        Ok(file) => {
            let detail = "saved by bakeoff run start".to_string();
            crate::app::evalsets::save_version(store, file, &actor.name, detail)
                .await
                .map_err(prepare)?
                .id
        }
        Err(name) => gate::evalset_by_name(store, name).await.map_err(prepare)?,
    };
    Ok((candidate_ids, profile_id, evalset_version_id))
}

/// The run started; settings the run refuses are named in the --settings file, by line.
async fn start_run(store: &DynStore, runner: &Runner, request: &GateRun, args: &StartArgs) -> Result<i64, Stop> {
    match gate::start(store, runner, request).await {
        Ok(id) => Ok(id),
        Err(AppError::Fields(errors)) => {
            let text = match &args.settings {
                Some(path) => {
                    let body = std::fs::read_to_string(path).unwrap_or_default();
                    let problems = settings::problems_in(&body, &errors);
                    FileError {
                        file: path.display().to_string(),
                        problems,
                    }
                    .to_string()
                }
                None => errors.to_string(),
            };
            Err(config(anyhow::anyhow!(text)))
        }
        Err(e) => Err(prepare(e)),
    }
}

/// Waits for the run to end, drawing a progress bar with ETA on a terminal (plain lines every
/// 30 s otherwise). Ctrl-C cancels the run; it then ends as cancelled (exit 4).
async fn watch(store: &DynStore, runner: &Runner, run_id: i64) -> Result<(), Stop> {
    let (bar, tty) = progress_bar(run_id);
    let every = if tty { Duration::from_millis(500) } else { QUIET_EVERY };
    let mut tick = tokio::time::interval(every);
    let mut cancelled = false;
    let done = runner.wait(run_id);
    tokio::pin!(done);
    let stop = crate::app::shutdown::signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut done => break,
            _ = &mut stop, if !cancelled => {
                cancelled = true;
                bar.println("stopping: cancelling the run (finished records are kept)");
                runner.cancel(run_id);
            }
            _ = tick.tick() => {
                if let Ok(p) = progress(store, run_id).await {
                    show(&bar, &p, tty);
                }
            }
        }
    }
    if let Ok(p) = progress(store, run_id).await {
        show(&bar, &p, tty);
        bar.finish_and_clear();
        eprintln!("run #{run_id} {}: {}", p.status, counts(&p));
    }
    Ok(())
}

/// How often progress is printed when standard error is not a terminal (CI logs).
pub(super) const QUIET_EVERY: Duration = Duration::from_secs(30);

/// The progress bar with ETA, drawn only when standard error is a terminal (hidden otherwise);
/// and whether it is one.
pub(super) fn progress_bar(run_id: i64) -> (indicatif::ProgressBar, bool) {
    let tty = std::io::stderr().is_terminal();
    if !tty {
        return (indicatif::ProgressBar::hidden(), false);
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} run #{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} requests · ETA {eta} · {msg}",
        )
        .expect("a valid progress template"),
    );
    bar.set_prefix(run_id.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    (bar, true)
}

pub(super) fn counts(p: &RunProgress) -> String {
    format!("{}/{} requests, {} failed attempts", p.done, p.expected, p.failed)
}

pub(super) fn show(bar: &indicatif::ProgressBar, p: &RunProgress, tty: bool) {
    if tty {
        bar.set_length(p.expected.max(0) as u64);
        bar.set_position(p.done.max(0) as u64);
        bar.set_message(format!("{} · {} failed", p.status, p.failed));
    } else {
        eprintln!("run #{} {}: {}", p.run_id, p.status, counts(p));
    }
}

pub(super) fn write_reports(args: &StartArgs, report: &GateReport) -> anyhow::Result<()> {
    type Render = fn(&GateReport) -> String;
    let outputs: [(&Option<PathBuf>, Render); 3] = [
        (&args.report_json, report::json),
        (&args.report_junit, report::junit),
        (&args.report_md, report::markdown),
    ];
    for (path, render) in outputs {
        if let Some(path) = path {
            std::fs::write(path, render(report)).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// The verdict per candidate on standard output, then the overall one.
pub(super) fn print_summary(report: &GateReport) {
    for c in &report.candidates {
        println!("{}: {}", c.name, c.verdict.as_str());
        for reason in c.reasons.iter().take(5) {
            println!("  - {reason}");
        }
        if let Some(b) = &c.baseline {
            println!("  baseline: {}", b.text);
        }
    }
    match report.verdict {
        Some(v) => println!("verdict: {} (exit {})", v.as_str(), report.exit_code),
        None => println!(
            "run #{} {}{} (exit {})",
            report.run_id,
            report.status,
            report.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default(),
            report.exit_code
        ),
    }
}

/// `bakeoff run settings-export RUN`: how the stored run was executed, as a settings file that
/// `run start --settings` reads back to the same run configuration.
pub async fn export_settings(run_id: i64, output: Option<&Path>, database: &DatabaseArgs) -> anyhow::Result<()> {
    let store = crate::store::connect(&database.database_url).await?;
    let run = store
        .get_run(run_id)
        .await?
        .with_context(|| format!("there is no run #{run_id}"))?;
    let judge_candidate = match run.config.judge.as_ref().and_then(|j| j.override_id) {
        None => None,
        Some(id) => Some(
            store
                .get_candidate(id)
                .await?
                .with_context(|| format!("run #{run_id} was judged by candidate #{id}, which no longer exists"))?
                .spec
                .name,
        ),
    };
    let text =
        settings::export(&run.config, judge_candidate, &format!("run #{run_id} {:?}", run.name)).map_err(|lost| {
            anyhow::anyhow!(
                "run #{run_id} cannot be written as a settings file without changing it:\n  {}",
                lost.join("\n  ")
            )
        })?;
    super::files::write_out(output, &text, &format!("settings of run #{run_id}"))
}
