use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use bakeoff::config::{Command, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&config.log).context("invalid --log filter")?)
        .init();
    match config.command {
        Command::Serve(args) => bakeoff::web::serve::run(args).await,
        Command::Mock(args) => bakeoff::mock::run_cli(args).await,
        Command::Migrate(args) => {
            bakeoff::store::connect(&args.database_url).await?;
            tracing::info!("database is migrated");
            Ok(())
        }
        Command::Evalset(args) => bakeoff::cli::evalset::run(args).await,
        Command::Run(args) => bakeoff::cli::runs::run(args).await,
        Command::Measure(args) => bakeoff::cli::measure::run_measure(args).await,
        Command::Calibrate(args) => bakeoff::cli::measure::run_calibrate(args).await,
    }
}
