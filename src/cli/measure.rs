//! `bakeoff measure` (one endpoint from the terminal) and `bakeoff calibrate` (the harness's
//! self-check against the built-in mock).
use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct MeasureArgs {}

#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {}

pub async fn run_measure(_args: MeasureArgs) -> anyhow::Result<()> {
    anyhow::bail!("bakeoff measure is not available yet")
}

pub async fn run_calibrate(_args: CalibrateArgs) -> anyhow::Result<()> {
    anyhow::bail!("bakeoff calibrate is not available yet")
}
