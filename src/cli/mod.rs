//! The command line: [`Cli`] with every subcommand. `serve` runs the web app (`web::serve`, its
//! flags in `config`); each other command's file here owns its clap arguments and its `run`.
//!
//! - `evalset`: validate, import or export eval-set files
//! - `runs`: `bakeoff run start` (the run and its verdict in CI: `gate`; submitted to a team server
//!   through its JSON API: `gate_server`), export or import whole runs
//! - `files`: candidates and threshold profiles imported from and exported to TOML files
//! - `mock`: the built-in mock server alone
//! - `measure_endpoint`: `bakeoff measure`, one endpoint from the terminal
//! - `capacity`: `bakeoff measure --find-capacity`, the capacity search at an SLO
//! - `calibrate`: `bakeoff calibrate`, the harness against the built-in mock
//! - `users`: `bakeoff user …`, accounts and API tokens
//! - `worker`: `bakeoff worker`, a measurement worker sharing the team's database
//! - `workload`: `bakeoff workload …`, traffic logs imported, shared-prefix workloads generated, replays
//! - `output`: plain-text tables and JSON files the commands write
use clap::{Parser, Subcommand};

use crate::config::{DatabaseArgs, ServeArgs};

pub mod calibrate;
pub mod capacity;
pub mod evalset;
pub mod files;
pub mod gate;
pub mod gate_server;
pub mod measure_endpoint;
pub mod mock;
pub mod output;
pub mod runs;
pub mod schedules;
pub mod users;
pub mod worker;
pub mod workload;

#[derive(Debug, Parser)]
#[command(
    name = "bakeoff",
    version,
    about = "Run candidate language models over your own eval sets and get a go/no-go scorecard."
)]
pub struct Cli {
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
    Mock(mock::MockArgs),
    /// Create or migrate the database, then exit.
    Migrate(DatabaseArgs),
    /// Validate, import or export eval-set files.
    Evalset(evalset::EvalsetArgs),
    /// Start a run from the terminal (CI exit codes), or export or import whole runs.
    Run(runs::RunArgs),
    /// Import or export candidates as TOML files (keys only as BAKEOFF_KEY_… references).
    Candidate(files::CandidateArgs),
    /// Import or export threshold profiles as TOML files.
    Profile(files::ProfileArgs),
    /// Import or export schedules as TOML files.
    Schedule(schedules::ScheduleArgs),
    /// Measure one endpoint from the terminal with bakeoff's metric definitions.
    Measure(measure_endpoint::MeasureArgs),
    /// Check the harness's own accuracy and overhead against the built-in mock.
    Calibrate(calibrate::CalibrateArgs),
    /// Manage accounts (users, roles, passwords) and API tokens.
    User(users::UserArgs),
    /// Measure queued runs from this machine, coordinated with the others through the database.
    Worker(worker::WorkerArgs),
    /// Import a traffic log as a workload, generate a shared-prefix one, export or replay one.
    Workload(workload::WorkloadArgs),
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};
    use crate::config::ServeArgs;

    fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        let mut all = vec!["bakeoff", "serve"];
        all.extend_from_slice(args);
        match Cli::try_parse_from(all)?.command {
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

    #[test]
    fn calibrate_level_lists_can_be_emptied_by_a_flag_without_a_value() {
        let parse = |args: &[&str]| match Cli::try_parse_from([&["bakeoff", "calibrate"], args].concat()) {
            Ok(Cli {
                command: Command::Calibrate(c),
                ..
            }) => (c.chunked_levels, c.not_streamed_levels),
            other => panic!("{:?}", other.err()),
        };
        assert_eq!(parse(&[]), (vec![1, 16], vec![1, 4]));
        assert_eq!(
            parse(&["--chunked-levels", "--not-streamed-levels", "8"]),
            (vec![], vec![8])
        );
        assert_eq!(
            parse(&["--chunked-levels", "2,32", "--not-streamed-levels"]),
            (vec![2, 32], vec![])
        );
    }

    /// Flags (and arguments) of `cmd` and its subcommands that `--help` shows without a word.
    fn undocumented(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && !arg.is_hide_set() && arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            undocumented(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_flag_has_help_text() {
        use clap::CommandFactory;
        let mut missing = Vec::new();
        undocumented(&Cli::command(), "bakeoff", &mut missing);
        assert!(missing.is_empty(), "flags without help: {missing:#?}");
    }

    /// The `bakeoff …` command lines of the pipeline examples in docs/recipes/ (shell
    /// continuations joined, YAML folded blocks unfolded), each without its program name.
    fn pipeline_command_lines(yaml: &str) -> Vec<Vec<String>> {
        let mut lines = Vec::new();
        let mut current: Option<String> = None;
        for raw in yaml.lines() {
            let line = raw.trim().trim_start_matches("- ").trim();
            if let Some(cmd) = current.as_mut() {
                // Inside a command: `\` continues it (shell), an indented flag line continues a
                // folded `>` block; anything else ends it.
                if line.starts_with("--") {
                    cmd.push(' ');
                    cmd.push_str(line.trim_end_matches('\\').trim());
                    continue;
                }
                lines.push(current.take().unwrap());
            }
            if line.starts_with("bakeoff ") {
                current = Some(line.trim_end_matches('\\').trim().to_string());
            }
        }
        lines.extend(current);
        lines
            .iter()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    }

    #[test]
    fn the_pipeline_examples_call_bakeoff_with_flags_it_has_and_files_that_exist() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for name in ["github-actions.yml", "gitlab-ci.yml"] {
            let text = std::fs::read_to_string(root.join("docs/recipes").join(name)).unwrap();
            let commands = pipeline_command_lines(&text);
            assert!(!commands.is_empty(), "{name}: no bakeoff command found");
            for args in commands {
                Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{name}: {}: {e}", args.join(" ")));
                // Files the examples take from this repository's docs must be here.
                for arg in args.iter().filter(|a| a.starts_with("docs/")) {
                    assert!(root.join(arg).is_file(), "{name} names {arg}, which does not exist");
                }
            }
        }
        let folded = "    - >\n      bakeoff run start\n      --evalset e.jsonl\n      --profile p\n  allow_failure:\n";
        assert_eq!(
            pipeline_command_lines(folded),
            [["bakeoff", "run", "start", "--evalset", "e.jsonl", "--profile", "p"]]
        );
    }
}
