//! The built-in OpenAI-compatible mock server: a product feature for the demo, harness
//! calibration and tests. Behaviour comes from model profiles; answers from eval-set keys.
use std::net::SocketAddr;

use crate::domain::evalset::EvalSetFile;

/// How one mock model behaves.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelProfile {
    pub name: String,
}

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
}

impl MockServer {
    /// The base URL a candidate uses: `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

/// Serves the mock on `listener` in a background task.
pub async fn spawn(_config: MockConfig, _listener: tokio::net::TcpListener) -> std::io::Result<MockServer> {
    todo!("mock")
}

/// `bakeoff mock`: serve until Ctrl-C / SIGTERM.
pub async fn run_cli(_args: crate::config::MockArgs) -> anyhow::Result<()> {
    todo!("mock cli")
}
