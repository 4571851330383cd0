//! Pages cannot disturb measurement (issue 13 item 5): 50 clients browse the run, its drill-down,
//! an ended run's page and export, the eval set and the run list while a mock run is measured, and
//! how late bakeoff timestamps each first token (its timestamp − the mock's hand-off of it, on the
//! machine's one wall clock, as `calibrate` splits the TTFT error) stays within 2 ms at p99 of the
//! same run's without page load — or the harness flags the run. Either outcome passes; a speed is
//! never asserted. Bakeoff's lateness, not the TTFT, is compared: the mock runs on a runtime of its
//! own, but on a busy machine its thread can still wait for a core, read a request late and send
//! late, which is the server being slow, not the measurement.
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bakeoff::domain::calibers::RequestFigures;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::engine::run::pool::request_id;
use bakeoff::mock::{MockConfig, ModelProfile};

use crate::support::app::{TestApp, spawn_app};

const CASES: usize = 60;
const CLIENTS: usize = 50;
const DEADLINE: Duration = Duration::from_secs(120);

fn evalset() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"page-load","task":"classification","prompt":"Label: {{text}}","graders":[{"kind":"exact"}],"max_tokens":8}"#,
    );
    text.push('\n');
    for i in 0..CASES {
        let label = if i % 2 == 0 { "positive" } else { "negative" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i:03}\",\"vars\":{{\"text\":\"item {i}\"}},\"expected\":\"{label}\"}}\n"
        ));
    }
    EvalSetFile::parse("page-load.jsonl", &text).unwrap()
}

/// The mock on a runtime (and thread) of its own; returns its base and root URLs and a guard that
/// stops it when dropped.
fn mock_on_its_own_runtime(file: EvalSetFile) -> ((String, String), std::sync::mpsc::Sender<()>) {
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the mock's runtime");
        let mock = rt.block_on(crate::support::runs::start_mock(MockConfig {
            profiles: vec![ModelProfile {
                ttft_ms: 60.0,
                inter_token_ms: Some(10.0),
                jitter: 0.0,
                ..ModelProfile::named("page-load-model")
            }],
            answer_keys: vec![file],
            seed: 13,
        }));
        url_tx
            .send((mock.base_url(), mock.root_url()))
            .expect("telling the mock's address");
        // Until the test ends (or drops the sender).
        let _ = stop_rx.recv_timeout(DEADLINE * 2);
        drop(mock);
    });
    (url_rx.recv_timeout(DEADLINE).expect("the mock started"), stop_tx)
}

/// Measures the eval set once on `candidate` and returns the run's id once it has ended.
async fn measure(app: &TestApp, version: i64, candidate: i64, name: &str) -> i64 {
    let run = app
        .store
        .create_run(&NewRun {
            name: name.into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 4,
                warmup_requests: 4,
                staged_rollout: false,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    app.state.runner.start(run);
    run
}

/// p99 of how late bakeoff timestamped each first token: its send time + TTFT − the mock's
/// receipt + first token sent, request by request.
async fn first_token_late_p99_ms(app: &TestApp, mock_root: &str, run: i64) -> f64 {
    let truth: serde_json::Value = reqwest::get(format!("{mock_root}/mock/requests"))
        .await
        .expect("the mock's ground truth")
        .json()
        .await
        .expect("ground truth is JSON");
    let handed_off_unix_ms: HashMap<&str, f64> = truth["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter_map(|r| {
            let at = r["received_unix_ms"].as_f64()? + r["first_token_ms"].as_f64()?;
            Some((r["client_request_id"].as_str()?, at))
        })
        .collect();
    let records = app.store.list_request_records(run).await.unwrap();
    let mut late: Vec<f64> = records
        .iter()
        .filter(|r| !r.is_warmup && r.succeeded())
        .filter_map(|r| {
            let case: usize = r.case_id.trim_start_matches("case-").parse().ok()?;
            let id = request_id(r.run_id, r.candidate_id, r.phase, case, r.repetition, r.attempt);
            let timestamped_unix_ms = r.sent_at_us as f64 / 1000.0 + RequestFigures::of(r)?.ttft_ms;
            Some(timestamped_unix_ms - handed_off_unix_ms.get(id.as_str())?)
        })
        .collect();
    assert_eq!(
        late.len(),
        CASES,
        "every case measured once and matched with the mock's"
    );
    late.sort_by(f64::total_cmp);
    late[((late.len() - 1) as f64 * 0.99).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_page_clients_during_a_run_make_its_first_tokens_at_most_2_ms_later_at_p99_or_the_run_is_flagged() {
    let app = spawn_app().await;
    let file = evalset();
    let ((mock_url, mock_root), _mock) = mock_on_its_own_runtime(file.clone());
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let candidate = app.create_candidate("page-load", &mock_url).await;

    let quiet = measure(&app, version, candidate, "without page load").await;
    tokio::time::timeout(DEADLINE, app.state.runner.wait(quiet))
        .await
        .expect("the quiet run ended");

    let loaded = measure(&app, version, candidate, "with page load").await;
    let browsing = Arc::new(AtomicBool::new(true));
    let served = Arc::new(AtomicUsize::new(0));
    let pages = [
        format!("/runs/{loaded}"),
        format!("/runs/{loaded}/live"),
        format!("/runs/{loaded}/cases"),
        format!("/runs/{quiet}"),
        format!("/runs/{quiet}/export.json"),
        format!("/runs/{quiet}/cases?page=2"),
        format!("/evalsets/{version}"),
        "/runs".to_string(),
    ];
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let (client, base) = (app.client.clone(), app.base_url.clone());
        let (browsing, served, pages) = (browsing.clone(), served.clone(), pages.clone());
        clients.push(tokio::spawn(async move {
            let mut next = i;
            while browsing.load(Ordering::Relaxed) {
                let path = &pages[next % pages.len()];
                next += 1;
                let r = client.get(format!("{base}{path}")).send().await.expect("a page");
                assert!(r.status().is_success(), "{path}: {}", r.status());
                let _ = r.bytes().await;
                served.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::timeout(DEADLINE, app.state.runner.wait(loaded))
        .await
        .expect("the loaded run ended");
    browsing.store(false, Ordering::Relaxed);
    for c in clients {
        c.await.expect("a page client");
    }

    for run in [quiet, loaded] {
        let r = app.store.get_run(run).await.unwrap().unwrap();
        assert_eq!(r.status, RunStatus::Finished, "{:?}", r.error);
    }
    let quiet_p99 = first_token_late_p99_ms(&app, &mock_root, quiet).await;
    let loaded_p99 = first_token_late_p99_ms(&app, &mock_root, loaded).await;
    let harness = app
        .store
        .get_run_harness(loaded)
        .await
        .unwrap()
        .expect("the loaded run's harness report");
    let pages_served = served.load(Ordering::Relaxed);
    eprintln!(
        "first token late p99 {quiet_p99:.2} ms without page load, {loaded_p99:.2} ms with {pages_served} pages served to \
         {CLIENTS} clients; harness: {}{}",
        if harness.unreliable {
            "UNRELIABLE: "
        } else {
            "within bounds"
        },
        harness.reasons.join("; ")
    );
    assert!(pages_served >= CLIENTS, "the clients browsed during the run");
    assert!(
        (loaded_p99 - quiet_p99).abs() <= 2.0 || harness.unreliable,
        "page load moved how late first tokens were timestamped (p99) from {quiet_p99:.2} to {loaded_p99:.2} ms and the harness said the run was within \
         bounds"
    );
}
