//! The measurement engine over real HTTP: whole runs against the built-in mock (whose ground
//! truth at `/mock/requests` says what the server really did), and single requests against tiny
//! raw TCP servers for the quirks real endpoints have. Timing assertions compare client and
//! server views with generous bounds; none asserts absolute speed.
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bakeoff::domain::candidate::{CandidateSpec, ProviderKind, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::metrics::summarise_candidate;
use bakeoff::domain::run::{ErrorClass, NewRun, Phase, RequestRecord, RunConfig, RunStatus, TokenSource};
use bakeoff::engine::run::Runner;
use bakeoff::engine::wire::client::{CandidateClient, Exchange, Timeouts};
use bakeoff::engine::wire::protocol::RequestParams;
use bakeoff::engine::wire::provider::prepare;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use bakeoff::store::DynStore;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::db::sqlite_store;
use crate::support::runs::{RUN_DEADLINE, run_to_end};

// ------------------------------------------------------------------------------- builders

/// An eval set whose answers are sentences (several tokens each, so gaps can be measured).
fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"engine-test","task":"generation","system":"Repeat the sentence.","prompt":"Sentence {{n}}","graders":[{"kind":"exact"}],"max_tokens":64}"#,
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"The quick brown fox number {i} jumps over the lazy dog again\"}}"
        ));
    }
    EvalSetFile::parse("engine-test.jsonl", &text).expect("test eval set parses")
}

fn candidate_spec(name: &str, provider: ProviderKind, base_url: &str, model: &str) -> CandidateSpec {
    CandidateSpec {
        provider,
        api_key: Some(Secret::new("sk-engine-test-key")),
        ..CandidateSpec::openai_chat(name, base_url, model)
    }
}

fn config(concurrency: u32, warmups: u32, retries: u32) -> RunConfig {
    RunConfig {
        concurrency,
        repetitions: 1,
        warmup_requests: warmups,
        max_tokens: None,
        temperature: Some(0.0),
        timeout_secs: 20,
        retries,
        stream: true,
        case_limit: None,
        // These tests look at one phase at a time; the rollout has its own tests.
        staged_rollout: false,
        ..RunConfig::default()
    }
}

async fn start_mock(profiles: Vec<ModelProfile>, key: &EvalSetFile) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: vec![key.clone()],
        seed: 7,
    })
    .await
}

/// Stores the eval set, one candidate and a queued run; returns (run id, candidate id).
async fn create_run(store: &DynStore, file: &EvalSetFile, spec: &CandidateSpec, config: RunConfig) -> (i64, i64) {
    let version = store.save_evalset_version(file).await.expect("saving the eval set");
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(spec))
        .await
        .expect("saving the candidate");
    let run = store
        .create_run(&NewRun {
            name: "engine test".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config,
        })
        .await
        .expect("creating the run");
    (run, candidate)
}

/// The mock's ground truth, keyed by the `x-request-id` bakeoff sent.
async fn ground_truth(mock: &MockServer) -> HashMap<String, Value> {
    let page: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .expect("fetching ground truth")
        .json()
        .await
        .expect("ground truth is JSON");
    page["requests"]
        .as_array()
        .expect("requests array")
        .iter()
        .filter_map(|r| Some((r["client_request_id"].as_str()?.to_string(), r.clone())))
        .collect()
}

/// The x-request-id the executor sends for a record (see `engine::run::pool::request_id`).
fn request_id_of(r: &RequestRecord, case_index: usize) -> String {
    bakeoff::engine::run::pool::request_id(r.run_id, r.candidate_id, r.phase, case_index, r.repetition, r.attempt)
}

fn case_index(id: &str) -> usize {
    id.trim_start_matches('c').parse().expect("case ids are cNN")
}

/// Most intervals open at one instant (an end at the same instant as a start does not overlap).
fn max_overlap(intervals: &[(f64, f64)]) -> usize {
    let mut edges: Vec<(f64, i32)> = intervals.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut open, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        most = most.max(open);
    }
    most as usize
}

// ------------------------------------------------------------------- runs against the mock

#[tokio::test]
async fn a_streamed_run_records_every_case_once_graded_and_timed_like_the_server() {
    let file = evalset(6);
    let profile = ModelProfile {
        ttft_ms: 60.0,
        inter_token_ms: Some(12.0),
        tokens_per_chunk: 1,
        ..ModelProfile::named("steady")
    };
    let mock = start_mock(vec![profile], &file).await;
    let (store, _guard) = sqlite_store().await;
    let spec = candidate_spec("steady", ProviderKind::OpenAiChat, &mock.base_url(), "steady");
    let (run_id, candidate_id) = create_run(&store, &file, &spec, config(2, 1, 0)).await;

    assert_eq!(run_to_end(&store, run_id).await, RunStatus::Finished);
    let records = store.list_request_records(run_id).await.unwrap();
    let (warm, measured): (Vec<_>, Vec<_>) = records.iter().partition(|r| r.is_warmup);
    assert_eq!(warm.len(), 1);
    assert_eq!(warm[0].phase, Phase::Warmup);
    let mut per_case: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &measured {
        *per_case.entry(r.case_id.as_ref()).or_default() += 1;
    }
    assert_eq!(per_case.len(), 6, "every case measured: {per_case:?}");
    assert!(
        per_case.values().all(|&n| n == 1),
        "each case exactly once: {per_case:?}"
    );

    let truth = ground_truth(&mock).await;
    let mut ttft_overhead_ms = Vec::new();
    for r in &measured {
        assert!(r.succeeded(), "{:?}: {:?}", r.error_class, r.error_detail());
        assert_eq!(r.phase, Phase::Quality);
        assert_eq!(r.grades.len(), 1);
        assert!(r.grades[0].passed, "mock answers right: {:?}", r.grades[0]);
        assert_eq!(r.output_tokens_source, Some(TokenSource::Usage));
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(r.output_chars as usize, r.output().chars().count());
        let t = &truth[&request_id_of(r, case_index(&r.case_id))];
        assert_eq!(r.output_tokens, t["tokens_sent"].as_u64().map(|n| n as u32));
        assert_eq!(r.chunks.len() as u64, t["token_chunks_sent"].as_u64().unwrap());
        assert_eq!(r.input_tokens, t["prompt_tokens"].as_u64().map(|n| n as u32));

        // The order of events on the client clock.
        let headers = r.headers_us.get().unwrap();
        let first_chunk = r.first_chunk_us.get().unwrap();
        let ttft = r.ttft_us().unwrap();
        let last = r.last_token_us.get().unwrap();
        let end = r.end_us.get().unwrap();
        assert!(
            headers <= first_chunk && first_chunk <= ttft && ttft <= last && last <= end,
            "{r:?}"
        );
        assert_eq!(r.first_content_us.get(), Some(ttft));
        assert!(r.first_reasoning_us.get().is_none());

        // Client TTFT vs the server's first-token send time: the client cannot see a token
        // before it is sent, and should not see it much later on loopback.
        let server_ttft_ms = t["first_token_ms"].as_f64().unwrap();
        let client_ttft_ms = ttft as f64 / 1000.0;
        ttft_overhead_ms.push(client_ttft_ms - server_ttft_ms);
        assert!(
            client_ttft_ms >= server_ttft_ms - 1.0 && client_ttft_ms - server_ttft_ms < 250.0,
            "client TTFT {client_ttft_ms} ms vs server {server_ttft_ms} ms"
        );
        // Mean inter-chunk gap vs the server's (both over the same chunks).
        let n = r.chunks.len() as f64;
        assert!(n >= 5.0, "enough tokens to time: {n}");
        let client_gap = (last - ttft) as f64 / 1000.0 / (n - 1.0);
        let server_gap = (t["last_token_ms"].as_f64().unwrap() - t["first_token_ms"].as_f64().unwrap()) / (n - 1.0);
        assert!(
            (client_gap - server_gap).abs() < 8.0,
            "mean gap client {client_gap:.2} ms vs server {server_gap:.2} ms"
        );
    }

    eprintln!("client TTFT − server first-token time, ms: {ttft_overhead_ms:.2?}");

    // New connections are timed; later requests reuse the pool.
    assert!(
        records
            .iter()
            .any(|r| r.connection_reused == Some(false) && r.connect_us.get().is_some())
    );
    assert!(
        records
            .iter()
            .any(|r| r.connection_reused == Some(true) && r.connect_us.get().is_none())
    );

    let owned: Vec<RequestRecord> = records.clone();
    let summary = summarise_candidate(candidate_id, &owned, |_| 1.0);
    assert_eq!((summary.requests, summary.failures), (6, 0));
    assert_eq!(summary.accuracy, Some(1.0));
    assert!(summary.decode_tok_s_per_stream.is_some() && summary.aggregate_tok_s.is_some());

    let events: Vec<String> = store
        .list_run_events(run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    for needle in ["started", "warm-up", "quality phase", "done in", "finished"] {
        assert!(
            events.iter().any(|m| m.contains(needle)),
            "no event with {needle:?}: {events:?}"
        );
    }
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn concurrency_is_reached_but_never_exceeded() {
    let file = evalset(12);
    let profile = ModelProfile {
        ttft_ms: 40.0,
        inter_token_ms: Some(3.0),
        ..ModelProfile::named("wide")
    };
    let mock = start_mock(vec![profile], &file).await;
    let (store, _guard) = sqlite_store().await;
    let spec = candidate_spec("wide", ProviderKind::OpenAiChat, &mock.base_url(), "wide");
    let (run_id, _) = create_run(&store, &file, &spec, config(3, 0, 0)).await;
    assert_eq!(run_to_end(&store, run_id).await, RunStatus::Finished);

    let truth = ground_truth(&mock).await;
    assert_eq!(truth.len(), 12);
    let server: Vec<(f64, f64)> = truth
        .values()
        .map(|t| {
            let start = t["received_unix_ms"].as_f64().unwrap();
            (start, start + t["end_ms"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(max_overlap(&server), 3, "server saw exactly 3 in flight at the peak");

    let records = store.list_request_records(run_id).await.unwrap();
    assert_eq!(records.len(), 12);
    let client: Vec<(f64, f64)> = records
        .iter()
        .map(|r| (r.sent_at_us as f64, (r.sent_at_us + r.end_us.get().unwrap()) as f64))
        .collect();
    assert!(max_overlap(&client) <= 3);
    assert!(records.iter().all(|r| r.concurrency == 3 && r.client_queue_us >= 0));
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn failed_attempts_are_retried_and_every_attempt_is_recorded() {
    let file = evalset(10);
    let profile = ModelProfile {
        ttft_ms: 5.0,
        inter_token_ms: Some(1.0),
        error_500_rate: 0.5,
        ..ModelProfile::named("flaky")
    };
    let mock = start_mock(vec![profile], &file).await;
    let (store, _guard) = sqlite_store().await;
    let spec = candidate_spec("flaky", ProviderKind::OpenAiChat, &mock.base_url(), "flaky");
    let retries = 4;
    let (run_id, _) = create_run(&store, &file, &spec, config(1, 0, retries)).await;
    assert_eq!(run_to_end(&store, run_id).await, RunStatus::Finished);

    let records = store.list_request_records(run_id).await.unwrap();
    let truth = ground_truth(&mock).await;
    assert_eq!(records.len(), truth.len(), "one record per request the server saw");
    let mut by_case: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for r in &records {
        by_case.entry(&r.case_id).or_default().push(r);
    }
    assert_eq!(by_case.len(), 10);
    let mut retried = 0;
    for (case, mut attempts) in by_case {
        attempts.sort_by_key(|r| r.attempt);
        let last = attempts.last().unwrap();
        for (i, r) in attempts.iter().enumerate() {
            assert_eq!(r.attempt as usize, i, "{case}: attempts numbered 0, 1, 2…");
            if i + 1 < attempts.len() {
                assert_eq!(r.error_class, Some(ErrorClass::HttpServerError), "{case}");
                assert!(r.error_detail().unwrap().starts_with("HTTP 500"), "{case}");
                assert!(r.grades.is_empty());
                assert!(attempts[i + 1].sent_at_us > r.sent_at_us);
            }
        }
        assert!(last.succeeded() || last.attempt == retries, "{case}: stopped early");
        retried += usize::from(attempts.len() > 1);
    }
    assert!(retried > 0, "with a 50% error rate some case needed a retry");
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_resumed_run_skips_what_is_already_recorded() {
    let file = evalset(6);
    let mock = start_mock(
        vec![ModelProfile {
            ttft_ms: 5.0,
            inter_token_ms: Some(1.0),
            ..ModelProfile::named("m")
        }],
        &file,
    )
    .await;
    let (store, _guard) = sqlite_store().await;
    let spec = candidate_spec("m", ProviderKind::OpenAiChat, &mock.base_url(), "m");
    let (run_id, candidate_id) = create_run(&store, &file, &spec, config(2, 1, 1)).await;

    // As if the process died: cases c00–c02 done, c03 failed once, a warm-up already sent.
    let before = |case: &str, phase: Phase, attempt: u32, failure: Option<ErrorClass>| {
        let mut x = Exchange {
            sent_at_us: 1_000,
            end_us: Some(10),
            output: "from before the restart".into(),
            failure: failure.map(|c| bakeoff::engine::wire::failure::Failure::new(c, "HTTP 503: down")),
            ..Default::default()
        };
        x.output_tokens = Some(3);
        x.into_record(bakeoff::engine::wire::client::RecordIdentity {
            run_id,
            candidate_id,
            case_id: case.into(),
            phase,
            repetition: 0,
            attempt,
            concurrency: 2,
            is_warmup: phase == Phase::Warmup,
        })
    };
    let earlier = vec![
        before("c00", Phase::Warmup, 0, None),
        before("c00", Phase::Quality, 0, None),
        before("c01", Phase::Quality, 0, None),
        before("c02", Phase::Quality, 0, None),
        before("c03", Phase::Quality, 0, Some(ErrorClass::HttpServerError)),
    ];
    assert_eq!(store.append_request_records(&earlier).await.unwrap(), 5);
    store.set_run_status(run_id, RunStatus::Running, None).await.unwrap();

    let runner = Runner::new(store.clone());
    assert_eq!(runner.resume_unfinished().await.unwrap(), 1);
    tokio::time::timeout(RUN_DEADLINE, runner.wait(run_id))
        .await
        .expect("resumed run ends");
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);

    let records = store.list_request_records(run_id).await.unwrap();
    let key = |r: &RequestRecord| (r.case_id.clone(), r.phase.as_str(), r.repetition, r.attempt);
    let mut keys: Vec<_> = records.iter().map(key).collect();
    keys.sort();
    let before_len = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), before_len, "no duplicate records");
    for case in ["c00", "c01", "c02"] {
        let mine: Vec<_> = records.iter().filter(|r| &*r.case_id == case && !r.is_warmup).collect();
        assert_eq!(mine.len(), 1, "{case} not repeated");
        assert_eq!(mine[0].output(), "from before the restart");
    }
    let c03: Vec<_> = records.iter().filter(|r| &*r.case_id == "c03").collect();
    assert_eq!(c03.len(), 2, "c03 continued with its retry");
    assert!(c03.iter().any(|r| r.attempt == 1 && r.succeeded()));
    let warm: Vec<u32> = records.iter().filter(|r| r.is_warmup).map(|r| r.repetition).collect();
    assert_eq!(warm.len(), 2, "one earlier and one new warm-up: {warm:?}");
    assert!(warm.contains(&1), "the new warm-up is numbered after the stored one");

    // The server saw exactly what was missing: c03's retry, c04, c05 and one warm-up.
    let truth = ground_truth(&mock).await;
    assert_eq!(truth.len(), 4, "{:?}", truth.keys().collect::<Vec<_>>());
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_run_against_a_dead_endpoint_finishes_with_failures_recorded() {
    let file = evalset(2);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: connecting is refused
    let (store, _guard) = sqlite_store().await;
    let spec = candidate_spec(
        "gone",
        ProviderKind::OpenAiChat,
        &format!("http://127.0.0.1:{port}/v1"),
        "m",
    );
    let (run_id, candidate_id) = create_run(&store, &file, &spec, config(2, 0, 1)).await;
    assert_eq!(run_to_end(&store, run_id).await, RunStatus::Finished);
    let records = store.list_request_records(run_id).await.unwrap();
    assert_eq!(records.len(), 4, "2 cases × (first try + 1 retry)");
    assert!(
        records
            .iter()
            .all(|r| r.error_class == Some(ErrorClass::ConnectRefused))
    );
    let summary = summarise_candidate(candidate_id, &records, |_| 1.0);
    assert_eq!((summary.requests, summary.failures), (2, 2));
}

#[tokio::test]
async fn a_cancelled_run_stops_keeps_its_records_and_says_so() {
    let file = evalset(20);
    let profile = ModelProfile {
        ttft_ms: 50.0,
        inter_token_ms: Some(5.0),
        ..ModelProfile::named("slow")
    };
    let mock = start_mock(vec![profile], &file).await;
    let (store, _guard) = sqlite_store().await;
    let spec = candidate_spec("slow", ProviderKind::OpenAiChat, &mock.base_url(), "slow");
    let (run_id, _) = create_run(&store, &file, &spec, config(1, 0, 0)).await;
    let runner = Runner::new(store.clone());
    runner.start(run_id);
    assert!(runner.is_active(run_id));
    // Wait (bounded) until a few records are stored, then cancel.
    crate::support::wait::until("records written while the run goes on", RUN_DEADLINE, || async {
        let progress = store.run_progress(run_id).await.unwrap();
        progress.iter().map(|p| p.measured_attempts).sum::<i64>() >= 2
    })
    .await;
    assert!(runner.cancel(run_id));
    tokio::time::timeout(RUN_DEADLINE, runner.wait(run_id))
        .await
        .expect("cancel ends the run");
    assert!(!runner.is_active(run_id));
    let run = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    let records = store.list_request_records(run_id).await.unwrap();
    assert!(records.len() >= 2 && records.len() < 20, "{} records", records.len());
    assert!(
        records.iter().all(|r| r.succeeded()),
        "abandoned requests are not recorded as failures"
    );
    let events = store.list_run_events(run_id).await.unwrap();
    assert_eq!(events.last().map(|e| e.message.as_str()), Some("cancelled"));
    mock.shutdown().await.unwrap();
}

// --------------------------------------------------------------- quirks of raw servers

/// What a raw test server does on each connection after reading the request.
#[derive(Clone)]
enum Step {
    Write(Vec<u8>),
    /// Writes the bytes one at a time, flushing each (split reads).
    Trickle(Vec<u8>),
    Pause(Duration),
    /// Writes the bytes again and again, forever.
    Repeat(Vec<u8>, Duration),
    /// Keeps the connection open and silent.
    Hang,
}

struct RawServer {
    base_url: String,
    /// Every request received, as text (headers and body).
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn raw_server(script: Vec<Step>) -> RawServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((socket, _)) = listener.accept().await {
            connections.spawn(serve_connection(socket, script.clone(), seen.clone()));
        }
    });
    RawServer {
        base_url: format!("http://{addr}/v1"),
        requests,
        task,
    }
}

async fn serve_connection(mut socket: TcpStream, script: Vec<Step>, seen: Arc<Mutex<Vec<String>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // Headers, then Content-Length bytes of body.
    loop {
        let Ok(n) = socket.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                seen.lock().unwrap().push(text);
                break;
            }
        }
    }
    for step in script {
        let ok = match step {
            Step::Write(bytes) => socket.write_all(&bytes).await.is_ok(),
            Step::Trickle(bytes) => {
                let mut ok = true;
                for b in bytes {
                    ok &= socket.write_all(&[b]).await.is_ok() && socket.flush().await.is_ok();
                }
                ok
            }
            Step::Pause(d) => {
                tokio::time::sleep(d).await;
                true
            }
            Step::Repeat(bytes, every) => loop {
                if socket.write_all(&bytes).await.is_err() {
                    break false;
                }
                tokio::time::sleep(every).await;
            },
            Step::Hang => {
                std::future::pending::<()>().await;
                true
            }
        };
        if !ok {
            return;
        }
    }
    let _ = socket.shutdown().await;
}

fn http_head(status: &str, content_type: &str, extra: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{extra}connection: close\r\n\r\n").into_bytes()
}

fn full_response(status: &str, content_type: &str, body: &str) -> Step {
    let mut bytes = http_head(status, content_type, &format!("content-length: {}\r\n", body.len()));
    bytes.extend_from_slice(body.as_bytes());
    Step::Write(bytes)
}

/// An SSE response head without a length: the body ends when the connection closes.
fn sse_head() -> Step {
    Step::Write(http_head("200 OK", "text/event-stream", ""))
}

fn chat_chunk(content: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{content:?}}},\"finish_reason\":null}}]}}\n\n")
}

/// Sends one request for the first case of a small eval set with a fresh client.
async fn send_once(provider: ProviderKind, base_url: &str, stream: bool, timeouts: Timeouts) -> Exchange {
    let file = evalset(1);
    let spec = candidate_spec("raw", provider, base_url, "m");
    let client = CandidateClient::new(&spec, 1, timeouts).expect("client builds");
    let params = RequestParams {
        max_tokens: Some(16),
        temperature: None,
        stream,
    };
    let request = prepare(&spec, spec.api_key.as_ref(), &file, &file.cases[0], &params).expect("request builds");
    client.send(&request, 0).await
}

fn short_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        first_token: Duration::from_millis(600),
        stall: Duration::from_millis(1500),
        total: Duration::from_millis(1500),
    }
}

fn class(x: &Exchange) -> Option<ErrorClass> {
    x.failure.as_ref().map(|f| f.class)
}

fn detail(x: &Exchange) -> &str {
    x.failure.as_ref().map(|f| f.detail.as_str()).unwrap_or_default()
}

#[tokio::test]
async fn an_html_502_page_is_a_server_error_with_a_short_excerpt() {
    let page = format!(
        "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>{}</body></html>",
        "<p>nginx</p>".repeat(200)
    );
    let server = raw_server(vec![full_response("502 Bad Gateway", "text/html", &page)]).await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::HttpServerError));
    assert_eq!(x.http_status, Some(502));
    assert!(detail(&x).starts_with("HTTP 502 (text/html, not JSON): <html><head><title>502 Bad Gateway"));
    assert!(detail(&x).chars().count() <= 300);
}

#[tokio::test]
async fn a_200_html_page_is_a_non_json_response() {
    let server = raw_server(vec![full_response("200 OK", "text/html", "<html>Please log in</html>")]).await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::NonJsonResponse));
    assert!(detail(&x).contains("Please log in"));
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, false, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::NonJsonResponse));
}

#[tokio::test]
async fn status_codes_and_error_bodies_are_classified() {
    let cases = [
        (
            "429 Too Many Requests",
            r#"{"error":{"message":"Rate limit reached"}}"#,
            ErrorClass::RateLimited,
        ),
        (
            "400 Bad Request",
            r#"{"error":{"message":"This model's maximum context length is 4096 tokens.","code":"context_length_exceeded"}}"#,
            ErrorClass::ContextLengthExceeded,
        ),
        (
            "404 Not Found",
            r#"{"error":{"message":"no such model"}}"#,
            ErrorClass::HttpClientError,
        ),
        ("503 Service Unavailable", "upstream down", ErrorClass::HttpServerError),
    ];
    for (status, body, expected) in cases {
        let server = raw_server(vec![full_response(status, "application/json", body)]).await;
        let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
        assert_eq!(class(&x), Some(expected), "{status}: {}", detail(&x));
    }
}

#[tokio::test]
async fn the_key_is_sent_but_never_echoed_into_a_detail() {
    let server = raw_server(vec![full_response(
        "401 Unauthorized",
        "application/json",
        r#"{"error":{"message":"Incorrect API key provided: sk-engine-test-key"}}"#,
    )])
    .await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::HttpClientError));
    assert_eq!(detail(&x), "HTTP 401: Incorrect API key provided: ****");
    let request = server.requests.lock().unwrap()[0].to_lowercase();
    assert!(request.starts_with("post /v1/chat/completions http/1.1"));
    assert!(request.contains("authorization: bearer sk-engine-test-key"));
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_times_out_on_the_first_token() {
    let server = raw_server(vec![Step::Hang]).await;
    let started = Instant::now();
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    let took = started.elapsed();
    assert_eq!(class(&x), Some(ErrorClass::FirstTokenTimeout), "{}", detail(&x));
    assert!(x.headers_us.is_none());
    assert!(
        took >= Duration::from_millis(550) && took < Duration::from_secs(5),
        "{took:?}"
    );

    // Headers arrive, then silence: still no token.
    let server = raw_server(vec![sse_head(), Step::Write(b": ping\n\n".to_vec()), Step::Hang]).await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::FirstTokenTimeout));
    assert!(x.headers_us.is_some() && x.first_chunk_us.is_none());
}

#[tokio::test]
async fn a_stream_that_never_ends_hits_the_total_timeout() {
    let server = raw_server(vec![
        sse_head(),
        Step::Repeat(chat_chunk("tick ").into_bytes(), Duration::from_millis(40)),
    ])
    .await;
    let started = Instant::now();
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    let took = started.elapsed();
    assert_eq!(class(&x), Some(ErrorClass::TotalTimeout), "{}", detail(&x));
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert!(
        x.chunks.len() >= 5,
        "tokens before the timeout are kept: {}",
        x.chunks.len()
    );
    assert!(x.output.starts_with("tick tick"));
    assert_eq!(x.output_tokens_source, Some(TokenSource::Chunks));
}

#[tokio::test]
async fn cut_and_malformed_streams_are_classified() {
    let server = raw_server(vec![sse_head(), Step::Write(chat_chunk("half an ans").into_bytes())]).await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::StreamCut), "{}", detail(&x));
    assert_eq!(x.output, "half an ans");

    let server = raw_server(vec![
        sse_head(),
        Step::Write(chat_chunk("ok").into_bytes()),
        Step::Write(b"data: {\"choices\": [{\"delta\": \n\n".to_vec()),
        Step::Write(b"data: [DONE]\n\n".to_vec()),
    ])
    .await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::MalformedChunk), "{}", detail(&x));

    let server = raw_server(vec![
        sse_head(),
        Step::Write(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n".to_vec()),
        Step::Write(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_vec()),
    ])
    .await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::EmptyOutput), "{}", detail(&x));
    assert!(x.first_chunk_us.is_some());
    assert!(x.first_content_us.is_none() && x.first_reasoning_us.is_none());
}

#[tokio::test]
async fn a_byte_by_byte_crlf_stream_with_keep_alives_parses_whole() {
    let mut body = String::from(": keep-alive\r\n\r\n");
    body.push_str("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n");
    body.push_str("data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"思考\"}}]}\r\n\r\n");
    for word in ["正面", " ", "情绪"] {
        body.push_str(&chat_chunk(word).replace('\n', "\r\n"));
        body.push_str(": ping\r\n\r\n");
    }
    body.push_str("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n");
    body.push_str("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"completion_tokens_details\":{\"reasoning_tokens\":2}}}\r\n\r\n");
    body.push_str("data: [DONE]\r\n\r\n");
    let server = raw_server(vec![sse_head(), Step::Trickle(body.into_bytes())]).await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert!(x.succeeded(), "{}", detail(&x));
    assert_eq!(x.output, "正面 情绪");
    assert_eq!(x.reasoning, "思考");
    assert_eq!(x.chunks.len(), 4);
    assert_eq!(
        (x.output_tokens, x.reasoning_tokens, x.input_tokens),
        (Some(5), Some(2), Some(7))
    );
    assert_eq!(x.output_tokens_source, Some(TokenSource::Usage));
    assert!(x.first_reasoning_us.unwrap() <= x.first_content_us.unwrap());
    let record = x.into_record(bakeoff::engine::wire::client::RecordIdentity {
        run_id: 1,
        candidate_id: 1,
        case_id: "c00".into(),
        phase: Phase::Quality,
        repetition: 0,
        attempt: 0,
        concurrency: 1,
        is_warmup: false,
    });
    assert_eq!(record.output_chars, 5, "characters, not bytes");
}

#[tokio::test]
async fn an_anthropic_stream_is_measured_and_sent_with_its_headers() {
    let events = [
        (
            "message_start",
            r#"{"type":"message_start","message":{"type":"message","content":[],"stop_reason":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me see."}}"#,
        ),
        ("ping", r#"{"type":"ping"}"#),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hello"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" there"}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ];
    let mut script = vec![sse_head()];
    for (name, data) in events {
        script.push(Step::Write(format!("event: {name}\ndata: {data}\n\n").into_bytes()));
        script.push(Step::Pause(Duration::from_millis(5)));
    }
    // The connection stays open after message_stop: the client must not wait for it.
    script.push(Step::Hang);
    let server = raw_server(script).await;
    let x = send_once(ProviderKind::Anthropic, &server.base_url, true, short_timeouts()).await;
    assert!(x.succeeded(), "{}", detail(&x));
    assert_eq!(
        (x.output.as_str(), x.reasoning.as_str()),
        ("Hello there", "Let me see.")
    );
    assert_eq!(x.finish_reason.as_deref(), Some("end_turn"));
    assert_eq!((x.input_tokens, x.output_tokens), (Some(12), Some(9)));
    assert_eq!(x.chunks.len(), 3);
    assert!(x.first_chunk_us.unwrap() < x.first_reasoning_us.unwrap());
    assert!(x.first_reasoning_us.unwrap() < x.first_content_us.unwrap());
    let request = server.requests.lock().unwrap()[0].to_lowercase();
    assert!(request.starts_with("post /v1/messages http/1.1"));
    assert!(request.contains("x-api-key: sk-engine-test-key"));
    assert!(request.contains("anthropic-version: 2023-06-01"));
    assert!(!request.contains("authorization:"));
}

#[tokio::test]
async fn a_non_streamed_response_is_one_chunk_at_the_end() {
    let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#;
    let server = raw_server(vec![
        Step::Pause(Duration::from_millis(30)),
        full_response("200 OK", "application/json", body),
    ])
    .await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, false, short_timeouts()).await;
    assert!(x.succeeded(), "{}", detail(&x));
    assert_eq!(x.output, "done");
    let end = x.end_us.unwrap();
    assert_eq!(x.first_content_us, Some(end));
    assert_eq!(x.last_token_us, Some(end));
    assert_eq!(x.chunks, vec![(end, 2)]);
    assert!(end >= 25_000, "the server's pause is inside the measurement: {end} µs");
    let request = server.requests.lock().unwrap()[0].clone();
    assert!(request.contains("\"stream\":false"));
}

#[tokio::test]
async fn connection_refused_is_recognised_quickly() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let x = send_once(
        ProviderKind::OpenAiChat,
        &format!("http://127.0.0.1:{port}/v1"),
        true,
        short_timeouts(),
    )
    .await;
    assert_eq!(class(&x), Some(ErrorClass::ConnectRefused), "{}", detail(&x));
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(x.http_status.is_none() && x.headers_us.is_none());
}

#[tokio::test]
async fn dns_and_tls_failures_are_recognised() {
    // `.invalid` never resolves (RFC 6761). Where no resolver answers at all, the lookup
    // outlasts the deadline instead, which is a connect timeout.
    let started = Instant::now();
    let x = send_once(
        ProviderKind::OpenAiChat,
        "http://bakeoff-engine-test.invalid/v1",
        true,
        short_timeouts(),
    )
    .await;
    assert!(
        matches!(class(&x), Some(ErrorClass::Dns | ErrorClass::ConnectTimeout)),
        "{:?}: {}",
        class(&x),
        detail(&x)
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // A plain-HTTP server behind an https:// URL fails the TLS handshake.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = format!("https://{}/v1", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut hello = [0u8; 512];
        let _ = socket.read(&mut hello).await;
        let _ = socket
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
    });
    let x = send_once(ProviderKind::OpenAiChat, &https, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::Tls), "{}", detail(&x));
    server.abort();

    // A TLS handshake that never completes is a connect timeout, not a slow first token.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = format!("https://{}/v1", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (_socket, _) = listener.accept().await.unwrap();
        std::future::pending::<()>().await;
    });
    let started = Instant::now();
    let x = send_once(ProviderKind::OpenAiChat, &https, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::ConnectTimeout), "{}", detail(&x));
    assert!(started.elapsed() < Duration::from_secs(5));
    server.abort();
}

// ---------------------------------------------------- the stamped HTTP/1.1 client (wire/h1.rs)

/// A blocking server on a thread of its own, so a client whose runtime is blocked cannot hold it
/// up: on each connection it answers up to `answers` requests with `respond`, then closes it.
/// Returns the base URL and the count of connections accepted.
fn threaded_server(answers: usize, respond: fn(&mut std::net::TcpStream)) -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                for _ in 0..answers {
                    if !read_request(&mut socket) {
                        return;
                    }
                    respond(&mut socket);
                }
            });
        }
    });
    (base_url, accepted)
}

/// Reads one request (head and `content-length` body); false when the client went away.
fn read_request(socket: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match socket.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return false,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    socket.read_exact(&mut body).is_ok()
}

fn write_slowly(socket: &mut std::net::TcpStream, parts: &[&[u8]]) {
    use std::io::Write;
    for part in parts {
        let _ = socket.write_all(part);
        std::thread::sleep(Duration::from_millis(5));
    }
}

async fn client_and_request(base_url: &str) -> (CandidateClient, bakeoff::engine::wire::protocol::PreparedRequest) {
    let file = evalset(1);
    let spec = candidate_spec("stamped", ProviderKind::OpenAiChat, base_url, "m");
    let client = CandidateClient::new(&spec, 1, short_timeouts()).expect("client builds");
    let params = RequestParams {
        max_tokens: Some(16),
        temperature: None,
        stream: true,
    };
    let request = prepare(&spec, None, &file, &file.cases[0], &params).expect("request builds");
    (client, request)
}

#[tokio::test]
async fn a_chunked_keep_alive_stream_is_read_whole_and_its_connection_reused_until_the_server_closes_it() {
    // Two answers per connection, chunk sizes and writes that do not line up with SSE events.
    let (base_url, accepted) = threaded_server(2, |socket| {
        let events = format!("{}{}data: [DONE]\n\n", chat_chunk("Hello"), chat_chunk(" world"));
        let (first, rest) = events.as_bytes().split_at(30);
        let chunk = |data: &[u8]| {
            [
                format!("{:x};x=1\r\n", data.len()).into_bytes(),
                data.to_vec(),
                b"\r\n".to_vec(),
            ]
            .concat()
        };
        write_slowly(
            socket,
            &[
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                &chunk(first)[..7],
                &chunk(first)[7..],
                &chunk(rest),
                b"0\r\n\r\n",
            ],
        );
    });
    let (client, request) = client_and_request(&base_url).await;
    let mut reused = Vec::new();
    for attempt in 0..3 {
        if attempt == 2 {
            // The server has closed the connection it answered twice on.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let x = client.send(&request, 0).await;
        assert!(x.succeeded(), "attempt {attempt}: {}", detail(&x));
        assert_eq!(x.output, "Hello world");
        assert_eq!(x.chunks.len(), 2);
        assert!(x.headers_us.unwrap() <= x.first_content_us.unwrap());
        assert!(x.first_content_us.unwrap() <= x.end_us.unwrap());
        reused.push(x.connection_reused);
    }
    assert_eq!(reused, [Some(false), Some(true), Some(false)]);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_refused_unread_on_a_kept_alive_connection_is_sent_again_on_a_new_one() {
    // A server closes a kept-alive connection (an idle timeout) just as the next request
    // reaches it, so its kernel resets it with the request unread. The request goes once more,
    // on a new connection.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        use std::io::Write;
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                if !read_request(&mut socket) {
                    return;
                }
                let body = format!("{}data: [DONE]\n\n", chat_chunk("Hello"));
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(format!("{head}{body}").as_bytes());
                // Wait for the next request without reading it, then close: unread data makes
                // the kernel answer with a reset.
                let mut first = [0u8; 1];
                let _ = socket.peek(&mut first);
            });
        }
    });
    let (client, request) = client_and_request(&base_url).await;
    let first = client.send(&request, 0).await;
    assert!(first.succeeded(), "{}", detail(&first));
    let second = client.send(&request, 0).await;
    assert!(second.succeeded(), "{}", detail(&second));
    assert_eq!(second.output, "Hello");
    assert_eq!(second.connection_reused, Some(false), "answered on a new connection");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_a_kept_alive_connection_took_is_never_sent_twice_when_the_server_closes_instead_of_answering() {
    // The server answers the first request, then reads the second on the same connection and
    // closes it without a word (a crash): that is the server's failure to record, not a stale
    // connection to send the request again on.
    let (base_url, accepted) = threaded_server(2, |socket| {
        use std::io::Write;
        static REQUESTS: AtomicUsize = AtomicUsize::new(0);
        if REQUESTS.fetch_add(1, Ordering::SeqCst) == 1 {
            let _ = socket.shutdown(std::net::Shutdown::Both);
            return;
        }
        let body = format!("{}data: [DONE]\n\n", chat_chunk("Hello"));
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let _ = socket.write_all(format!("{head}{body}").as_bytes());
    });
    let (client, request) = client_and_request(&base_url).await;
    let first = client.send(&request, 0).await;
    assert!(first.succeeded(), "{}", detail(&first));
    let second = client.send(&request, 0).await;
    assert!(!second.succeeded());
    assert_eq!(second.connection_reused, Some(true));
    assert!(detail(&second).contains("closed before"), "{}", detail(&second));
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the request was sent again");
    // The next request gets a new connection and its answer.
    let third = client.send(&request, 0).await;
    assert!(third.succeeded(), "{}", detail(&third));
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn a_token_is_timed_when_it_reached_the_machine_not_when_a_busy_client_read_it() {
    // The server writes the first token ~50 ms after the request; the client's only thread is
    // blocked from before that write until well after it. A client timing its reads would put
    // the token at the block's end; the kernel's receive time puts it at the server's write.
    // Judged against the server's own clock readings around the write, so a loaded machine
    // delaying either side changes nothing.
    use std::sync::atomic::AtomicI64;

    use bakeoff::engine::wire::client::wall_clock_us;
    static REQUEST_READ: AtomicBool = AtomicBool::new(false);
    static WRITE_START_US: AtomicI64 = AtomicI64::new(0);
    static WRITE_END_US: AtomicI64 = AtomicI64::new(0);
    let (base_url, _) = threaded_server(1, |socket| {
        use std::io::Write;
        REQUEST_READ.store(true, Ordering::SeqCst);
        let _ =
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 1000000\r\n\r\n");
        std::thread::sleep(Duration::from_millis(50));
        WRITE_START_US.store(wall_clock_us(), Ordering::SeqCst);
        let _ = socket.write_all(chat_chunk("late").as_bytes());
        WRITE_END_US.store(wall_clock_us(), Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        let _ = socket.write_all(b"data: [DONE]\n\n");
        let _ = socket.shutdown(std::net::Shutdown::Both);
    });
    let (client, request) = client_and_request(&base_url).await;
    let exchange = tokio::spawn(async move { client.send(&request, 0).await });
    // The runtime sends the request; then its only thread is busy until the token was written
    // and 300 ms more.
    crate::support::wait::until("the server to read the request", RUN_DEADLINE, || async {
        REQUEST_READ.load(Ordering::SeqCst)
    })
    .await;
    crate::support::wait::until_blocking("the server to write the token", RUN_DEADLINE, || {
        WRITE_END_US.load(Ordering::SeqCst) > 0
    });
    std::thread::sleep(Duration::from_millis(300));
    let unblocked_us = wall_clock_us();
    let x = exchange.await.unwrap();
    assert_eq!(x.output, "late");
    let arrived_us = x.sent_at_us + x.first_content_us.unwrap();
    let (write_start, write_end) = (
        WRITE_START_US.load(Ordering::SeqCst),
        WRITE_END_US.load(Ordering::SeqCst),
    );
    // On loopback the kernel stamps the chunk during the server's write (5 ms for clock reads).
    assert!(
        arrived_us >= write_start - 5_000 && arrived_us <= write_end + 5_000,
        "token timed at {arrived_us} µs, written between {write_start} and {write_end}"
    );
    assert!(
        arrived_us + 250_000 < unblocked_us,
        "timed when read ({arrived_us} µs), not when it came; the client was busy until {unblocked_us}"
    );
    // The end came 500 ms (at least) after the token: it is timed as it arrived.
    assert!(x.end_us.unwrap() >= x.first_content_us.unwrap() + 500_000);
}

/// Reasoning in the content (issue 53, item 3) through the real client: the opening and
/// closing tags split across events that arrive 40 ms apart. The reasoning starts at the first
/// event (its bytes were the tag's start), the answer at the last one.
#[tokio::test]
async fn think_tags_split_across_events_time_the_answer_from_its_first_byte() {
    let pause = Duration::from_millis(40);
    let server = raw_server(vec![
        sse_head(),
        Step::Write(chat_chunk("  <th").into_bytes()),
        Step::Pause(pause),
        Step::Write(chat_chunk("ink>hm, 2<3 </thin").into_bytes()),
        Step::Pause(pause),
        Step::Write(chat_chunk("k>\n\n").into_bytes()),
        Step::Pause(pause),
        Step::Write(chat_chunk("yes </think>").into_bytes()),
        Step::Write(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_vec()),
    ])
    .await;
    let file = evalset(1);
    let mut spec = candidate_spec("raw", ProviderKind::OpenAiChat, &server.base_url, "m");
    let params = RequestParams {
        max_tokens: Some(16),
        temperature: None,
        stream: true,
    };
    let request = prepare(&spec, spec.api_key.as_ref(), &file, &file.cases[0], &params).unwrap();
    let client = CandidateClient::new(&spec, 1, short_timeouts()).unwrap();
    let x = client.send(&request, 0).await;
    assert!(x.succeeded(), "{}", detail(&x));
    // "</thin" + "k>" is the closing tag, split across two events.
    assert_eq!((x.reasoning.as_str(), x.output.as_str()), ("hm, 2<3 ", "yes </think>"));
    let recognised = x.content_reasoning.expect("recognised");
    assert!(recognised.opened && recognised.closed);
    assert_eq!(
        x.first_reasoning_us, x.first_chunk_us,
        "the reasoning began with the tag's first bytes"
    );
    let (reasoning, answer) = (x.first_reasoning_us.unwrap(), x.first_content_us.unwrap());
    assert!(answer - reasoning >= 3 * 40_000, "{reasoning} {answer}");
    assert_eq!(x.chunks.len(), 4, "every event with text carried a token");
    assert_eq!(x.output_tokens_source, Some(TokenSource::Chunks));

    // The same stream under `never`: the tags are the answer, which starts at once.
    spec.wire.reasoning_in_content = bakeoff::domain::reasoning::ReasoningInContent::Never;
    let client = CandidateClient::new(&spec, 1, short_timeouts()).unwrap();
    let x = client.send(&request, 0).await;
    assert!(x.output.starts_with("  <think>hm"), "{}", x.output);
    assert_eq!(x.first_content_us, x.first_chunk_us);
    assert!(x.content_reasoning.is_none() && x.reasoning.is_empty());

    // A stream that never closes its reasoning: no answer, and the error says why.
    let server = raw_server(vec![
        sse_head(),
        Step::Write(chat_chunk("<think>still going").into_bytes()),
        Step::Write(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n".to_vec()),
    ])
    .await;
    let x = send_once(ProviderKind::OpenAiChat, &server.base_url, true, short_timeouts()).await;
    assert_eq!(class(&x), Some(ErrorClass::EmptyOutput));
    assert!(detail(&x).contains("never closed"), "{}", detail(&x));
    assert_eq!(x.reasoning, "still going");
}
