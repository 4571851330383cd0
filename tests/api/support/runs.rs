//! Runs against the built-in mock: the mock on a free loopback port, a stored run driven to its end.
use std::time::Duration;

use bakeoff::domain::run::{Run, RunStatus};
use bakeoff::engine::run::Runner;
use bakeoff::mock::{MockConfig, MockServer};
use bakeoff::store::DynStore;

/// Longest a whole run against the mock may take before the test fails instead of hanging.
pub const RUN_DEADLINE: Duration = Duration::from_secs(60);

/// The mock with `config`, bound to 127.0.0.1:0 before it is spawned, so it answers as soon as
/// this returns.
pub async fn start_mock(config: MockConfig) -> MockServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the mock");
    bakeoff::mock::spawn(config, listener).await.expect("starting the mock")
}

/// Starts the stored run on a fresh runner and waits (at most [`RUN_DEADLINE`]) until it ends;
/// returns its final status.
pub async fn run_to_end(store: &DynStore, run_id: i64) -> RunStatus {
    run_to_end_within(store, run_id, RUN_DEADLINE).await.status
}

/// Same, with its own deadline (e.g. a real model on a CPU); returns the ended run.
pub async fn run_to_end_within(store: &DynStore, run_id: i64, deadline: Duration) -> Run {
    let runner = Runner::new(store.clone());
    runner.start(run_id);
    tokio::time::timeout(deadline, runner.wait(run_id))
        .await
        .expect("the run ended in time");
    store.get_run(run_id).await.unwrap().expect("run exists")
}

/// The mock's ground truth keyed by the x-request-id bakeoff sent.
pub async fn ground_truth(mock: &MockServer) -> std::collections::HashMap<String, serde_json::Value> {
    let page: serde_json::Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((r["client_request_id"].as_str()?.to_string(), r.clone())))
        .collect()
}
