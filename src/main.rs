use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use bakeoff::cli::{Cli, Command};

fn main() -> anyhow::Result<ExitCode> {
    // Before the runtime's threads exist.
    bakeoff::limit_malloc_arenas();
    let cli = Cli::parse();
    if matches!(cli.command, Command::Measure(_)) {
        hand_off_measure(&cli.log);
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if matches!(cli.command, Command::Serve(_) | Command::Worker(_)) {
        // Pages, exports and the end-of-run summaries run below the measurement runtime's
        // priority, so a big page being computed never delays a stream's timestamps, and their
        // CPU time is not charged to the harness. The measurement runtime's threads start first,
        // from this thread, at normal priority (a thread inherits its starter's).
        use bakeoff::engine::run::runtime as engine;
        let _ = engine::handle();
        runtime
            .thread_name(engine::PAGE_THREAD_NAME)
            .on_thread_start(engine::lower_this_thread_priority)
            .on_thread_stop(engine::page_thread_ending);
    }
    runtime
        .build()
        .context("starting the async runtime")?
        .block_on(run(cli))
}

/// `bakeoff measure` runs as `bakeoff-measure` when that binary sits beside this one: the same
/// code and flags in a binary that maps only what a measurement runs, so the client's own memory
/// is not this binary's pages, templates and database dialects (docs/overhead.md). Replaces this
/// process (no thread has started yet); returns only when there is no such binary or it cannot
/// be started, and then the measurement runs here.
#[cfg(unix)]
fn hand_off_measure(log: &str) {
    use std::os::unix::process::CommandExt;
    let Some(lean) = std::env::current_exe()
        .ok()
        .and_then(|me| Some(me.parent()?.join("bakeoff-measure")))
        .filter(|p| p.is_file())
    else {
        return;
    };
    // Everything after the subcommand; a `--log` given before it travels as the variable.
    let args: Vec<_> = std::env::args_os().skip_while(|a| a != "measure").skip(1).collect();
    let error = std::process::Command::new(&lean)
        .args(args)
        .env("BAKEOFF_LOG", log)
        .exec();
    eprintln!(
        "bakeoff: could not start {} ({error}); measuring in this process",
        lean.display()
    );
}

#[cfg(not(unix))]
fn hand_off_measure(_log: &str) {}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let logs = tracing_subscriber::fmt().with_env_filter(EnvFilter::try_new(&cli.log).context("invalid --log filter")?);
    // `bakeoff run` prints results (a verdict, a run id) on standard output: its log goes to stderr.
    if matches!(cli.command, Command::Run(_)) {
        logs.with_writer(std::io::stderr).init();
    } else {
        logs.init();
    }
    let done = match cli.command {
        Command::Serve(args) => bakeoff::web::serve::run(args).await,
        Command::Mock(args) => bakeoff::cli::mock::run(args).await,
        Command::Migrate(args) => {
            bakeoff::store::connect(&args.database_url).await?;
            tracing::info!("database is migrated");
            Ok(())
        }
        Command::Evalset(args) => bakeoff::cli::evalset::run(args).await,
        Command::Workload(args) => bakeoff::cli::workload::run(args).await,
        Command::Run(args) => bakeoff::cli::runs::run(args).await,
        Command::Candidate(args) => bakeoff::cli::files::run_candidate(args).await,
        Command::Profile(args) => bakeoff::cli::files::run_profile(args).await,
        Command::Schedule(args) => bakeoff::cli::schedules::run(args).await,
        // The one command whose status says more than success or failure (see its --help).
        Command::Measure(args) => return bakeoff::cli::measure_endpoint::run(args).await,
        Command::Calibrate(args) => bakeoff::cli::calibrate::run(args).await,
        Command::User(args) => bakeoff::cli::users::run(args).await,
        Command::Worker(args) => bakeoff::cli::worker::run(args).await,
    };
    done.map(|()| ExitCode::SUCCESS)
}
