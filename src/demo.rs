//! First-start content: the shipped eval sets, a default threshold profile, and (with `--demo`)
//! three candidates served by the in-process mock.
use crate::mock::MockServer;
use crate::store::Store;

/// Starts the in-process mock with the demo profiles and the shipped eval sets as answer keys.
pub async fn start_mock(_listener: tokio::net::TcpListener) -> anyhow::Result<MockServer> {
    todo!("demo mock")
}

/// Loads the shipped eval sets and the default threshold profile (idempotent), and registers or
/// re-points the demo candidates when `demo_mock_url` is given.
pub async fn bootstrap(_store: &dyn Store, _demo_mock_url: Option<&str>) -> anyhow::Result<()> {
    todo!("bootstrap")
}
