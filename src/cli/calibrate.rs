//! `bakeoff calibrate`: the harness's self-check against the built-in mock (`app::calibrate`),
//! printed as a table and optionally written as JSON.
use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use super::output::{now_rfc3339, table, write_json};
use anyhow::Context;

use crate::engine::calibrate::{
    CalibrateOptions, CalibrationLevel, CalibrationReport, IngestOptions, LevelPurpose, MockPlacement, purpose_name,
};

/// The format tag of `--json` files; bumped on incompatible changes.
pub const CALIBRATE_JSON_FORMAT: &str = "bakeoff-calibrate/1";

#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {
    /// Concurrency levels to drive the mock at.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256,1024")]
    pub levels: Vec<u32>,
    /// Seconds of measured load per level (plus a short warm-up).
    #[arg(long, default_value_t = 6)]
    pub seconds_per_level: u32,
    /// Output tokens per request.
    #[arg(long, default_value_t = 128)]
    pub tokens: u32,
    /// The mock's delay between tokens of one stream, ms.
    #[arg(long, default_value_t = 4.0)]
    pub inter_token_ms: f64,
    /// The mock's time to first token, ms.
    #[arg(long, default_value_t = 20.0)]
    pub ttft_ms: f64,
    /// Tokens per SSE chunk sent by the mock.
    #[arg(long, default_value_t = 1)]
    pub tokens_per_chunk: u32,
    /// Concurrency levels of the chunked levels (several tokens per chunk, the first chunk full
    /// too), run after the sweep; the flag with no value: none.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,16")]
    pub chunked_levels: Vec<u32>,
    /// Tokens per SSE chunk at the chunked levels.
    #[arg(long, default_value_t = 8)]
    pub chunk_tokens: u32,
    /// Concurrency levels of the non-streamed levels (E2E and aggregate checked; TTFT, ITL and
    /// decode are not measured without streaming); the flag with no value: none.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,4")]
    pub not_streamed_levels: Vec<u32>,
    /// Concurrency of the ingest-rate level run after the sweep (0: skip it).
    #[arg(long, default_value_t = 256)]
    pub ingest_concurrency: u32,
    /// Output tokens per request at the ingest-rate level.
    #[arg(long, default_value_t = 1024)]
    pub ingest_tokens: u32,
    /// The mock's delay between tokens at the ingest-rate level, ms.
    #[arg(long, default_value_t = 1.0)]
    pub ingest_inter_token_ms: f64,
    /// Tokens per SSE chunk at the ingest-rate level (real servers send several).
    #[arg(long, default_value_t = 8)]
    pub ingest_tokens_per_chunk: u32,
    /// Worker threads of the mock's runtime (in process, 1: one current-thread runtime).
    #[arg(long, default_value_t = 2)]
    pub mock_threads: u32,
    /// Run the mock on threads of this process instead of a process of its own (pinned to a
    /// core apart from bakeoff's where the machine has two), for comparison: the mock's work
    /// then competes with bakeoff's in one process.
    #[arg(long)]
    pub mock_in_process: bool,
    /// Also run latency levels over https (the mock served over TLS with a loopback certificate
    /// made for the run; needs the `openssl` command) and print their TTFT error beside http's.
    #[arg(long)]
    pub tls: bool,
    /// Concurrency levels of the https levels (with --tls).
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub tls_levels: Vec<u32>,
    /// Measure the cost of scraping telemetry: each http latency level runs four times, without,
    /// with, with and without scraping the mock's `/metrics` and simulated GPU every second (as
    /// a run with a telemetry source does), and its TTFT |error| p99 is compared as a ratio and
    /// a difference (docs/telemetry.md).
    #[arg(long)]
    pub scrape_telemetry: bool,
    /// With --scrape-telemetry: blocks of four passes (without, with, with, without) per level.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub scrape_blocks: u32,
    /// Write the figures here as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The concurrency flags held to a run's limits (1 to `domain::load::MAX_CONCURRENCY`, as the
/// run form, the API, settings files and `bakeoff measure` hold them); the error names the flag.
fn check_levels(args: &CalibrateArgs) -> anyhow::Result<()> {
    use crate::domain::load::MAX_CONCURRENCY;
    let ingest = (args.ingest_concurrency > 0).then_some(args.ingest_concurrency);
    for (flag, levels) in [
        ("--levels", args.levels.as_slice()),
        ("--chunked-levels", args.chunked_levels.as_slice()),
        ("--not-streamed-levels", args.not_streamed_levels.as_slice()),
        ("--ingest-concurrency", ingest.as_slice()),
    ] {
        if let Some(bad) = levels.iter().find(|&&c| !(1..=MAX_CONCURRENCY).contains(&c)) {
            anyhow::bail!("{flag}: each concurrency must be between 1 and {MAX_CONCURRENCY}, got {bad}");
        }
    }
    Ok(())
}

pub async fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    check_levels(&args)?;
    let options = CalibrateOptions {
        levels: args.levels.clone(),
        seconds_per_level: args.seconds_per_level,
        tokens: args.tokens,
        inter_token_ms: args.inter_token_ms,
        ttft_ms: args.ttft_ms,
        tokens_per_chunk: args.tokens_per_chunk,
        chunked: args.chunked_levels.clone(),
        chunk_tokens: args.chunk_tokens,
        not_streamed: args.not_streamed_levels.clone(),
        ingest: (args.ingest_concurrency > 0).then_some(IngestOptions {
            concurrency: args.ingest_concurrency,
            tokens: args.ingest_tokens,
            inter_token_ms: args.ingest_inter_token_ms,
            tokens_per_chunk: args.ingest_tokens_per_chunk,
        }),
        mock_threads: args.mock_threads,
        mock: if args.mock_in_process {
            MockPlacement::InProcess
        } else {
            // The mock process is this very binary.
            MockPlacement::Process {
                exe: std::env::current_exe().context("finding bakeoff's own executable")?,
            }
        },
        tls_levels: if args.tls { args.tls_levels.clone() } else { Vec::new() },
        scrape_telemetry: args.scrape_telemetry,
        scrape_blocks: args.scrape_blocks,
    };
    let report = crate::app::calibrate::calibrate(&options, |line| eprintln!("{line}")).await?;
    let mut out = std::io::stdout().lock();
    print_calibration(&mut out, &report)?;
    if let Some(path) = &args.json {
        #[derive(Serialize)]
        struct Doc<'a> {
            format: &'static str,
            generated_at: String,
            #[serde(flatten)]
            report: &'a CalibrationReport,
        }
        write_json(
            path,
            &Doc {
                format: CALIBRATE_JSON_FORMAT,
                generated_at: now_rfc3339(),
                report: &report,
            },
        )?;
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(())
}

pub fn print_calibration(out: &mut impl Write, r: &CalibrationReport) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = r.levels.iter().map(level_row).collect();
    writeln!(
        out,
        "bakeoff calibrate: mock TTFT {} ms on {} thread(s), {} s per level; {} cores on {}",
        r.mock_ttft_ms, r.mock_threads, r.seconds_per_level, r.cores, r.host
    )?;
    table(
        out,
        &[
            "load",
            "tokens × gap, chunking",
            "matched/sent",
            "TTFT err p50 ms",
            "TTFT |err| p99 ms",
            "first token late p50 ms",
            "first token |late| p99 ms",
            "send→mock p50 ms",
            "send→mock |gap| p99 ms",
            "E2E err p50 ms",
            "E2E |err| p99 ms",
            "ITL err p50 %",
            "decode err p50 %",
            "decode |err| p99 %",
            "aggregate tok/s bakeoff",
            "aggregate tok/s server",
            "aggregate err %",
            "tok/s ingested",
            "CPU-s per M tokens",
            "loop lag p99 ms",
            "mock cores",
            "other cores",
            "load avg",
            "mock ran on",
            "harness",
        ],
        &rows,
    )?;
    writeln!(
        out,
        "TTFT error = first token late (the mock's hand-off → bakeoff's timestamp: bakeoff's own) + \
         send→mock (bakeoff's send timestamp → the mock's receipt: loopback, and the mock's accepting).\n\
         mock cores = CPU the mock's threads used; other cores = CPU the rest of the machine used \
         during the level; load avg = 1-minute load average at the level's end (this process included)."
    )?;
    print_schemes(out, r)?;
    print_scraping_cost(out, r)?;
    print_calibration_notes(out, r)
}

/// The cost of scraping telemetry (`--scrape-telemetry`): each level's TTFT |error| p99 without
/// and with scraping, passes of one calibration (nothing when it was not measured).
fn print_scraping_cost(out: &mut impl Write, r: &CalibrationReport) -> std::io::Result<()> {
    if r.scraping_cost.is_empty() {
        return Ok(());
    }
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(", ");
    let rows: Vec<Vec<String>> = r
        .scraping_cost
        .iter()
        .map(|c| {
            vec![
                format!("c={}", c.concurrency),
                list(&c.without_ms),
                list(&c.with_ms),
                format!("{:.3}", c.without_p99_ms),
                format!("{:.3}", c.with_p99_ms),
                format!("{:.2}", c.ratio),
                format!("{:+.3}", c.added_ms),
            ]
        })
        .collect();
    writeln!(
        out,
        "\nCost of scraping telemetry (the mock's /metrics and simulated GPU every second, as a run \
         with a telemetry source), passes in blocks of off, on, on, off; median over the passes:"
    )?;
    table(
        out,
        &[
            "load",
            "TTFT |err| p99 ms, without (per pass)",
            "with (per pass)",
            "median without",
            "median with",
            "ratio with ÷ without",
            "added ms",
        ],
        &rows,
    )
}

/// A figure to `digits` decimals, or "—" when it could not be computed.
fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".to_string(), |v| format!("{v:.digits$}"))
}

/// One level's row of the calibration table.
fn level_row(l: &CalibrationLevel) -> Vec<String> {
    let f = fixed;
    // A figure a level cannot have says so; "—" is a figure that could not be computed.
    let g = |v: Option<f64>, digits: usize| {
        if l.stream {
            f(v, digits)
        } else {
            "not measured".to_string()
        }
    };
    vec![
        match (l.purpose, l.https) {
            (LevelPurpose::Latency, false) if l.scraped => format!("c={} scraped", l.concurrency),
            (LevelPurpose::Latency, false) => format!("c={}", l.concurrency),
            (LevelPurpose::Latency, true) => format!("https c={}", l.concurrency),
            (p, _) => format!("{} c={}", purpose_name(p), l.concurrency),
        },
        if l.stream {
            format!("{}×{} ms, {}/chunk", l.tokens, l.inter_token_ms, l.tokens_per_chunk)
        } else {
            format!("{}×{} ms, whole", l.tokens, l.inter_token_ms)
        },
        format!("{}/{}", l.matched, l.requests),
        g(l.ttft_error_ms_p50, 3),
        g(l.ttft_error_ms_p99, 3),
        g(l.first_token_late_ms_p50, 3),
        g(l.first_token_late_ms_p99, 3),
        g(l.send_to_mock_ms_p50, 3),
        g(l.send_to_mock_ms_p99, 3),
        f(l.e2e_error_ms_p50, 3),
        f(l.e2e_error_ms_p99, 3),
        g(l.itl_error_pct_p50, 2),
        g(l.decode_error_pct_p50, 2),
        g(l.decode_error_pct_p99, 2),
        f(l.aggregate_client_tok_s, 0),
        f(l.aggregate_server_tok_s, 0),
        f(l.aggregate_error_pct, 2),
        f(l.ingested_tok_s, 0),
        f(l.cpu_s_per_million_tokens, 2),
        f(l.runtime_lag_ms_p99, 2),
        f(l.mock_cpu_cores, 2),
        f(l.other_cpu_cores, 2),
        f(l.load_average, 2),
        l.mock_ran.clone(),
        if l.unreliable { "UNRELIABLE".into() } else { "ok".into() },
    ]
}

/// What the table cannot say: figures not measured, ground truth dropped, and each target met
/// or missed.
fn print_calibration_notes(out: &mut impl Write, r: &CalibrationReport) -> std::io::Result<()> {
    for l in r.levels.iter().filter(|l| !l.not_measured.is_empty()) {
        writeln!(
            out,
            "{} c={}: {}",
            purpose_name(l.purpose),
            l.concurrency,
            l.not_measured.join("; ")
        )?;
    }
    for l in r.levels.iter().filter(|l| l.truth_dropped > 0) {
        writeln!(
            out,
            "c={}: the mock's ground-truth buffer dropped {} records; unmatched requests are left out",
            l.concurrency, l.truth_dropped
        )?;
    }
    writeln!(out)?;
    for t in &r.targets {
        writeln!(
            out,
            "{}: {} — {}",
            if t.met { "met" } else { "MISSED" },
            t.target,
            t.measured
        )?;
    }
    Ok(())
}

/// The https levels' TTFT error beside the http sweep's at the same concurrency, and the clock
/// that timed each (nothing when no https level ran).
fn print_schemes(out: &mut impl Write, r: &CalibrationReport) -> std::io::Result<()> {
    let latency = |https: bool| {
        r.levels
            .iter()
            .filter(move |l| l.purpose == LevelPurpose::Latency && l.https == https)
    };
    if latency(true).next().is_none() {
        return Ok(());
    }
    let ms = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.3}"));
    let rows: Vec<Vec<String>> = latency(true)
        .map(|tls| {
            let plain = latency(false).find(|l| l.concurrency == tls.concurrency);
            vec![
                format!("c={}", tls.concurrency),
                plain.map_or("not run".into(), |l| ms(l.ttft_error_ms_p50)),
                plain.map_or("not run".into(), |l| ms(l.ttft_error_ms_p99)),
                plain.map_or("—".into(), |l| l.clock.clone()),
                ms(tls.ttft_error_ms_p50),
                ms(tls.ttft_error_ms_p99),
                tls.clock.clone(),
            ]
        })
        .collect();
    writeln!(
        out,
        "\nTTFT error by scheme (the same mock conditions; https: TLS 1.3 on loopback):"
    )?;
    table(
        out,
        &[
            "load",
            "http TTFT err p50 ms",
            "http TTFT |err| p99 ms",
            "http clock",
            "https TTFT err p50 ms",
            "https TTFT |err| p99 ms",
            "https clock",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CalibrateArgs,
    }

    fn check(argv: &[&str]) -> Result<(), String> {
        let mut all = vec!["calibrate"];
        all.extend_from_slice(argv);
        check_levels(&Cli::try_parse_from(all).unwrap().args).map_err(|e| e.to_string())
    }

    #[test]
    fn concurrency_flags_are_held_to_the_run_limits_and_errors_name_the_flag() {
        assert_eq!(check(&[]), Ok(()));
        let most = crate::domain::load::MAX_CONCURRENCY.to_string();
        let over = (crate::domain::load::MAX_CONCURRENCY + 1).to_string();
        assert_eq!(check(&["--levels", &most]), Ok(()));
        for flag in [
            "--levels",
            "--chunked-levels",
            "--not-streamed-levels",
            "--ingest-concurrency",
        ] {
            let error = check(&[flag, &over]).unwrap_err();
            assert!(error.starts_with(&format!("{flag}: ")), "{error}");
        }
        assert!(check(&["--levels", "0"]).unwrap_err().starts_with("--levels: "));
        // 0 skips the ingest level.
        assert_eq!(check(&["--ingest-concurrency", "0"]), Ok(()));
    }
}
