//! The built-in OpenAI-compatible mock server: a product feature for the demo, harness
//! calibration and tests. Behaviour comes from model profiles; answers from eval-set keys.
//! The user documentation (every profile field, the token rule, the ground-truth endpoint) is
//! docs/mock.md.
//!
//! Map: `profile` (profiles, TOML, demo set) · `tokens` (approximate tokenizer, filler) ·
//! `answers` (answer key, deterministic accuracy) · `generate` (what and when to send, chunk
//! rendering) · `server` (router, endpoints, bookkeeping) · `listener` (connections, kernel
//! receipt stamps) · `log` (ground truth ring buffer) · `metrics` (Prometheus text) · `rng`
//! (portable seeded randomness) · `truth` (the truth server: known service capacity, the true
//! capacity at an SLO by exact simulation).
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use crate::domain::evalset::EvalSetFile;

mod answers;
mod generate;
mod listener;
mod log;
mod metrics;
mod prefix_cache;
mod profile;
mod rng;
mod server;
pub mod tls;
pub mod tokens;
mod tool_answers;
pub mod truth;

pub use log::{CaseTruth, LOG_CAPACITY, LogPage, Outcome, RequestRecord};
pub use profile::{ModelProfile, OverlongBehaviour, ProfileError, ToolFaults, demo_profiles, parse_profiles};

/// The `server` header on every response.
pub const SERVER_HEADER: &str = concat!("bakeoff-mock/", env!("CARGO_PKG_VERSION"));

/// The first line `bakeoff mock` prints on standard output once it accepts connections, followed
/// by its root URL: how a parent that asked for port 0 (`bakeoff calibrate`) learns the port.
pub const LISTENING_LINE: &str = "listening on ";

/// Everything the mock serves.
#[derive(Debug, Clone, Default)]
pub struct MockConfig {
    pub profiles: Vec<ModelProfile>,
    /// Eval sets whose expected outputs the mock answers with (at each profile's accuracy).
    pub answer_keys: Vec<EvalSetFile>,
    pub seed: u64,
}

/// A running mock server; dropping the handle does not stop it, `shutdown` does.
pub struct MockServer {
    pub addr: SocketAddr,
    /// `https` when served over TLS, else `http`.
    pub scheme: &'static str,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MockServer {
    /// The base URL a candidate uses: `http://ADDR/v1` (`https://` over TLS).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root_url())
    }

    /// The server's root (`http://ADDR`), for `/health`, `/metrics` and `/mock/requests`.
    pub fn root_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Stops accepting connections and waits for open responses to finish.
    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// Serves the mock on `listener` in a background task. Invalid profiles (a field out of range,
/// a duplicate name) are refused with `InvalidInput`.
pub async fn spawn(config: MockConfig, listener: tokio::net::TcpListener) -> std::io::Result<MockServer> {
    spawn_with_log(config, listener, LOG_CAPACITY).await
}

/// Like [`spawn`], keeping the latest `log_capacity` ground-truth records instead of
/// [`LOG_CAPACITY`] (calibration keeps a whole level's).
pub async fn spawn_with_log(
    config: MockConfig,
    listener: tokio::net::TcpListener,
    log_capacity: usize,
) -> std::io::Result<MockServer> {
    spawn_served(config, listener, log_capacity, None).await
}

/// Like [`spawn_with_log`], served over TLS with `tls` (`tls::server_config`).
pub async fn spawn_tls(
    config: MockConfig,
    listener: tokio::net::TcpListener,
    log_capacity: usize,
    tls: Arc<rustls::ServerConfig>,
) -> std::io::Result<MockServer> {
    spawn_served(config, listener, log_capacity, Some(tls)).await
}

async fn spawn_served(
    config: MockConfig,
    listener: tokio::net::TcpListener,
    log_capacity: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<MockServer> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut state =
        server::MockState::new(config).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    state.log = log::RequestLog::with_capacity(log_capacity);
    let addr = listener.local_addr()?;
    let app = server::router(Arc::new(state)).into_make_service_with_connect_info::<listener::LastRead>();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let listener = listener::StampedListener::new(listener, tls.map(tokio_rustls::TlsAcceptor::from));
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    Ok(MockServer {
        addr,
        scheme,
        stop,
        task,
    })
}

/// Reads and validates a profiles TOML file.
pub fn load_profiles(path: &Path) -> anyhow::Result<Vec<ModelProfile>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading model profiles {}", path.display()))?;
    Ok(parse_profiles(&path.display().to_string(), &text)?)
}

/// Reads and parses the eval-set files the mock answers with.
pub fn load_answer_keys(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<EvalSetFile>> {
    paths
        .iter()
        .map(|path| {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading answer key {}", path.display()))?;
            Ok(EvalSetFile::parse(&path.display().to_string(), &text)?)
        })
        .collect()
}

// The layers below, under the names the code has always used (`crate::domain::…`).
use bakeoff_domain as domain;
pub use bakeoff_domain::VERSION;
use bakeoff_kernel_stamps as kernel_stamps;
