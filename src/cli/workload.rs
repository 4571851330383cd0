//! `bakeoff workload import|generate|export|replay`: a team's traffic as a workload (docs/workloads.md).
//! Every failure exits non-zero with the place (file:line and field) in the message.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::app::workloads::{LogImport, read_log, save_version};
use crate::config::DatabaseArgs;
use crate::domain::candidate::{CandidateSpec, ProviderKind};
use crate::domain::workload::generate::SharedPrefixSpec;
use crate::domain::workload::import::Format;
use crate::domain::workload::summary::WorkloadSummary;
use crate::domain::workload::{MAX_FILE_BYTES, WorkloadFile};
use crate::engine::replay::{ReplayOptions, ReplayReport, replay};

#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    #[command(subcommand)]
    pub action: WorkloadAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum WorkloadAction {
    /// Read a traffic log (OpenAI-style request log, OpenTelemetry/Langfuse export, Mooncake
    /// trace, or a bakeoff workload file) and store it as a version of a workload.
    Import {
        /// The log to import.
        file: PathBuf,
        #[command(flatten)]
        read: ReadArgs,
        /// Only check the file and print what it holds; store nothing.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Generate a shared-prefix workload from a spec file (TOML or JSON: name, requests,
    /// per_second, poisson, seed, system_tokens, prefixes = [{tokens, weight}], suffix_min,
    /// suffix_max, output_tokens, cache_bust, block_tokens) and store it, or write it with --out.
    Generate {
        /// The spec file.
        spec: PathBuf,
        /// Write the workload file here instead of storing it.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Write one stored version's normalised file (the exact text its hash identifies).
    Export {
        /// The version's id, as in `/workloads/versions/ID`.
        #[arg(long)]
        version_id: i64,
        /// Where to write; standard output when omitted.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Replay a workload file against one or more models of an endpoint with the identical
    /// schedule, and print the fidelity (send lag, lengths sent and received).
    Replay {
        /// A workload file (as `export` writes) or a log to import on the fly.
        file: PathBuf,
        /// Base URL up to the API version, e.g. http://127.0.0.1:8000/v1.
        #[arg(long)]
        base_url: String,
        /// The model names to replay against, each a candidate with the same schedule.
        #[arg(long, required = true, value_delimiter = ',')]
        model: Vec<String>,
        /// openai-chat, openai-completions, anthropic, openai-responses or azure-openai.
        #[arg(long, default_value = "openai-chat", value_parser = parse_api)]
        api: ProviderKind,
        /// Name of the environment variable holding the API key (the key itself is never a flag).
        #[arg(long)]
        api_key_env: Option<String>,
        /// Speed-up: 1 replays as recorded, 2 twice as fast.
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Seeds the synthetic prompt text.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also send min_tokens and ignore_eos (vLLM, SGLang, the mock) so answers have the
        /// recorded length.
        #[arg(long)]
        exact_output: bool,
        /// Replay only the first N requests.
        #[arg(long)]
        limit: Option<usize>,
        /// Write every request's send record and the fidelity as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// How a log is read.
#[derive(Debug, Clone, Args)]
pub struct ReadArgs {
    /// auto, openai, otel (also Langfuse), mooncake or workload.
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// The workload's name (default: the file's name without its extension).
    #[arg(long)]
    pub name: Option<String>,
    /// A description shown on the workload's page.
    #[arg(long, default_value = "")]
    pub description: String,
    /// Keep the real prompts in the workload (default: only lengths, arrivals and prefix
    /// hashes). Stated on the workload's page; replay then sends the real text.
    #[arg(long)]
    pub keep_text: bool,
    /// Tokens per prefix block for logs with text (Mooncake traces: 512, as they state).
    #[arg(long)]
    pub block_tokens: Option<u32>,
}

fn parse_api(s: &str) -> Result<ProviderKind, String> {
    ProviderKind::parse(s).ok_or_else(|| {
        format!("unknown API {s:?}: use openai-chat, openai-completions, anthropic, openai-responses or azure-openai")
    })
}

pub async fn run(args: WorkloadArgs) -> anyhow::Result<()> {
    match args.action {
        WorkloadAction::Import {
            file,
            read,
            check,
            database,
        } => {
            let workload = read_file(&file, &read)?;
            print_summary(&file, &workload);
            if check {
                return Ok(());
            }
            let store = crate::store::connect(&database.database_url).await?;
            let detail = format!("imported from {} by bakeoff workload import", file.display());
            let saved = save_version(&store, &workload, &crate::app::accounts::terminal_actor(), detail).await?;
            println!(
                "{}: stored as workload {:?}, version id {}{}",
                file.display(),
                workload.header.name,
                saved.id,
                if saved.stored {
                    ""
                } else {
                    " (identical to a stored version)"
                }
            );
            Ok(())
        }
        WorkloadAction::Generate { spec, out, database } => {
            let text = std::fs::read_to_string(&spec).with_context(|| format!("reading {}", spec.display()))?;
            let place = spec.display().to_string();
            let parsed: SharedPrefixSpec = if spec.extension().is_some_and(|e| e == "json") {
                serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{place}: {e}"))?
            } else {
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("{place}: {e}"))?
            };
            let workload = parsed.generate(&place)?;
            print_summary(&spec, &workload);
            match out {
                Some(path) => {
                    std::fs::write(&path, workload.normalised())
                        .with_context(|| format!("writing {}", path.display()))?;
                    eprintln!("wrote {}", path.display());
                }
                None => {
                    let store = crate::store::connect(&database.database_url).await?;
                    let detail = format!("generated from {} by bakeoff workload generate", spec.display());
                    let saved =
                        save_version(&store, &workload, &crate::app::accounts::terminal_actor(), detail).await?;
                    println!("stored as workload {:?}, version id {}", workload.header.name, saved.id);
                }
            }
            Ok(())
        }
        WorkloadAction::Export {
            version_id,
            out,
            database,
        } => {
            let store = crate::store::connect(&database.database_url).await?;
            let Some(version) = store.get_workload_version(version_id).await? else {
                bail!("no workload version with id {version_id} in {}", database.database_url);
            };
            let text = version.file.normalised();
            match out {
                Some(path) => std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?,
                None => {
                    use std::io::Write;
                    std::io::stdout().lock().write_all(text.as_bytes())?;
                }
            }
            Ok(())
        }
        WorkloadAction::Replay {
            file,
            base_url,
            model,
            api,
            api_key_env,
            speed,
            seed,
            exact_output,
            limit,
            json,
            read,
        } => {
            let workload = Arc::new(read_file(&file, &read)?);
            print_summary(&file, &workload);
            let specs: Vec<CandidateSpec> = model
                .iter()
                .map(|m| {
                    let mut spec = CandidateSpec::openai_chat(m.clone(), base_url.trim_end_matches('/'), m.clone());
                    spec.provider = api;
                    spec.api_key_env = api_key_env.clone();
                    spec
                })
                .collect();
            let options = ReplayOptions {
                speed,
                seed,
                exact_output,
                limit,
                ..ReplayOptions::default()
            };
            let (stop, stopped) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                crate::app::shutdown::signal().await;
                let _ = stop.send(true);
            });
            let cancel = crate::engine::cancel::Cancel::new(stopped);
            let reports = replay(&specs, workload, &options, cancel).await?;
            for r in &reports {
                print_fidelity(r);
            }
            if let Some(path) = json {
                let text = serde_json::to_string_pretty(&reports)?;
                std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

/// Reads a log or workload file; the error names file:line and field.
pub fn read_file(path: &Path, read: &ReadArgs) -> anyhow::Result<WorkloadFile> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if size > MAX_FILE_BYTES as u64 {
        bail!("{}: file is {size} bytes; at most {MAX_FILE_BYTES}", path.display());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {} (UTF-8 text)", path.display()))?;
    let format = match read.format.as_str() {
        "auto" => None,
        name => Some(
            Format::parse(name)
                .with_context(|| format!("unknown --format {name:?}: use auto, {}", Format::NAMES.join(", ")))?,
        ),
    };
    let name = read.name.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workload".into())
    });
    let how = LogImport {
        name,
        description: read.description.clone(),
        format,
        keep_text: read.keep_text,
        block_tokens: read.block_tokens,
    };
    Ok(read_log(
        &path.display().to_string(),
        text.trim_start_matches('\u{feff}'),
        &how,
    )?)
}

fn print_summary(path: &Path, w: &WorkloadFile) {
    let s = WorkloadSummary::of(w);
    let p = |d: &Option<crate::domain::metrics::Distribution>| {
        d.as_ref()
            .map(|d| format!("p50 {:.0}, p99 {:.0}, max {:.0}", d.p50, d.p99, d.max))
            .unwrap_or_default()
    };
    println!(
        "{}: {} ({}), {} requests over {:.1} s, input tokens {}, output tokens {}, \
         {:.1} % of requests share a prefix, {:.1} % of prompt tokens in repeated blocks{}",
        path.display(),
        w.header.name,
        w.header.source.as_str(),
        s.requests,
        s.duration_s,
        p(&s.input_tokens),
        p(&s.output_tokens),
        s.shared_prefix_share * 100.0,
        s.repeated_token_share * 100.0,
        if w.header.keeps_text { "; prompts kept" } else { "" }
    );
}

fn print_fidelity(r: &ReplayReport) {
    let f = &r.fidelity;
    let lag = f
        .lag_ms
        .as_ref()
        .map(|d| format!("send lag p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms", d.p50, d.p99, d.max))
        .unwrap_or_else(|| "nothing sent".into());
    let failed = r.sent.iter().filter(|s| s.failure.is_some()).count();
    println!(
        "{} at {}×: {}/{} sent, {lag}; input exact {}/{}, max_tokens exact {}/{}, output received exact {}/{}, {failed} failed",
        r.model,
        r.speed,
        f.sent,
        f.requests,
        f.input_exact,
        f.sent,
        f.output_exact,
        f.sent,
        f.output_received_exact,
        f.sent
    );
}
