//! `bakeoff candidate import|export` and `bakeoff profile import|export`: candidates and
//! threshold profiles as TOML files a repository holds (formats in `app::files`, schemas in
//! docs/schemas/). A bad file changes nothing and the error names file, line and field.
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::app::candidates::Actor;
use crate::app::files::{self, candidates, profiles};
use crate::config::DatabaseArgs;

#[derive(Debug, Clone, Args)]
pub struct CandidateArgs {
    #[command(subcommand)]
    pub action: CandidateAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum CandidateAction {
    /// Store the candidates of a file: a new name is created, a known one updated to match the
    /// file (a stored key is kept unless the base URL moves to another server). Keys are never
    /// read from files: write `api_key_env = "BAKEOFF_KEY_…"`.
    Import {
        /// A candidates file (`bakeoff_candidates = 1` and `[[candidate]]` tables).
        file: PathBuf,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Write stored candidates as a candidates file, without their keys.
    Export {
        /// Candidate names; all candidates when none is given.
        names: Vec<String>,
        /// Output file; standard output when omitted.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub action: ProfileAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ProfileAction {
    /// Store a threshold profile file: created, or a new version of the stored profile of the
    /// same name when its rules or description differ (nothing when they are the same).
    Import {
        /// A profile file (`bakeoff_profile = 1`, `name`, `[[rule]]` tables).
        file: PathBuf,
        /// Who signs the version this stores (the profile history shows it).
        #[arg(long, env = "BAKEOFF_CHANGED_BY", default_value_t = default_signer())]
        changed_by: String,
        /// Why this version; default: "imported from FILE".
        #[arg(long)]
        rationale: Option<String>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Write a stored threshold profile as a profile file.
    Export {
        /// The profile's name.
        name: String,
        /// A version of its history; default: the current one.
        #[arg(long)]
        version: Option<u32>,
        /// Output file; standard output when omitted.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// The local user's name, as a profile version's signature.
pub fn default_signer() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "terminal".to_string())
}

/// Reads a small UTF-8 text file; the error names it.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if size > files::MAX_FILE_BYTES as u64 {
        bail!(
            "{}: file is {size} bytes; at most {}",
            path.display(),
            files::MAX_FILE_BYTES
        );
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 text (first bad byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// Writes `text` to `output`, or standard output when there is none.
pub(super) fn write_out(output: Option<&Path>, text: &str, what: &str) -> anyhow::Result<()> {
    match output.filter(|p| p.as_os_str() != "-") {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("{what} written to {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

pub async fn run_candidate(args: CandidateArgs) -> anyhow::Result<()> {
    match args.action {
        CandidateAction::Import { file, database } => {
            let text = read_text(&file)?;
            let specs = candidates::parse(&file.display().to_string(), &text)?;
            let store = crate::store::connect(&database.database_url).await?;
            for saved in candidates::import(&store, &specs, &Actor::terminal()).await? {
                let c = &saved.candidate;
                println!("{} candidate #{} {:?}", saved.outcome.as_str(), c.id, c.spec.name);
                if let Some(note) = saved.credentials_note() {
                    println!("  note: {note}");
                }
            }
            Ok(())
        }
        CandidateAction::Export {
            names,
            output,
            database,
        } => {
            let store = crate::store::connect(&database.database_url).await?;
            let all = store.list_candidates().await?;
            let chosen: Vec<_> = if names.is_empty() {
                all.iter().map(|c| &c.spec).collect()
            } else {
                let mut chosen = Vec::new();
                for name in &names {
                    match all.iter().find(|c| &c.spec.name == name) {
                        Some(c) => chosen.push(&c.spec),
                        None => bail!("there is no candidate named {name:?}"),
                    }
                }
                chosen
            };
            if chosen.is_empty() {
                bail!("there are no candidates to export");
            }
            let text = candidates::export(&chosen)?;
            write_out(output.as_deref(), &text, &format!("{} candidates", chosen.len()))
        }
    }
}

pub async fn run_profile(args: ProfileArgs) -> anyhow::Result<()> {
    match args.action {
        ProfileAction::Import {
            file,
            changed_by,
            rationale,
            database,
        } => {
            let text = read_text(&file)?;
            let rationale = rationale.unwrap_or_else(|| format!("imported from {}", file.display()));
            let save = profiles::parse(&file.display().to_string(), &text, &changed_by, &rationale)?;
            let store = crate::store::connect(&database.database_url).await?;
            let (p, outcome) = profiles::import(&store, &save, &crate::app::accounts::terminal_actor()).await?;
            println!(
                "{} threshold profile #{} {:?}, version {}",
                outcome.as_str(),
                p.id,
                p.name,
                p.version
            );
            Ok(())
        }
        ProfileAction::Export {
            name,
            version,
            output,
            database,
        } => {
            let store = crate::store::connect(&database.database_url).await?;
            let Some(current) = store
                .list_threshold_profiles()
                .await?
                .into_iter()
                .find(|p| p.name == name)
            else {
                bail!("there is no threshold profile named {name:?}");
            };
            let profile = match version {
                Some(v) if v != current.version => store
                    .get_threshold_profile(current.id, Some(v))
                    .await?
                    .with_context(|| format!("profile {name:?} has no version {v}"))?,
                _ => current,
            };
            let text = profiles::export(&profile)?;
            write_out(
                output.as_deref(),
                &text,
                &format!("threshold profile {name:?} version {}", profile.version),
            )
        }
    }
}
