//! `bakeoff schedule import|export`: schedules as TOML files (`app::files::schedules`,
//! docs/schedules.md). A file with any problem changes nothing; the error names file, line and
//! field. Notification targets are not exported: their secrets stay on the server.
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::files::{read_text, write_out};
use crate::app::files::schedules;
use crate::config::DatabaseArgs;

#[derive(Debug, Clone, Args)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    pub action: ScheduleAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ScheduleAction {
    /// Store the schedules of a file: a new name is created, a known one replaced (all or
    /// nothing).
    Import {
        /// A schedules file (`bakeoff_schedules = 1` and `[[schedule]]` tables).
        file: PathBuf,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Write stored schedules as a schedules file.
    Export {
        /// Schedule names; all schedules when none is given.
        names: Vec<String>,
        /// Output file; standard output when omitted.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

pub async fn run(args: ScheduleArgs) -> anyhow::Result<()> {
    match args.action {
        ScheduleAction::Import { file, database } => {
            let text = read_text(&file)?;
            let store = crate::store::connect(&database.database_url).await?;
            let actor = crate::app::accounts::terminal_actor();
            for (id, name, outcome) in schedules::import(&store, &file.display().to_string(), &text, &actor).await? {
                println!("{outcome} schedule #{id} {name:?}");
            }
            Ok(())
        }
        ScheduleAction::Export {
            names,
            output,
            database,
        } => {
            let store = crate::store::connect(&database.database_url).await?;
            let text = schedules::export(&store, &names).await?;
            write_out(output.as_deref(), &text, "schedules")
        }
    }
}
