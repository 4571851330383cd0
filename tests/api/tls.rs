//! https on one timed path: the stamped client under TLS against the mock served over TLS with
//! a certificate made here (`openssl`), on loopback. Streaming, usage, connection reuse, a
//! certificate refused with a clear error, the candidate's own CA, every record saying which
//! clock timed it; and reqwest's streaming path (behind a proxy) on its own.
use std::time::Duration;

use bakeoff::domain::candidate::{CandidateSpec, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{ClockCounts, ErrorClass, NewRun, RunConfig, RunStatus, TimingClock, TokenSource};
use bakeoff::engine::wire::client::{CandidateClient, Exchange, Timeouts};
use bakeoff::engine::wire::protocol::{PreparedRequest, RequestParams};
use bakeoff::engine::wire::provider::prepare;
use bakeoff::mock::tls::LoopbackCerts;
use bakeoff::mock::{LOG_CAPACITY, MockConfig, MockServer, ModelProfile};
use serde_json::Value;

use crate::support::db::{TestStore, each_backend};
use crate::support::runs::run_to_end;

fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"tls-test","task":"generation","prompt":"Sentence {{n}}","graders":[{"kind":"exact"}],"max_tokens":64}"#,
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"The quick brown fox number {i} jumps over the lazy dog\"}}"
        ));
    }
    EvalSetFile::parse("tls-test.jsonl", &text).expect("test eval set parses")
}

/// The mock over TLS with a certificate for 127.0.0.1 signed by a CA made in `dir`.
async fn tls_mock(dir: &std::path::Path, file: &EvalSetFile) -> (MockServer, LoopbackCerts) {
    let certs = LoopbackCerts::make(dir).expect("openssl makes the test certificates");
    let config = bakeoff::mock::tls::server_config(&certs.cert, &certs.key).expect("the mock's TLS setup");
    let profile = ModelProfile {
        ttft_ms: 30.0,
        inter_token_ms: Some(3.0),
        jitter: 0.0,
        ..ModelProfile::named("m")
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::mock::spawn_tls(
        MockConfig {
            profiles: vec![profile],
            answer_keys: vec![file.clone()],
            seed: 3,
        },
        listener,
        LOG_CAPACITY,
        config,
    )
    .await
    .expect("starting the mock over TLS");
    assert!(mock.base_url().starts_with("https://127.0.0.1:"), "{}", mock.base_url());
    (mock, certs)
}

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        first_token: Duration::from_secs(5),
        stall: Duration::from_secs(5),
        total: Duration::from_secs(10),
    }
}

fn spec(base_url: &str, ca: Option<&std::path::Path>) -> CandidateSpec {
    CandidateSpec {
        api_key: Some(Secret::new("sk-tls-test-key")),
        tls_ca_file: ca.map(|p| p.display().to_string()),
        ..CandidateSpec::openai_chat("tls", base_url, "m")
    }
}

fn request(spec: &CandidateSpec, file: &EvalSetFile, case: usize) -> PreparedRequest {
    let params = RequestParams {
        max_tokens: Some(16),
        temperature: None,
        stream: true,
    };
    let mut request = prepare(spec, None, file, &file.cases[case], &params).expect("request builds");
    // The id the mock's ground truth is kept under.
    let id = format!("tls-test-{case}-{}", std::process::id());
    request.headers.insert("x-request-id", id.parse().unwrap());
    request
}

fn detail(x: &Exchange) -> String {
    x.failure.as_ref().map(|f| f.detail.clone()).unwrap_or_default()
}

/// The mock's ground truth of one request, by the `x-request-id` bakeoff sent.
async fn truth_of(mock: &MockServer, ca: &std::path::Path, request: &PreparedRequest) -> Value {
    let id = request
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .expect("bakeoff sends x-request-id")
        .to_string();
    let pem = std::fs::read(ca).unwrap();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let page: Value = http
        .get(format!("{}/mock/requests", mock.root_url()))
        .send()
        .await
        .expect("ground truth over https")
        .json()
        .await
        .unwrap();
    page["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["client_request_id"].as_str() == Some(&id))
        .cloned()
        .unwrap_or_else(|| panic!("no ground truth for {id}: {page}"))
}

#[tokio::test]
async fn an_https_stream_is_read_whole_timed_by_the_kernel_and_its_connection_reused() {
    let dir = tempfile::tempdir().unwrap();
    let file = evalset(2);
    let (mock, certs) = tls_mock(dir.path(), &file).await;
    let spec = spec(&mock.base_url(), Some(&certs.ca));
    let client = CandidateClient::new(&spec, 1, timeouts()).expect("client builds");

    let first_request = request(&spec, &file, 0);
    let first = client.send(&first_request, 0).await;
    assert!(first.succeeded(), "{}", detail(&first));
    assert_eq!(
        first.output,
        file.cases[0].expected.as_ref().and_then(Value::as_str).unwrap()
    );
    assert_eq!(first.output_tokens_source, Some(TokenSource::Usage));
    assert!(first.output_tokens.is_some_and(|n| n > 1) && first.input_tokens.is_some());
    assert_eq!(first.connection_reused, Some(false));
    assert!(first.connect_us.is_some(), "DNS + TCP + TLS timed");
    assert_eq!(first.clock, Some(TimingClock::KernelStamp));
    // The first token as the mock sent it: TTFT within a loose bound of the mock's own.
    let truth = truth_of(&mock, &certs.ca, &first_request).await;
    let server_first = truth["first_token_ms"].as_f64().expect("the mock's first token");
    let ttft_ms = first.first_content_us.unwrap() as f64 / 1000.0;
    assert!(
        ttft_ms >= server_first - 1.0 && ttft_ms < server_first + 200.0,
        "TTFT {ttft_ms} ms against the mock's {server_first} ms"
    );

    // The next request rides the same TLS connection.
    let second = client.send(&request(&spec, &file, 1), 0).await;
    assert!(second.succeeded(), "{}", detail(&second));
    assert_eq!(second.connection_reused, Some(true));
    assert_eq!(second.connect_us, None);
    assert_eq!(
        second.output,
        file.cases[1].expected.as_ref().and_then(Value::as_str).unwrap()
    );
    assert_eq!(second.clock, Some(TimingClock::KernelStamp));
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_certificate_nobody_trusts_is_refused_with_a_clear_error_and_the_mock_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let file = evalset(1);
    let (mock, certs) = tls_mock(dir.path(), &file).await;
    // The system's roots only, then a CA that signed something else: both refuse it.
    for ca in [None, Some(certs.other_ca.as_path())] {
        let spec = spec(&mock.base_url(), ca);
        let client = CandidateClient::new(&spec, 1, timeouts()).expect("client builds");
        let x = client.send(&request(&spec, &file, 0), 0).await;
        assert_eq!(
            x.failure.as_ref().map(|f| f.class),
            Some(ErrorClass::Tls),
            "{}",
            detail(&x)
        );
        let why = detail(&x);
        assert!(
            why.contains("TLS handshake with 127.0.0.1 failed") && why.contains("certificate"),
            "{why}"
        );
        assert!(!why.contains("sk-tls-test-key"));
        assert_eq!(x.output, "");
    }
    // A CA file that is not there, or not PEM, is refused before anything is sent.
    let missing = dir.path().join("missing.pem");
    let e = CandidateClient::new(&spec(&mock.base_url(), Some(&missing)), 1, timeouts())
        .err()
        .expect("a missing CA file is refused");
    assert!(e.contains("TLS CA file") && e.contains("missing.pem"), "{e}");
    std::fs::write(dir.path().join("junk.pem"), "not a certificate").unwrap();
    let e = CandidateClient::new(
        &spec(&mock.base_url(), Some(&dir.path().join("junk.pem"))),
        1,
        timeouts(),
    )
    .err()
    .expect("a CA file without a certificate is refused");
    assert!(e.contains("junk.pem") && e.contains("no PEM certificate"), "{e}");
    // The refused handshakes cost the mock nothing: the trusted CA gets its answer.
    let spec = spec(&mock.base_url(), Some(&certs.ca));
    let client = CandidateClient::new(&spec, 1, timeouts()).unwrap();
    let x = client.send(&request(&spec, &file, 0), 0).await;
    assert!(x.succeeded(), "{}", detail(&x));
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn reqwests_streaming_path_reads_a_stream_whole_and_says_it_timed_it_in_user_space() {
    // The path a candidate behind a proxy takes: reqwest, timed when its reads return.
    let file = evalset(2);
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 20.0,
            inter_token_ms: Some(2.0),
            ..ModelProfile::named("m")
        }],
        answer_keys: vec![file.clone()],
        seed: 3,
    })
    .await;
    let spec = spec(&mock.base_url(), None);
    let client = CandidateClient::reference(&spec, 1, timeouts()).expect("client builds");
    let first = client.send(&request(&spec, &file, 0), 0).await;
    assert!(first.succeeded(), "{}", detail(&first));
    assert_eq!(
        first.output,
        file.cases[0].expected.as_ref().and_then(Value::as_str).unwrap()
    );
    assert_eq!(first.output_tokens_source, Some(TokenSource::Usage));
    assert!(first.chunks.len() > 1, "streamed in chunks: {:?}", first.chunks);
    assert_eq!(first.finish_reason.as_deref(), Some("stop"));
    assert!(first.first_content_us.unwrap() <= first.last_token_us.unwrap());
    assert!(first.last_token_us.unwrap() <= first.end_us.unwrap());
    assert_eq!(first.connection_reused, Some(false));
    assert_eq!(first.clock, Some(TimingClock::UserSpace));
    let second = client.send(&request(&spec, &file, 1), 0).await;
    assert!(second.succeeded(), "{}", detail(&second));
    assert_eq!(second.connection_reused, Some(true));
    assert_eq!(second.clock, Some(TimingClock::UserSpace));
    mock.shutdown().await.unwrap();
}

each_backend!(a_run_over_https_stores_which_clock_timed_every_record);
async fn a_run_over_https_stores_which_clock_timed_every_record(db: TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let file = evalset(4);
    let (mock, certs) = tls_mock(dir.path(), &file).await;
    let store = db.store.clone();
    let spec = spec(&mock.base_url(), Some(&certs.ca));
    let version = store.save_evalset_version(&file).await.unwrap();
    let candidate = store
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let stored = store.get_candidate(candidate).await.unwrap().unwrap();
    assert_eq!(stored.spec.tls_ca_file, spec.tls_ca_file, "the CA file is stored");
    let run = store
        .create_run(&NewRun {
            name: "tls".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate],
            config: RunConfig {
                concurrency: 2,
                warmup_requests: 1,
                timeout_secs: 20,
                staged_rollout: false,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    assert_eq!(run_to_end(&store, run).await, RunStatus::Finished);
    let records = store.list_request_records(run).await.unwrap();
    assert!(records.len() >= 4);
    for r in &records {
        assert!(r.succeeded(), "{:?}: {:?}", r.error_class, r.error_detail());
        assert_eq!(
            r.clock,
            Some(TimingClock::KernelStamp),
            "{}: stored and read back",
            db.backend
        );
    }
    let counts = ClockCounts::of(records.iter().filter(|r| !r.is_warmup));
    assert_eq!(counts.label(), "kernel stamp");
    // The run's export says it too, record by record.
    let export = bakeoff::app::transfer::export_run(&*store, run).await.unwrap();
    let json = serde_json::to_value(&export).unwrap();
    let clocks: Vec<&str> = json["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["clock"].as_str().unwrap_or("none"))
        .collect();
    assert!(
        !clocks.is_empty() && clocks.iter().all(|c| *c == "kernel-stamp"),
        "{clocks:?}"
    );
    mock.shutdown().await.unwrap();
}
