//! `bakeoff mock`: the built-in OpenAI-compatible mock inference server alone, until Ctrl-C /
//! SIGTERM.
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::mock::{
    LISTENING_LINE, LOG_CAPACITY, MockConfig, SERVER_HEADER, demo_profiles, load_answer_keys, load_profiles,
};

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
    /// Ground-truth records kept for `GET /mock/requests` (`bakeoff calibrate` keeps a whole
    /// level's).
    #[arg(long, env = "BAKEOFF_MOCK_TRUTH_CAPACITY", default_value_t = LOG_CAPACITY)]
    pub truth_capacity: usize,
    /// Serve https with this PEM certificate (chain); needs --tls-key.
    #[arg(long, env = "BAKEOFF_MOCK_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "BAKEOFF_MOCK_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

pub async fn run(args: MockArgs) -> anyhow::Result<()> {
    let profiles = match &args.profiles {
        Some(path) => load_profiles(path)?,
        None => demo_profiles(),
    };
    let answer_keys = if args.answer_keys.is_empty() {
        crate::app::demo::shipped_evalset_files()?
    } else {
        load_answer_keys(&args.answer_keys)?
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(crate::mock::tls::server_config(cert, key)?),
        _ => None,
    };
    let names: Vec<String> = profiles.iter().map(|p| p.name.clone()).collect();
    let cases: usize = answer_keys.iter().map(|s| s.cases.len()).sum();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding the mock to {}", args.listen))?;
    let config = MockConfig {
        profiles,
        answer_keys,
        seed: args.seed,
    };
    let capacity = args.truth_capacity.max(1);
    let server = match tls {
        Some(tls) => crate::mock::spawn_tls(config, listener, capacity, tls).await,
        None => crate::mock::spawn_with_log(config, listener, capacity).await,
    }
    .context("starting the mock")?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{LISTENING_LINE}{}", server.root_url())?;
        out.flush()?;
    }
    tracing::info!(
        models = %names.join(", "),
        answer_key_cases = cases,
        seed = args.seed,
        "{SERVER_HEADER} serving at {} (ground truth at {}/mock/requests)",
        server.base_url(),
        server.root_url()
    );
    crate::app::shutdown::signal().await;
    server.shutdown().await.context("stopping the mock")?;
    tracing::info!("mock stopped");
    Ok(())
}
