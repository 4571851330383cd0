//! `bakeoff measure --find-capacity`: the capacity search (docs/capacity.md) from the terminal,
//! on the endpoint and workload `bakeoff measure` describes. Prints each probe level and the
//! capacity with its bracket, the cost at capacity of a self-hosted candidate, and writes the
//! two charts as SVG files when asked.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;

use super::output::table;
use crate::app::pages::capacity::{COUNTING_RULES, attainment_chart, frontier_chart, report};
use crate::domain::capacity::{CapacityEvidence, DEFAULT_WIDTH, LoadAxis, SearchSettings};
use crate::domain::evalset::EvalSetFile;
use crate::domain::load::LoadShape;
use crate::domain::run::RunConfig;
use crate::engine::cancel::Cancel;
use crate::engine::run::capacity::{CapacityPlan, find_capacity};
use crate::store::DynStore;

/// The capacity search's flags, beside `bakeoff measure`'s.
#[derive(Debug, Clone, Args)]
pub struct CapacityFlags {
    /// Search for the most load that meets the SLO (--slo-* limits and --slo-target): over
    /// request rate when --rate is given (it is the first probe), else over concurrency (the
    /// first --concurrency is the first probe). Each probe level is a run of --requests requests.
    #[arg(long)]
    pub find_capacity: bool,
    /// Stop once the capacity bracket is within this share of the capacity (0.05: 5 %).
    #[arg(long, default_value_t = DEFAULT_WIDTH, requires = "find_capacity")]
    pub capacity_width: f64,
    /// Most probe levels per search.
    #[arg(long, default_value_t = 8, requires = "find_capacity")]
    pub capacity_max_probes: u32,
    /// Highest load a probe may use (req/s or concurrency).
    #[arg(long, requires = "find_capacity")]
    pub capacity_max_load: Option<f64>,
    /// Write the charts (attainment vs load, the latency-throughput frontier) as SVG files here.
    #[arg(long, requires = "find_capacity")]
    pub capacity_charts: Option<PathBuf>,
    /// Self-hosted cost: GPUs (or instances) the endpoint runs on…
    #[arg(long)]
    pub gpu_count: Option<u32>,
    /// …their kind (e.g. "H100 80GB")…
    #[arg(long)]
    pub gpu_kind: Option<String>,
    /// …and USD per GPU-hour (per instance-hour): with a capacity, the cost per 1,000 answers.
    #[arg(long)]
    pub gpu_hour_price: Option<f64>,
}

/// The search's settings from the flags and the run configuration they made.
pub fn settings(flags: &CapacityFlags, config: &RunConfig) -> anyhow::Result<SearchSettings> {
    if !(0.0..1.0).contains(&flags.capacity_width) || flags.capacity_width == 0.0 {
        bail!("--capacity-width must be a share above 0 and below 1 (0.05 for 5 %)");
    }
    if flags.capacity_max_probes == 0 {
        bail!("--capacity-max-probes must be at least 1");
    }
    let (axis, start) = match &config.load {
        LoadShape::Rate { per_second, .. } => (LoadAxis::Rate, *per_second),
        _ => (LoadAxis::Concurrency, f64::from(config.concurrency.max(1))),
    };
    let defaults = SearchSettings::default();
    Ok(SearchSettings {
        axis,
        start,
        min_load: match axis {
            LoadAxis::Rate => defaults.min_load,
            LoadAxis::Concurrency => 1.0,
        },
        max_load: flags.capacity_max_load.unwrap_or(match axis {
            LoadAxis::Rate => defaults.max_load,
            LoadAxis::Concurrency => f64::from(crate::domain::load::MAX_CONCURRENCY),
        }),
        width: flags.capacity_width,
        max_probes: flags.capacity_max_probes,
        ..defaults
    })
}

/// Stores the candidate and workload, searches, prints.
pub async fn run(
    store: &DynStore,
    flags: &CapacityFlags,
    candidate: &crate::domain::credentials::NewCandidate,
    evalset: &EvalSetFile,
    config: RunConfig,
    name: String,
    cancel: Cancel,
) -> anyhow::Result<ExitCode> {
    let settings = settings(flags, &config)?;
    if config.slo.target_attainment.is_none() || !config.slo.is_set() {
        bail!("--find-capacity needs an SLO: at least one --slo-* limit and --slo-target (e.g. 0.95)");
    }
    let candidate_id = store
        .create_candidate(candidate)
        .await
        .context("storing the candidate (a candidate of that name may already be stored)")?;
    let evalset_version_id = store
        .save_evalset_version(evalset)
        .await
        .context("storing the workload")?;
    let plan = CapacityPlan {
        name,
        evalset_version_id,
        candidate_ids: vec![candidate_id],
        config,
        settings,
    };
    let found = find_capacity(store, &plan, cancel).await?;
    let mut out = std::io::stdout().lock();
    for (result, worded) in found.iter().zip(report(&found, settings.axis)) {
        writeln!(out, "{}: {}", worded.name, worded.headline)?;
        if !worded.stopped.is_empty() {
            writeln!(out, "  stopped: {}", worded.stopped)?;
        }
        let rows: Vec<Vec<String>> = worded
            .probes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                vec![
                    (i + 1).to_string(),
                    p.load.clone(),
                    p.attainment.clone(),
                    p.verdict.to_string(),
                    p.goodput.clone(),
                    if p.saturation.is_empty() {
                        "—".into()
                    } else {
                        format!("past saturation: {}", p.saturation)
                    },
                    p.run_id.to_string(),
                ]
            })
            .collect();
        table(
            &mut out,
            &[
                "probe",
                "load",
                "SLO attainment [95 %]",
                "verdict",
                "goodput",
                "saturation",
                "run",
            ],
            &rows,
        )?;
        if let Some(line) = CapacityEvidence::of(result, candidate.spec(), None).describe_cost(candidate.spec()) {
            writeln!(out, "{line}")?;
        }
    }
    writeln!(out, "{COUNTING_RULES}")?;
    if let Some(dir) = &flags.capacity_charts {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for chart in [attainment_chart(&found, settings.axis), frontier_chart(&found)]
            .into_iter()
            .flatten()
        {
            let path = dir.join(format!("{}.svg", chart.id));
            std::fs::write(&path, &chart.svg).with_context(|| format!("writing {}", path.display()))?;
            writeln!(out, "wrote {} ({})", path.display(), chart.title)?;
        }
    }
    Ok(
        if found
            .iter()
            .all(|f| f.outcome.as_ref().is_some_and(|o| o.capacity.is_some()))
        {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(super::measure_endpoint::EXIT_NOTHING_MEASURED)
        },
    )
}
