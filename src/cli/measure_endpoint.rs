//! `bakeoff measure`: one endpoint measured from the terminal, with bakeoff's metric definitions
//! (the run itself is `engine::measure`). The JSON that `--json` writes is documented field by
//! field in docs/measure-json.md.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;

use super::output::{now_rfc3339, table, write_json};
use crate::domain::calibers::{HarnessReport, Knee, LevelFigures, definitions};
use crate::domain::candidate::{CandidateSpec, Conditions, Pricing, ProviderKind, TokenizeEndpoint};
use crate::domain::evalset::EvalSetFile;
use crate::domain::load::LoadShape;
use crate::domain::metrics::Distribution;
use crate::domain::presets::LoadDraft;
use crate::domain::run::{RequestRecord, RunConfig, RunDraft, RunStatus, Slo};
use crate::domain::validation::FieldErrors;
use crate::engine::cancel::Cancel;
use crate::engine::endpoint_measure::{
    EventLine, MeasureOutcome, MeasureSpec, Provenance, measure, provenance, synthetic_evalset,
};
use crate::engine::tokens::tokenizer::CANONICAL_TOKENIZER;

/// The format tag of `--json` files; bumped on incompatible changes.
pub const MEASURE_JSON_FORMAT: &str = "bakeoff-measure/1";

/// `bakeoff measure`'s flags (boxed: the one `Command` enum stays small).
#[derive(Debug, Clone, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub flags: Box<MeasureFlags>,
}

#[derive(Debug, Clone, Args)]
pub struct MeasureFlags {
    /// Base URL up to the API version, e.g. http://127.0.0.1:8000/v1.
    #[arg(long)]
    pub base_url: String,
    /// The model name the server expects.
    #[arg(long)]
    pub model: String,
    /// openai-chat, openai-completions, anthropic, openai-responses or azure-openai.
    #[arg(long, default_value = "openai-chat", value_parser = parse_api)]
    pub api: ProviderKind,
    /// Name of the environment variable holding the API key (the key itself is never a flag).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// When streams carry no usage, count output tokens with the server's own tokenize endpoint
    /// of this kind: llama-cpp, vllm or llama-cpp-python. Called after the measured load ends;
    /// the source is then `server-tokenizer` (else bakeoff's o200k count, `tokenizer`).
    #[arg(long)]
    pub tokenize: Option<String>,
    /// Path of that endpoint on the server of --base-url (default /tokenize, or
    /// /extras/tokenize for llama-cpp-python).
    #[arg(long, requires = "tokenize")]
    pub tokenize_path: Option<String>,
    /// For an https server whose certificate no public CA signed: a PEM file of CA certificates
    /// to trust besides the system's.
    #[arg(long)]
    pub tls_ca_file: Option<std::path::PathBuf>,

    /// Closed loop at each of these concurrencies in turn, e.g. 1,4,16.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["rate", "sweep"])]
    pub concurrency: Vec<u32>,
    /// Open loop: requests per second, sent on schedule whatever the server does.
    #[arg(long, conflicts_with = "sweep")]
    pub rate: Option<f64>,
    /// With --rate: exponential gaps (Poisson arrivals) instead of even spacing.
    #[arg(long, requires = "rate")]
    pub poisson: bool,
    /// Concurrency sweep 1, 2, 4 … --sweep-max; reports the knee.
    #[arg(long)]
    pub sweep: bool,
    /// With --sweep: the highest concurrency tried (levels double up to it).
    #[arg(long, default_value_t = 64)]
    pub sweep_max: u32,
    /// Knee rule: p95 TTFT may grow to this factor × its value at c=1.
    #[arg(long, default_value_t = 2.0)]
    pub knee_ttft_factor: f64,
    /// Knee rule: aggregate tok/s must grow at least this much per level (0.05 = 5 %).
    #[arg(long, default_value_t = 0.05)]
    pub knee_min_gain: f64,

    /// Synthetic prompts of exactly these o200k token lengths (a prompt-length sweep when
    /// several), e.g. 256,2048,8192. The default workload: 256.
    #[arg(long, value_delimiter = ',', conflicts_with = "evalset")]
    pub prompt_tokens: Vec<u32>,
    /// max_tokens of every request (synthetic default 128; an eval set's own otherwise).
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Send `ignore_eos: true` so every answer runs to max_tokens (vLLM, SGLang, llama.cpp…).
    #[arg(long)]
    pub ignore_eos: bool,
    /// An eval-set file as the workload instead of synthetic prompts.
    #[arg(long)]
    pub evalset: Option<PathBuf>,
    /// Requests per load level and repetition (cycling through the prompts).
    #[arg(long)]
    pub requests: Option<u32>,
    /// Seconds per load level and repetition instead of a request count.
    #[arg(long, conflicts_with = "requests")]
    pub duration: Option<u32>,
    /// Requests sent first and excluded from every figure.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// How many times each load level is measured (1–99); figures are the median over
    /// repetitions, with their spread.
    #[arg(long, default_value_t = 1)]
    pub repetitions: u32,
    /// Sampling temperature of every request (default: the eval set's, else the server's).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Whole-request timeout, seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u32,
    /// Seconds a stream may take to its first token before it fails `first_token_timeout`
    /// (at most --timeout; default 60).
    #[arg(long)]
    pub first_token_timeout: Option<u32>,
    /// Seconds a started stream may go without a token before it fails `stall_timeout`
    /// (at most --timeout; default 20), so a stalled server costs seconds, not --timeout.
    #[arg(long)]
    pub stall_timeout: Option<u32>,
    /// Retries after a failed request (each attempt is recorded; a request that fails every
    /// attempt counts as a failure).
    #[arg(long, default_value_t = 1)]
    pub retries: u32,
    /// Ask for whole responses instead of streams (TTFT then equals E2E).
    #[arg(long)]
    pub no_stream: bool,
    /// Skip the staged rollout (shortest case, longest case, 4 at once) before the run.
    #[arg(long)]
    pub no_rollout: bool,
    /// Goodput objective: a request meets it when its TTFT is at most this many ms.
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    /// Goodput objective: TPOT at most this many ms.
    #[arg(long)]
    pub slo_tpot_ms: Option<f64>,
    /// Goodput objective: E2E latency at most this many ms.
    #[arg(long)]
    pub slo_e2e_ms: Option<f64>,
    /// Goodput objective: time to the first answer (content) token at most this many ms.
    #[arg(long)]
    pub slo_ttfa_ms: Option<f64>,
    /// Share of requests that must meet every objective (0.95: 95 %; docs/capacity.md).
    #[arg(long)]
    pub slo_target: Option<f64>,

    /// Write figures, conditions, provenance and every request record here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also store the run in the database, so it shows in the app's archive.
    #[arg(long)]
    pub store: bool,
    /// With --store: the database (sqlite://FILE or postgres://…).
    #[arg(long, env = "BAKEOFF_DATABASE_URL", default_value = "sqlite://bakeoff.db")]
    pub database_url: String,
    #[command(flatten)]
    pub capacity: super::capacity::CapacityFlags,
}

fn parse_api(s: &str) -> Result<ProviderKind, String> {
    ProviderKind::parse(s).ok_or_else(|| {
        format!("unknown API {s:?}: use openai-chat, openai-completions, anthropic, openai-responses or azure-openai")
    })
}

/// The run configuration the flags describe, checked by the run form's own rules (the same
/// limits as the form, the API and settings files); an error names the flag.
pub fn run_config(args: &MeasureFlags) -> anyhow::Result<RunConfig> {
    let text = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
    let levels = if args.concurrency.is_empty() {
        vec![1]
    } else {
        args.concurrency.clone()
    };
    let draft = RunDraft {
        concurrency: levels[0].to_string(),
        repetitions: args.repetitions.to_string(),
        warmup_requests: args.warmup.to_string(),
        max_tokens: text(args.max_tokens),
        temperature: args.temperature.map(|t| t.to_string()).unwrap_or_default(),
        timeout_secs: args.timeout.to_string(),
        first_token_timeout_secs: text(args.first_token_timeout),
        stall_timeout_secs: text(args.stall_timeout),
        retries: args.retries.to_string(),
        stream: (!args.no_stream).then(|| "on".to_string()),
        ..RunDraft::from_config(&RunConfig::default())
    };
    let load = LoadDraft {
        shape: match (args.sweep, args.rate) {
            (true, _) => "sweep",
            (false, Some(_)) => "rate",
            (false, None) => "levels",
        }
        .into(),
        levels: levels.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        sweep_max: args.sweep_max.to_string(),
        rate: args.rate.map(|r| r.to_string()).unwrap_or_default(),
        arrivals: if args.poisson { "poisson" } else { "constant" }.into(),
        requests_per_level: text(args.requests),
        duration_secs: text(args.duration),
        staged_rollout: (!args.no_rollout).then(|| "on".to_string()),
        ..LoadDraft::default()
    };
    let mut config = crate::app::runs::run_config(&draft, &load).map_err(|errors| flag_errors(&errors))?;
    if let LoadShape::Sweep {
        ttft_factor, min_gain, ..
    } = &mut config.load
    {
        (*ttft_factor, *min_gain) = (args.knee_ttft_factor, args.knee_min_gain);
    }
    let synthetic = args.evalset.is_none();
    config.requests_per_level = match (config.requests_per_level, config.duration_secs) {
        (None, None) if synthetic => Some(64),
        (requests, _) => requests,
    };
    config.max_tokens = config.max_tokens.or(synthetic.then_some(128));
    config.temperature = config.temperature.or(Some(0.0));
    config.slo = Slo {
        ttft_ms: args.slo_ttft_ms,
        tpot_ms: args.slo_tpot_ms,
        e2e_ms: args.slo_e2e_ms,
        ttfa_ms: args.slo_ttfa_ms,
        target_attainment: args.slo_target,
        later_turns: None,
    };
    if args.slo_target.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        anyhow::bail!("--slo-target must be a share between 0 and 1 (0.95 for 95 %)");
    }
    Ok(config)
}

/// The run form's field errors, each named by the flag that set the field.
fn flag_errors(errors: &FieldErrors) -> anyhow::Error {
    let flag = |field: &str| -> String {
        let named = match field {
            "concurrency" | "levels" => "concurrency",
            "warmup_requests" => "warmup",
            "timeout_secs" => "timeout",
            "first_token_timeout_secs" => "first-token-timeout",
            "stall_timeout_secs" => "stall-timeout",
            "requests_per_level" => "requests",
            "duration_secs" => "duration",
            other => other,
        };
        format!("--{}", named.replace('_', "-"))
    };
    let lines: Vec<String> = errors
        .0
        .iter()
        .map(|e| format!("{} {}", flag(&e.field), e.message))
        .collect();
    anyhow::anyhow!("{}", lines.join("; "))
}

/// The workload: the eval set given, or synthetic prompts.
fn workload(args: &MeasureFlags, config: &RunConfig) -> anyhow::Result<(EvalSetFile, Workload)> {
    if let Some(path) = &args.evalset {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file = EvalSetFile::parse(&path.display().to_string(), &text)
            .map_err(|e| crate::cli::evalset::not_bakeoff_hint(path, &text, e))?;
        let info = Workload::EvalSet {
            file: path.display().to_string(),
            name: file.header.name.clone(),
            version: file.content_hash(),
            cases: file.cases.len(),
        };
        return Ok((file, info));
    }
    let bins = if args.prompt_tokens.is_empty() {
        vec![256]
    } else {
        args.prompt_tokens.clone()
    };
    if let Some(bad) = bins.iter().find(|&&b| !(8..=1_000_000).contains(&b)) {
        bail!("--prompt-tokens: each length must be between 8 and 1000000, got {bad}");
    }
    // As many different prompts as requests per level (so no prefix cache answers), at most 256.
    let per_bin = config.requests_per_level.unwrap_or(256).clamp(1, 256) as usize;
    let max_tokens = config.max_tokens.unwrap_or(128);
    let file = synthetic_evalset(&bins, per_bin, max_tokens)?;
    Ok((
        file,
        Workload::Synthetic {
            prompt_tokens: bins,
            prompts_per_bin: per_bin,
            tokenizer: CANONICAL_TOKENIZER.to_string(),
        },
    ))
}

/// What was sent, in the JSON.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Synthetic {
        prompt_tokens: Vec<u32>,
        prompts_per_bin: usize,
        tokenizer: String,
    },
    EvalSet {
        file: String,
        name: String,
        version: String,
        cases: usize,
    },
}

/// `--tokenize`/`--tokenize-path` as a declared endpoint, checked like the candidate form.
pub fn tokenize_flags(args: &MeasureFlags) -> anyhow::Result<Option<TokenizeEndpoint>> {
    let Some(kind) = &args.tokenize else {
        return Ok(None);
    };
    let mut e = FieldErrors::default();
    let endpoint = TokenizeEndpoint::parse(
        &mut e,
        kind,
        args.tokenize_path.as_deref().unwrap_or(""),
        Some(&args.base_url),
    );
    if let Some(problem) = e.0.first() {
        let flag = if problem.field == "tokenize_kind" {
            "--tokenize"
        } else {
            "--tokenize-path"
        };
        bail!("{flag}: {}", problem.message);
    }
    Ok(endpoint)
}

/// Where the output-token counts came from, for the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct TokenCounting {
    /// Successful measured requests by the source of their output-token count: `usage`,
    /// `server-tokenizer`, `tokenizer` (o200k) or `chunks`.
    pub sources: BTreeMap<String, u64>,
    /// The tokenize endpoint declared with --tokenize, if any.
    pub server_tokenizer: Option<ServerTokenizerJson>,
    /// The canonical tokenizer behind every `canonical` figure and the `tokenizer` source.
    pub canonical_tokenizer: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServerTokenizerJson {
    pub kind: &'static str,
    pub url: Option<String>,
}

fn token_counting(spec: &CandidateSpec, records: &[RequestRecord]) -> TokenCounting {
    let mut sources = BTreeMap::new();
    for r in records.iter().filter(|r| !r.is_warmup && r.succeeded()) {
        let source = r.output_tokens_source.map_or("unknown", |s| s.as_str());
        *sources.entry(source.to_string()).or_default() += 1;
    }
    TokenCounting {
        sources,
        server_tokenizer: spec.tokenize.as_ref().map(|t| ServerTokenizerJson {
            kind: t.kind.as_str(),
            url: t.url(&spec.base_url),
        }),
        canonical_tokenizer: CANONICAL_TOKENIZER,
    }
}

/// The conditions every figure was measured under.
#[derive(Debug, Clone, Serialize)]
pub struct MeasureConditions {
    pub base_url: String,
    pub model: String,
    pub api: String,
    pub stream: bool,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub ignore_eos: bool,
    pub workload: Workload,
    pub run_config: RunConfig,
}

/// The whole `--json` document of `bakeoff measure`.
#[derive(Debug, Clone, Serialize)]
pub struct MeasureJson {
    pub format: &'static str,
    pub generated_at: String,
    pub status: RunStatus,
    pub error: Option<String>,
    pub stored_run_id: Option<i64>,
    pub conditions: MeasureConditions,
    /// Where output-token counts came from.
    pub tokens: TokenCounting,
    pub provenance: Provenance,
    pub harness: Option<HarnessReport>,
    /// The whole `bakeoff measure` process up to writing this file.
    pub process: ProcessUsage,
    pub levels: Vec<LevelFigures>,
    pub knees: Vec<KneeJson>,
    pub events: Vec<EventLine>,
    pub definitions: Vec<(&'static str, &'static str)>,
    pub records: Vec<RequestRecord>,
}

/// What the whole process used, start-up included, read just before the file is written (so
/// only the writing is left out): the kernel's counters for this process, every thread.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessUsage {
    /// User + system CPU seconds since the process started; null where `/proc` is unavailable.
    pub cpu_s: Option<f64>,
    /// Peak resident memory since the process started (`VmHWM`), bytes.
    pub peak_rss_bytes: Option<u64>,
    /// The executable that measured: `bakeoff-measure` when `bakeoff measure` handed off to it.
    pub binary: Option<String>,
}

impl ProcessUsage {
    pub fn now() -> Self {
        use crate::engine::run::harness;
        ProcessUsage {
            cpu_s: harness::process_cpu_seconds(),
            peak_rss_bytes: harness::peak_rss_bytes(),
            binary: std::env::current_exe()
                .ok()
                .and_then(|p| Some(p.file_name()?.to_string_lossy().into_owned())),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct KneeJson {
    pub prompt_tokens: Option<u32>,
    #[serde(flatten)]
    pub knee: Knee,
}

/// Every caliber's definition, exported with every figure (the same words as the "How we
/// measure" page: `domain::calibers::definitions`).
pub const DEFINITIONS: [(&str, &str); 15] = [
    ("TTFT", definitions::TTFT),
    ("TTFA", definitions::TTFA),
    ("E2E", definitions::E2E),
    ("TPOT", definitions::TPOT),
    ("ITL", definitions::ITL),
    ("ICL", definitions::ICL),
    ("decode tok/s/stream", definitions::DECODE_PER_STREAM),
    ("e2e tok/s/stream", definitions::E2E_PER_STREAM),
    ("canonical e2e tok/s/stream", definitions::CANONICAL_E2E_PER_STREAM),
    ("chars/s/stream", definitions::CHARS_PER_STREAM),
    ("aggregate tok/s (steady window)", definitions::AGGREGATE_STEADY),
    ("aggregate tok/s (whole run)", definitions::AGGREGATE_WHOLE_RUN),
    ("req/s, goodput", definitions::REQUEST_THROUGHPUT),
    ("output tokens", definitions::OUTPUT_TOKENS),
    ("tokens per chunk", definitions::CHUNK_ATTRIBUTION),
];

/// The candidate the flags describe, and the host it is named after.
fn candidate_spec(args: &MeasureFlags) -> anyhow::Result<(CandidateSpec, String)> {
    let mut extra_body = serde_json::Map::new();
    if args.ignore_eos {
        extra_body.insert("ignore_eos".into(), serde_json::Value::Bool(true));
    }
    let host = url::Url::parse(&args.base_url)
        .with_context(|| format!("--base-url {:?} is not a URL", args.base_url))?
        .host_str()
        .unwrap_or("?")
        .to_string();
    let tokenize = tokenize_flags(args)?;
    let spec = CandidateSpec {
        name: format!("{} @ {host} (bakeoff measure)", args.model),
        provider: args.api,
        base_url: args.base_url.trim_end_matches('/').to_string(),
        model: args.model.clone(),
        api_key: None,
        api_key_env: args.api_key_env.clone(),
        max_tokens: None,
        temperature: None,
        extra_body,
        conditions: Conditions::default(),
        pricing: Pricing::default(),
        claimed: None,
        notes: Some("created by `bakeoff measure`".into()),
        tokenize,
        tls_ca_file: match &args.tls_ca_file {
            Some(path) => Some(
                std::path::absolute(path)
                    .with_context(|| format!("--tls-ca-file {}", path.display()))?
                    .display()
                    .to_string(),
            ),
            None => None,
        },
        wire: Default::default(),
        metrics_url: None,
        gpu_metrics_url: None,
        metrics_keep: Vec::new(),
        gpu_count: None,
        gpu_kind: None,
        gpu_hour_price: None,
    };
    Ok((spec, host))
}

/// The `--json` document of a measurement.
fn measure_json(
    args: &MeasureFlags,
    spec: &CandidateSpec,
    config: &RunConfig,
    workload: Workload,
    provenance: Provenance,
    outcome: &MeasureOutcome,
) -> MeasureJson {
    MeasureJson {
        format: MEASURE_JSON_FORMAT,
        generated_at: now_rfc3339(),
        status: outcome.status,
        error: outcome.error.clone(),
        stored_run_id: args.store.then_some(outcome.run_id),
        conditions: MeasureConditions {
            base_url: spec.base_url.clone(),
            model: spec.model.clone(),
            api: spec.provider.as_str().to_string(),
            stream: config.stream,
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            ignore_eos: args.ignore_eos,
            workload,
            run_config: config.clone(),
        },
        tokens: token_counting(spec, &outcome.records),
        provenance,
        harness: outcome.harness.clone(),
        process: ProcessUsage::now(),
        levels: outcome.figures.levels.clone(),
        knees: outcome
            .figures
            .knees
            .iter()
            .map(|(bin, knee)| KneeJson {
                prompt_tokens: *bin,
                knee: knee.clone(),
            })
            .collect(),
        events: outcome.events.clone(),
        definitions: DEFINITIONS.to_vec(),
        records: outcome.records.clone(),
    }
}

pub async fn run(args: MeasureArgs) -> anyhow::Result<ExitCode> {
    let args = *args.flags;
    let config = run_config(&args)?;
    let (file, workload_info) = workload(&args, &config)?;
    let (mut spec, host) = candidate_spec(&args)?;
    spec.gpu_count = args.capacity.gpu_count;
    spec.gpu_kind = args.capacity.gpu_kind.clone();
    spec.gpu_hour_price = args.capacity.gpu_hour_price;
    if let Some(var) = &args.api_key_env
        && std::env::var(var).is_err()
    {
        bail!("--api-key-env {var}: that environment variable is not set");
    }
    let provenance = provenance(&spec).await;
    let store = if args.store {
        crate::store::connect(&args.database_url).await?
    } else {
        crate::store::connect("sqlite::memory:").await?
    };
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: stopping (records so far are kept)");
            let _ = cancel_tx.send(true);
        }
    });
    let loads: Vec<String> = config.loads().iter().map(|l| l.label()).collect();
    eprintln!(
        "measuring {} at {} ({}), load {}, {} …",
        args.model,
        spec.base_url,
        args.api.as_str(),
        loads.join(", "),
        match &workload_info {
            Workload::Synthetic { prompt_tokens, .. } => format!(
                "synthetic prompts of {} o200k tokens, max_tokens {}",
                prompt_tokens.iter().map(u32::to_string).collect::<Vec<_>>().join("/"),
                config.max_tokens.unwrap_or(0)
            ),
            Workload::EvalSet { name, cases, .. } => format!("eval set {name} ({cases} cases)"),
        }
    );
    // The terminal acts as an admin (who can run it can open the database anyway).
    let candidate =
        crate::app::candidates::checked_new(&crate::app::candidates::Actor::terminal(), spec.clone(), false)?;
    if args.capacity.find_capacity {
        return super::capacity::run(
            &store,
            &args.capacity,
            &candidate,
            &file,
            config,
            format!("capacity {} @ {host}", args.model),
            Cancel::new(cancel_rx),
        )
        .await;
    }
    let outcome = measure(
        &store,
        MeasureSpec {
            candidate,
            evalset: file,
            config: config.clone(),
            run_name: format!("measure {} @ {host}", args.model),
        },
        Cancel::new(cancel_rx),
    )
    .await?;
    let mut out = std::io::stdout().lock();
    print_outcome(&mut out, &outcome)?;
    if let Some(path) = &args.json {
        let doc = measure_json(&args, &spec, &config, workload_info, provenance, &outcome);
        write_json(path, &doc)?;
        writeln!(out, "wrote {}", path.display())?;
    }
    if args.store {
        writeln!(
            out,
            "stored as run {} in {}",
            outcome.run_id,
            crate::domain::redact::url(&args.database_url)
        )?;
    }
    if let Some(why) = nothing_measured(&outcome) {
        eprintln!("error: {why}");
        return Ok(ExitCode::from(EXIT_NOTHING_MEASURED));
    }
    match outcome.status {
        RunStatus::Finished => Ok(ExitCode::SUCCESS),
        status => bail!(
            "the run ended {}: {}",
            status.as_str(),
            outcome.error.as_deref().unwrap_or("see the events above")
        ),
    }
}

/// Exit status when the run finished but no measured request succeeded: there is no figure.
pub const EXIT_NOTHING_MEASURED: u8 = 3;

/// `bakeoff measure --help`: what the exit status says.
pub const EXIT_CODES_HELP: &str = "Exit status:\n  \
    0  the run finished and measured at least one successful request\n  \
    1  the run failed or was cancelled, or an input, the network or the database was unusable\n  \
    2  the command line is wrong\n  \
    3  the run finished but every measured request failed: no figure was measured (the reason is printed)";

/// Why a finished run measured nothing (every measured request failed), naming the error
/// classes; None when at least one measured request succeeded.
pub fn nothing_measured(o: &MeasureOutcome) -> Option<String> {
    let requests: u64 = o.figures.levels.iter().map(|l| l.requests).sum();
    let succeeded: u64 = o.figures.levels.iter().map(|l| l.succeeded).sum();
    if succeeded > 0 || (requests == 0 && o.status != RunStatus::Finished) {
        return None;
    }
    let mut classes: BTreeMap<&str, u64> = BTreeMap::new();
    for l in &o.figures.levels {
        for (class, n) in &l.errors {
            *classes.entry(class.as_str()).or_default() += n;
        }
    }
    if requests == 0 {
        return Some("no measured request was sent, so nothing was measured".to_string());
    }
    let classes: Vec<String> = classes.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
    Some(format!(
        "all {requests} measured requests failed ({}), so no figure was measured",
        classes.join(", ")
    ))
}

/// Prints the events worth seeing, then one latency and one throughput table, every column
/// labelled with its caliber, then the harness's verdict on itself.
pub fn print_outcome(out: &mut impl Write, o: &MeasureOutcome) -> std::io::Result<()> {
    for e in o.events.iter().filter(|e| e.level != "info") {
        writeln!(out, "{}: {}", e.level, e.message)?;
    }
    if o.figures.levels.is_empty() {
        writeln!(out, "no measured requests")?;
    } else {
        print_levels(out, &o.figures.levels)?;
    }
    for (bin, knee) in &o.figures.knees {
        let bin = bin.map(|b| format!(" (prompts of {b} tokens)")).unwrap_or_default();
        writeln!(
            out,
            "knee{bin}: c={} by the {} rule — {}",
            knee.concurrency, knee.rule, knee.explanation
        )?;
    }
    if let Some(h) = &o.harness {
        print_harness(out, h)?;
    }
    writeln!(out, "run {}: {}", o.run_id, o.status.as_str())?;
    Ok(())
}

fn print_levels(out: &mut impl Write, levels: &[LevelFigures]) -> std::io::Result<()> {
    print_latency_table(out, levels)?;
    writeln!(out)?;
    print_speed_table(out, levels)?;
    if levels
        .iter()
        .any(|l| l.succeeded > 0 && l.tpot_ms.is_none() && l.itl_ms.is_none())
    {
        writeln!(
            out,
            "TPOT, ITL, ICL and decode tok/s: not measured where shown \"—\" (a non-streamed response's tokens all arrive at once)"
        )?;
    }
    // Which clock timed the figures: one line when every level agrees, else one per level.
    let clocks: Vec<String> = levels.iter().map(|l| l.clocks.label()).collect();
    if clocks.windows(2).all(|w| w[0] == w[1]) {
        if let Some(clock) = clocks.first() {
            writeln!(out, "timed by: {clock}")?;
        }
    } else {
        for (l, clock) in levels.iter().zip(&clocks) {
            writeln!(out, "{}: timed by: {clock}", level_label(l))?;
        }
    }
    for l in levels.iter().filter(|l| !l.errors.is_empty()) {
        let errors: Vec<String> = l.errors.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
        writeln!(out, "{}: failures: {}", level_label(l), errors.join(", "))?;
    }
    for l in levels {
        if let Some(w) = l.repetitions.iter().find_map(|r| r.window.filter(|w| !w.steady)) {
            writeln!(
                out,
                "{}: too few requests for a steady state; aggregates use the whole {:.1} s span",
                level_label(l),
                w.secs()
            )?;
        }
    }
    Ok(())
}

/// A figure of a distribution to one decimal, or "—".
fn dist_1(d: &Option<Distribution>, f: fn(&Distribution) -> f64) -> String {
    d.as_ref().map_or("—".to_string(), |d| format!("{:.1}", f(d)))
}

/// The latency table: a row per level.
fn print_latency_table(out: &mut impl Write, levels: &[LevelFigures]) -> std::io::Result<()> {
    let p = dist_1;
    let rows_latency: Vec<Vec<String>> = levels
        .iter()
        .map(|l| {
            vec![
                level_label(l),
                format!("{}/{}", l.succeeded, l.requests),
                l.retries.to_string(),
                p(&l.ttft_ms, |d| d.p50),
                p(&l.ttft_ms, |d| d.p95),
                p(&l.ttfa_ms, |d| d.p50),
                p(&l.e2e_ms, |d| d.p50),
                p(&l.tpot_ms, |d| d.p50),
                p(&l.itl_ms, |d| d.p50),
                p(&l.itl_ms, |d| d.p99),
                p(&l.icl_ms, |d| d.p50),
                p(&l.client_queue_ms, |d| d.p99),
            ]
        })
        .collect();
    table(
        out,
        &[
            "load",
            "ok/sent",
            "retries",
            "TTFT p50 ms",
            "TTFT p95 ms",
            "TTFA p50 ms",
            "E2E p50 ms",
            "TPOT p50 ms",
            "ITL p50 ms",
            "ITL p99 ms",
            "ICL p50 ms",
            "queue p99 ms",
        ],
        &rows_latency,
    )
}

/// The speed table: a row per level.
fn print_speed_table(out: &mut impl Write, levels: &[LevelFigures]) -> std::io::Result<()> {
    let p = dist_1;
    let num = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1}"));
    let rows_speed: Vec<Vec<String>> = levels
        .iter()
        .map(|l| {
            let spread = l
                .aggregate_tok_s_spread
                .map(|s| format!(" [{:.0}–{:.0}]", s.min, s.max))
                .unwrap_or_default();
            vec![
                level_label(l),
                p(&l.decode_tok_s_per_stream, |d| d.p50),
                p(&l.e2e_tok_s_per_stream, |d| d.p50),
                p(&l.canonical_e2e_tok_s_per_stream, |d| d.p50),
                p(&l.chars_per_s_per_stream, |d| d.p50),
                format!("{}{spread}", num(l.aggregate_tok_s)),
                num(l.whole_run_tok_s),
                num(l.aggregate_canonical_tok_s),
                num(l.aggregate_chars_per_s),
                l.req_per_s.map_or("—".into(), |v| format!("{v:.2}")),
                l.goodput_req_per_s.map_or("—".into(), |v| format!("{v:.2}")),
                token_sources(l),
            ]
        })
        .collect();
    table(
        out,
        &[
            "load",
            "decode tok/s/stream p50",
            "e2e tok/s/stream p50",
            "o200k e2e tok/s/stream p50",
            "chars/s/stream p50",
            "aggregate tok/s steady window [min–max of repetitions]",
            "aggregate tok/s whole run",
            "aggregate o200k tok/s",
            "aggregate chars/s",
            "req/s",
            "goodput req/s",
            "tokens from",
        ],
        &rows_speed,
    )
}

fn level_label(l: &LevelFigures) -> String {
    match l.prompt_tokens {
        Some(b) => format!("{} · {b} tok prompt", l.load.label()),
        None => l.load.label(),
    }
}

fn token_sources(l: &LevelFigures) -> String {
    crate::domain::calibers::token_caliber(&l.token_sources, &l.chunk_attribution, l.succeeded)
}

fn print_harness(out: &mut impl Write, h: &HarnessReport) -> std::io::Result<()> {
    let cpu = h.cpu_s.map_or("not measurable".to_string(), |c| {
        format!("{c:.2} CPU-s over {:.1} s", h.wall_s)
    });
    let per = h
        .cpu_s_per_million_tokens
        .map_or(String::new(), |p| format!(", {p:.1} CPU-s per million tokens"));
    let lag = h
        .schedule_lag_ms
        .as_ref()
        .map(|d| {
            format!(
                "schedule lag p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms",
                d.p50, d.p99, d.max
            )
        })
        .or_else(|| {
            h.client_queue_ms
                .as_ref()
                .map(|d| format!("client queue p50 {:.2} ms, p99 {:.2} ms", d.p50, d.p99))
        })
        .unwrap_or_default();
    let loop_lag = h
        .runtime_lag_ms
        .as_ref()
        .map_or(String::new(), |d| format!("; event-loop lag p99 {:.2} ms", d.p99));
    writeln!(out, "\nharness: {cpu}{per}; {lag}{loop_lag}")?;
    if h.unreliable {
        writeln!(out, "SPEED FIGURES UNRELIABLE: {}", h.reasons.join("; "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MeasureArgs,
    }

    fn parse(extra: &[&str]) -> MeasureFlags {
        let mut argv = vec!["measure", "--base-url", "http://127.0.0.1:1/v1", "--model", "m"];
        argv.extend_from_slice(extra);
        *Cli::try_parse_from(argv).unwrap().args.flags
    }

    #[test]
    fn flags_become_a_run_config() {
        let c = run_config(&parse(&["--concurrency", "1,4,16", "--requests", "10"])).unwrap();
        assert_eq!(c.load, LoadShape::Levels { levels: vec![1, 4, 16] });
        assert_eq!(
            (c.requests_per_level, c.max_tokens, c.staged_rollout),
            (Some(10), Some(128), true)
        );
        let c = run_config(&parse(&["--rate", "5", "--poisson", "--no-rollout", "--duration", "3"])).unwrap();
        assert_eq!(
            c.load,
            LoadShape::Rate {
                per_second: 5.0,
                poisson: true
            }
        );
        assert_eq!(
            (c.duration_secs, c.requests_per_level, c.staged_rollout),
            (Some(3), None, false)
        );
        let c = run_config(&parse(&["--sweep", "--sweep-max", "8"])).unwrap();
        assert!(matches!(c.load, LoadShape::Sweep { max_concurrency: 8, .. }));
        assert!(run_config(&parse(&["--rate", "0"])).is_err());
    }

    #[test]
    fn flags_are_held_to_the_run_forms_limits_and_errors_name_the_flag() {
        let error = |argv: &[&str]| run_config(&parse(argv)).unwrap_err().to_string();
        assert!(
            error(&["--concurrency", "1,100000"]).starts_with("--concurrency "),
            "{}",
            error(&["--concurrency", "1,100000"])
        );
        assert!(error(&["--sweep", "--sweep-max", "5000"]).starts_with("--sweep-max "));
        assert!(error(&["--repetitions", "0"]).starts_with("--repetitions "));
        assert!(error(&["--timeout", "10", "--stall-timeout", "30"]).starts_with("--stall-timeout "));
        assert!(error(&["--rate", "100000"]).starts_with("--rate "));
        // The largest the form takes is taken here too.
        let most = crate::domain::load::MAX_CONCURRENCY.to_string();
        assert!(run_config(&parse(&["--concurrency", &most])).is_ok());
        assert!(Cli::try_parse_from(["measure", "--base-url", "x", "--model", "m", "--rate", "1", "--sweep"]).is_err());
        assert!(Cli::try_parse_from(["measure", "--base-url", "x", "--model", "m", "--api", "grpc"]).is_err());
    }
}
