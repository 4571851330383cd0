//! `bakeoff evalset validate|import|export`: check, store and write eval-set files from the
//! terminal. Every failure exits non-zero with the place (file:line and field) in the message.
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::app::evalsets::{SavedVersion, save_version};
use crate::config::DatabaseArgs;
use crate::domain::evalset::import::{Format, FormatChoice, GraderChoice, ImportOptions, Imported, import_with_grader};
use crate::domain::evalset::{MAX_FILE_BYTES, TaskKind};

#[derive(Debug, Clone, Args)]
pub struct EvalsetArgs {
    #[command(subcommand)]
    pub action: EvalsetAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum EvalsetAction {
    /// Check an eval-set file and report the first problem with its line and field.
    Validate {
        /// The file to check (bakeoff JSONL, OpenAI evals, promptfoo YAML or CSV).
        file: PathBuf,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Read a file (bakeoff JSONL, OpenAI evals, promptfoo YAML or CSV) and store it as a version.
    Import {
        /// The file to import (bakeoff JSONL, OpenAI evals, promptfoo YAML or CSV).
        file: PathBuf,
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Write one stored version's normalised file (the exact text its hash identifies).
    Export {
        /// The version's id, as in `/evalsets/ID`.
        #[arg(long)]
        version_id: i64,
        /// Where to write; standard output when omitted.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// How to read a source file.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// auto, bakeoff, openai-evals, promptfoo, csv or bfcl.
    #[arg(long, default_value = "auto", value_parser = parse_format)]
    pub format: FormatChoice,
    /// The set's name (formats without one default to the file name).
    #[arg(long)]
    pub name: Option<String>,
    /// extraction, classification, summarisation, translation or generation (required for
    /// formats that do not say).
    #[arg(long, value_parser = parse_task)]
    pub task: Option<TaskKind>,
    /// User prompt template for promptfoo and CSV cases, e.g. "Route this ticket: {{input}}".
    #[arg(long)]
    pub prompt: Option<String>,
    /// The set's grader for OpenAI evals and CSV files: proposed (from the expected values:
    /// JSON objects → json-fields, numbers → numeric, a few labels → label, else exact),
    /// json-fields, numeric, label or exact.
    #[arg(long, default_value = "proposed", value_parser = parse_grader)]
    pub grader: GraderChoice,
}

fn parse_grader(s: &str) -> Result<GraderChoice, String> {
    s.parse()
}

fn parse_format(s: &str) -> Result<FormatChoice, String> {
    s.parse()
}

fn parse_task(s: &str) -> Result<TaskKind, String> {
    TaskKind::parse(s).ok_or_else(|| {
        format!("unknown task {s:?}: use extraction, classification, summarisation, translation or generation")
    })
}

pub async fn run(args: EvalsetArgs) -> anyhow::Result<()> {
    match args.action {
        EvalsetAction::Validate { file, source } => {
            let imported = read(&file, &source)?;
            let parsed = &imported.file;
            println!(
                "{}: valid {} file, {} cases, version {}",
                file.display(),
                imported.format.as_str(),
                parsed.cases.len(),
                &parsed.content_hash()[..12]
            );
            print_grader(&imported);
            Ok(())
        }
        EvalsetAction::Import { file, source, database } => {
            let imported = read(&file, &source)?;
            print_grader(&imported);
            let (format, parsed) = (imported.format, imported.file);
            let store = crate::store::connect(&database.database_url).await?;
            let hash = parsed.content_hash();
            let detail = format!("imported from {} by bakeoff evalset import", file.display());
            let saved = save_version(&store, &parsed, &crate::app::accounts::terminal_actor(), detail).await?;
            let id = saved.id;
            let what = match saved {
                SavedVersion { new_set: true, .. } => "new eval set",
                SavedVersion { stored: false, .. } => "identical to a stored version",
                SavedVersion { .. } => "new version",
            };
            println!(
                "{}: imported as {} ({what}), version id {id}, {} cases, hash {}",
                file.display(),
                format.as_str(),
                parsed.cases.len(),
                &hash[..12]
            );
            Ok(())
        }
        EvalsetAction::Export {
            version_id,
            out,
            database,
        } => {
            let store = crate::store::connect(&database.database_url).await?;
            let Some(version) = store.get_evalset_version(version_id).await? else {
                bail!("no eval set version with id {version_id} in {}", database.database_url);
            };
            let text = version.file.normalised();
            match out {
                Some(path) => {
                    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
                    eprintln!(
                        "wrote {} ({} cases, version {})",
                        path.display(),
                        version.file.cases.len(),
                        &version.content_hash[..12]
                    );
                }
                None => {
                    use std::io::Write;
                    std::io::stdout().lock().write_all(text.as_bytes())?;
                }
            }
            Ok(())
        }
    }
}

/// Says which grader an import chose and why (formats whose grader bakeoff picks).
fn print_grader(imported: &Imported) {
    if let Some(g) = &imported.grader {
        let by = if g.chosen == g.proposed {
            "proposed".to_string()
        } else {
            format!("chosen with --grader; proposed was {}", g.proposed.as_str())
        };
        eprintln!("grader: {} ({by}): {}", g.chosen.as_str(), g.why);
    }
}

/// Reads and converts one source file; the error names file:line and field.
pub fn read(path: &Path, source: &SourceArgs) -> anyhow::Result<Imported> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if size > MAX_FILE_BYTES as u64 {
        bail!("{}: file is {size} bytes; at most {MAX_FILE_BYTES}", path.display());
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 text (first bad byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let options = ImportOptions {
        name: source.name.clone(),
        task: source.task,
        prompt: source.prompt.clone(),
        grader: source.grader,
    };
    let name = path.display().to_string();
    Ok(import_with_grader(
        source.format,
        &name,
        text.trim_start_matches('\u{feff}'),
        &options,
    )?)
}

/// `err` (a file that is no bakeoff eval set) explained when the file is in a format
/// `bakeoff evalset import` reads: what it looks like and the command that converts it.
pub fn not_bakeoff_hint(path: &Path, text: &str, err: crate::domain::evalset::EvalSetError) -> anyhow::Error {
    let format = crate::domain::evalset::import::detect(&path.display().to_string(), text);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    // `detect` calls anything unrecognised CSV; say so only when it looks like one.
    let looks_like_csv = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) || first.contains(',');
    if format == Format::Bakeoff || (format == Format::Csv && !looks_like_csv) {
        return err.into();
    }
    anyhow::anyhow!(
        "{}: this is {}, not a bakeoff eval set (a header line, then cases). Convert it first: \
         `bakeoff evalset import {} --format {} --task TASK` stores it (then `bakeoff evalset export \
         --version-id ID --out FILE.jsonl` writes the bakeoff file to measure with), or import it in \
         the app under Eval sets → Import",
        path.display(),
        format.label(),
        path.display(),
        format.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::evalset::EvalSetFile;

    fn hint(name: &str, text: &str) -> String {
        let err = EvalSetFile::parse(name, text).unwrap_err();
        not_bakeoff_hint(Path::new(name), text, err).to_string()
    }

    #[test]
    fn files_of_other_formats_point_to_the_importer() {
        let openai = hint(
            "samples.jsonl",
            "{\"input\":[{\"role\":\"user\",\"content\":\"hi\"}],\"ideal\":\"yo\"}\n",
        );
        assert!(
            openai.contains("OpenAI evals") && openai.contains("bakeoff evalset import samples.jsonl"),
            "{openai}"
        );
        assert!(
            openai.contains("--format openai-evals") && !openai.contains("unknown field"),
            "{openai}"
        );
        let csv = hint("t.csv", "input,expected\nhi,yo\n");
        assert!(csv.contains("CSV") && csv.contains("--format csv"), "{csv}");
        let yaml = hint("tests.yaml", "- vars:\n    q: hi\n");
        assert!(yaml.contains("promptfoo"), "{yaml}");
        // A broken bakeoff file keeps its own error (file:line and field).
        let own = hint("x.jsonl", "{\"bakeoff_evalset\":1,\"name\":\"a\"}\n");
        assert!(own.starts_with("x.jsonl") && !own.contains("evalset import"), "{own}");
        let prose = hint("notes", "just some words\n");
        assert!(!prose.contains("evalset import"), "{prose}");
    }
}
