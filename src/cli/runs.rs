//! `bakeoff run start|export|import|settings-export`: a run from the terminal with CI exit codes
//! (`gate`; a stored run's settings as the file it reads: `settings-export`), and
//! whole runs as `bakeoff.run/1` JSON, to move results between installations (the same format as
//! the web's export link and import form; API keys are never included).
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::app::transfer::{export_stream, import_from};
use crate::config::DatabaseArgs;
use crate::domain::calibers::HarnessReport;

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(subcommand)]
    pub action: RunAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum RunAction {
    /// Run candidates over an eval set without the web server, judge them by a threshold profile
    /// and exit with the verdict (the run is stored and appears in the archive).
    #[command(after_long_help = super::gate::EXIT_CODES, after_help = "Exit codes: 0 GO, 1 NO-GO, 2 INCONCLUSIVE, 3 configuration error, 4 run error (--help for details).")]
    Start(Box<super::gate::StartArgs>),
    /// Write a finished, failed or cancelled run (its eval-set version, candidates without keys,
    /// every record, the harness report and the event log) as JSON.
    Export {
        /// The run's id, as in `/runs/ID`.
        #[arg(long)]
        run_id: i64,
        /// Output file; `-` or omitted for standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Write how a stored run was executed (e.g. one started in the browser) as a run settings
    /// file, for `bakeoff run start --settings FILE`.
    SettingsExport {
        /// The run's id, as in `/runs/ID`.
        run_id: i64,
        /// Output file; standard output when omitted.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Store an exported run as a new run here; prints its id.
    Import {
        /// The exported JSON file.
        file: PathBuf,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    match args.action {
        RunAction::Start(start) => {
            let code = start_gate(*start).await;
            std::process::exit(code);
        }
        RunAction::Export {
            run_id,
            output,
            database,
        } => export(run_id, output, &database).await,
        RunAction::SettingsExport {
            run_id,
            output,
            database,
        } => super::gate::export_settings(run_id, output.as_deref(), &database).await,
        RunAction::Import { file, database } => import(&file, &database).await,
    }
}

/// `bakeoff run start`: the gate, on this machine's database or through a server's API; the
/// process's exit code.
async fn start_gate(args: super::gate::StartArgs) -> i32 {
    let outcome = match args.server.clone() {
        Some(server) => super::gate_server::start(&args, &server).await,
        None => super::gate::start(args).await,
    };
    match outcome {
        Ok(report) => report.exit_code,
        Err(stop) => {
            eprintln!("error: {:#}", stop.error);
            stop.exit.code()
        }
    }
}

/// `bakeoff run export`: the run as `bakeoff.run/1` JSON, to a file or standard output.
async fn export(run_id: i64, output: Option<PathBuf>, database: &DatabaseArgs) -> anyhow::Result<()> {
    let store = crate::store::connect(&database.database_url).await?;
    // Streamed a page of records at a time, as the web's export link is: a run of a
    // million requests is ~1.8 GB of JSON, never held whole.
    let mut pieces = export_stream(store.clone(), run_id)
        .await
        .with_context(|| format!("exporting run {run_id}"))?;
    let path = output.filter(|p| p.as_os_str() != "-");
    // A file is written beside its name and renamed when whole: an export that stops
    // half-way (a store error) leaves no file that looks complete.
    let partial = path.as_ref().map(|p| {
        let mut name = p.clone().into_os_string();
        name.push(".partial");
        PathBuf::from(name)
    });
    let mut out: Box<dyn Write> = match &partial {
        Some(partial) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(partial).with_context(|| format!("creating {}", partial.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut bytes = 0;
    let written: anyhow::Result<()> = async {
        while let Some(piece) = futures_util::StreamExt::next(&mut pieces).await {
            let piece = piece.with_context(|| format!("exporting run {run_id}"))?;
            out.write_all(&piece).context("writing the export")?;
            bytes += piece.len();
        }
        if partial.is_none() {
            out.write_all(b"\n")?;
        }
        out.flush().context("writing the export")
    }
    .await;
    drop(out);
    if let (Err(_), Some(partial)) = (&written, &partial) {
        let _ = std::fs::remove_file(partial);
    }
    written?;
    if let (Some(path), Some(partial)) = (path, partial) {
        std::fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))?;
        let harness = store.get_run_harness(run_id).await?;
        eprintln!(
            "run {run_id}: {bytes} bytes{} written to {}",
            harness_note(harness.as_ref()),
            path.display()
        );
    }
    Ok(())
}

/// `bakeoff run import`: a `bakeoff.run/1` file stored as a new run (once: by content hash).
async fn import(file: &Path, database: &DatabaseArgs) -> anyhow::Result<()> {
    let source = std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
    let store = crate::store::connect(&database.database_url).await?;
    // Read as a stream: a million-record export is never in memory whole.
    let report = import_from(store.as_ref(), &crate::app::candidates::Actor::terminal(), source)
        .await
        .with_context(|| format!("importing {}", file.display()))?;
    let imported = report.imported;
    let id = imported.run_id();
    println!("{id}");
    if let crate::app::transfer::Imported::Before(_) = imported {
        eprintln!(
            "{} was imported before, as run {id}: nothing was stored (imports are recognised by content hash)",
            file.display()
        );
        return Ok(());
    }
    store
        .append_audit(&crate::domain::audit::NewAuditEntry {
            actor: crate::app::accounts::terminal_actor(),
            action: crate::domain::audit::Action::RunImported,
            target: format!("run #{id}"),
            detail: format!("imported from {} by bakeoff run import", file.display()),
        })
        .await?;
    eprintln!(
        "imported run {} ({} records{}) as run {id}",
        report.exported_run_id,
        report.records,
        harness_note(report.harness.as_ref())
    );
    for (name, var) in &report.key_envs_not_taken {
        eprintln!(
            "candidate {name:?} was created without credentials: the export's key variable {var} was not \
             taken (set it on the candidate if this server should send that key there)"
        );
    }
    Ok(())
}

/// ", harness report (speed UNRELIABLE)" etc., for the messages above.
fn harness_note(harness: Option<&HarnessReport>) -> &'static str {
    match harness {
        Some(h) if h.unreliable => " and a harness report flagging its speed figures UNRELIABLE",
        Some(_) => " and the harness report",
        None => ", no harness report",
    }
}
