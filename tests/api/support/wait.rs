//! Waiting in tests for an event, never for a fixed time: a condition polled until a deadline,
//! after which the test fails naming what it waited for.
use std::future::Future;
use std::time::Duration;

use bakeoff::domain::run::Run;
use bakeoff::mock::MockServer;
use bakeoff::store::DynStore;

/// How often a condition is read again.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it holds; fails after `deadline` naming `what`.
pub async fn until<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = tokio::time::Instant::now();
    while !check().await {
        assert!(started.elapsed() < deadline, "waited {deadline:?} for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` until it gives a value; that value. Fails after `deadline` naming `what`.
pub async fn until_some<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = tokio::time::Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(started.elapsed() < deadline, "waited {deadline:?} for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// [`until`] for a plain thread (a child process, a blocking socket).
pub fn until_blocking(what: &str, deadline: Duration, mut check: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !check() {
        assert!(started.elapsed() < deadline, "waited {deadline:?} for {what}");
        std::thread::sleep(POLL);
    }
}

/// Waits (at most `deadline`, reading the database) until run `id` has ended; the ended run.
pub async fn run_ended(store: &DynStore, id: i64, deadline: Duration) -> Run {
    until_some(&format!("run #{id} to end"), deadline, || async {
        let run = store.get_run(id).await.unwrap().expect("the run exists");
        run.status.is_terminal().then_some(run)
    })
    .await
}

/// How many requests the mock has finished answering (or abandoned): its own log, the ground
/// truth of what reached it.
pub async fn mock_requests(mock: &MockServer) -> usize {
    let page: serde_json::Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .expect("reading the mock's log")
        .json()
        .await
        .expect("the mock's log is JSON");
    page["dropped"].as_u64().unwrap_or(0) as usize + page["requests"].as_array().map_or(0, Vec::len)
}

/// Requests the mock holds now (generating or queued for a slot), from its `/metrics`.
pub async fn mock_busy(mock: &MockServer) -> u64 {
    let text = reqwest::get(format!("{}/metrics", mock.root_url()))
        .await
        .expect("reading the mock's metrics")
        .text()
        .await
        .expect("the mock's metrics");
    text.lines()
        .filter(|l| l.starts_with("bakeoff_mock_requests_in_flight{") || l.starts_with("bakeoff_mock_queue_depth{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The requests of the mock's log (its ground truth) that ended with `outcome` (`completed`,
/// `client_disconnected`, …).
pub async fn mock_outcomes(mock: &MockServer, outcome: &str) -> usize {
    let page: serde_json::Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .expect("reading the mock's log")
        .json()
        .await
        .expect("the mock's log is JSON");
    page["requests"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["outcome"] == outcome).count())
}
