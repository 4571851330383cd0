//! `bakeoff evalset import|export|validate`.
use clap::{Args, Subcommand};

#[derive(Debug, Clone, Args)]
pub struct EvalsetArgs {
    #[command(subcommand)]
    pub action: EvalsetAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum EvalsetAction {
    /// Check an eval-set file and report the first problem with its line and field.
    Validate { file: std::path::PathBuf },
}

pub async fn run(args: EvalsetArgs) -> anyhow::Result<()> {
    match args.action {
        EvalsetAction::Validate { file } => {
            let text = std::fs::read_to_string(&file)?;
            let parsed = crate::domain::evalset::EvalSetFile::parse(&file.display().to_string(), &text)?;
            println!(
                "{}: valid, {} cases, version {}",
                file.display(),
                parsed.cases.len(),
                &parsed.content_hash()[..12]
            );
            Ok(())
        }
    }
}
