//! `bakeoff-measure`: `bakeoff measure` alone, in a binary that holds only the code a
//! measurement runs. The `bakeoff` binary carries every page, template, chart and database
//! dialect; the kernel maps its code in 64 KiB windows around every page a run touches, so a
//! measurement through it keeps ~20 MB more of it resident than this one does (docs/overhead.md).
//! `bakeoff measure` hands off to this binary when it sits beside it; both take the same flags
//! and give the same results.
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

/// Measure one endpoint from the terminal with bakeoff's metric definitions (the same flags as
/// `bakeoff measure`).
#[derive(Parser)]
#[command(name = "bakeoff-measure", version)]
struct Cli {
    #[command(flatten)]
    args: bakeoff::cli::measure_endpoint::MeasureArgs,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "BAKEOFF_LOG", default_value = "info")]
    log: String,
}

fn main() -> anyhow::Result<ExitCode> {
    bakeoff::limit_malloc_arenas();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).context("invalid --log filter")?)
        .with_writer(std::io::stderr)
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(bakeoff::cli::measure_endpoint::run(cli.args))
}
