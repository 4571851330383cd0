//! The one configuration: command-line flags, each also readable from a `BAKEOFF_*`
//! environment variable (flags win).
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "bakeoff",
    version,
    about = "Run candidate language models over your own eval sets and get a go/no-go scorecard."
)]
pub struct Config {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `bakeoff=debug,tower_http=info`.
    #[arg(long, env = "BAKEOFF_LOG", default_value = "info", global = true)]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the web app (creates and migrates the database on first start).
    Serve(ServeArgs),
    /// Serve the built-in OpenAI-compatible mock inference server alone.
    Mock(MockArgs),
    /// Create or migrate the database, then exit.
    Migrate(DatabaseArgs),
    /// Validate, import or export eval-set files.
    Evalset(crate::cli::evalset::EvalsetArgs),
    /// Export or import whole runs (JSON, without API keys).
    Run(crate::cli::runs::RunArgs),
    /// Measure one endpoint from the terminal with bakeoff's metric definitions.
    Measure(crate::cli::measure::MeasureArgs),
    /// Check the harness's own accuracy and overhead against the built-in mock.
    Calibrate(crate::cli::measure::CalibrateArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// `sqlite://FILE` (created if missing) or `postgres://USER@HOST:PORT/DB`.
    #[arg(long, env = "BAKEOFF_DATABASE_URL", default_value = "sqlite://bakeoff.db")]
    pub database_url: String,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address the web app listens on.
    #[arg(long, env = "BAKEOFF_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Start the built-in mock in-process and register three demo candidates that point at it.
    #[arg(long, env = "BAKEOFF_DEMO")]
    pub demo: bool,
    /// Where the demo's mock listens (port 0 picks a free one).
    #[arg(long, env = "BAKEOFF_DEMO_MOCK_LISTEN", default_value = "127.0.0.1:0")]
    pub demo_mock_listen: SocketAddr,
    /// Most runs executing at once; further runs wait, queued, first come first served.
    #[arg(long, env = "BAKEOFF_MAX_RUNS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_runs: u32,
    /// Most runs sending requests to one candidate at once. With 1 a second run on the same
    /// candidate waits, so no figure is distorted; above 1 runs that share a candidate are flagged.
    #[arg(long, env = "BAKEOFF_MAX_RUNS_PER_CANDIDATE", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_runs_per_candidate: u32,
}

impl ServeArgs {
    /// The run-admission caps these flags set.
    pub fn caps(&self) -> crate::engine::Caps {
        crate::engine::Caps {
            max_runs: self.max_runs as usize,
            per_candidate: self.max_runs_per_candidate as usize,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct MockArgs {
    /// Address the mock listens on.
    #[arg(long, env = "BAKEOFF_MOCK_LISTEN", default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// TOML file of model profiles (see docs/mock.md); without it the demo profiles are served.
    #[arg(long, env = "BAKEOFF_MOCK_PROFILES")]
    pub profiles: Option<PathBuf>,
    /// Eval-set files whose expected outputs the mock answers with; the shipped sets when omitted.
    #[arg(long = "answer-key", env = "BAKEOFF_MOCK_ANSWER_KEYS", value_delimiter = ',')]
    pub answer_keys: Vec<PathBuf>,
    /// Seed for every random choice (answers, jitter, failures): same seed, same behaviour.
    #[arg(long, env = "BAKEOFF_MOCK_SEED", default_value_t = 42)]
    pub seed: u64,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Command, Config};

    fn serve(args: &[&str]) -> Result<super::ServeArgs, clap::Error> {
        let mut all = vec!["bakeoff", "serve"];
        all.extend_from_slice(args);
        match Config::try_parse_from(all)?.command {
            Command::Serve(s) => Ok(s),
            _ => unreachable!("serve parses as serve"),
        }
    }

    #[test]
    fn run_caps_default_to_four_runs_and_one_per_candidate_and_refuse_zero() {
        let caps = serve(&[]).unwrap().caps();
        assert_eq!((caps.max_runs, caps.per_candidate), (4, 1));
        let caps = serve(&["--max-runs", "2", "--max-runs-per-candidate", "3"])
            .unwrap()
            .caps();
        assert_eq!((caps.max_runs, caps.per_candidate), (2, 3));
        let err = serve(&["--max-runs", "0"]).unwrap_err().to_string();
        assert!(err.contains("--max-runs"), "{err}");
        assert!(serve(&["--max-runs-per-candidate", "0"]).is_err());
    }
}
