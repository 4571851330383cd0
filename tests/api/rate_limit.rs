//! Each provider's rate-limit headers are recorded per request and summarised on the run page
//! (issue 53 item 4), against the built-in mock over real HTTP: the stored `rate_limit` of every
//! record is checked against what the mock's `x-ratelimit-*` headers must have said (a fixed
//! one-minute window counting each request), a planned 429's `retry-after` is kept, and the run
//! page explains the throttling for the candidate that had it and says nothing for the one whose
//! server sent no headers and never refused.
use bakeoff::domain::candidate::{CandidateSpec, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus, TimingClock};
use bakeoff::mock::{MockConfig, ModelProfile};

use crate::support::app::spawn_app_on;
use crate::support::db::{TestStore, each_backend};
use crate::support::runs::RUN_DEADLINE;

const LIMIT: u32 = 1000;

fn evalset(cases: usize) -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"rate-limit-test","task":"generation","prompt":"Sentence {{n}}","graders":[{"kind":"exact"}],"max_tokens":16}"#,
    );
    for i in 0..cases {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"fox {i}\"}}"
        ));
    }
    EvalSetFile::parse("rate-limit-test.jsonl", &text).expect("test eval set parses")
}

fn quick(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 2.0,
        inter_token_ms: Some(1.0),
        requests_per_minute: LIMIT,
        ..ModelProfile::named(name)
    }
}

async fn rate_limit_headers_are_recorded_and_the_run_page_explains_the_429s(t: TestStore) {
    let app = spawn_app_on(t).await;
    let file = evalset(4);
    // alpha refuses its 2nd and 3rd admitted requests (the retry of the 2nd included).
    let throttled = ModelProfile {
        rate_limit_requests: vec![2, 3],
        retry_after_s: 1,
        ..quick("alpha")
    };
    let silent = ModelProfile {
        no_rate_limit_headers: true,
        ..quick("beta")
    };
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![throttled, silent],
        answer_keys: vec![file.clone()],
        seed: 5,
    })
    .await;
    let spec = |name: &str, model: &str| CandidateSpec {
        api_key: Some(Secret::new("sk-rate-limit-test")),
        ..CandidateSpec::openai_chat(name, mock.base_url(), model)
    };
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let mut ids = Vec::new();
    for s in [spec("alpha", "alpha"), spec("beta", "beta")] {
        ids.push(
            app.store
                .create_candidate(&crate::support::checked::admin_new(&s))
                .await
                .unwrap(),
        );
    }
    let config = RunConfig {
        concurrency: 1,
        warmup_requests: 0,
        temperature: Some(0.0),
        timeout_secs: 20,
        retries: 2,
        staged_rollout: false,
        ..RunConfig::default()
    };
    let run = app
        .store
        .create_run(&NewRun {
            name: "rate-limit test".into(),
            evalset_version_id: version,
            candidate_ids: ids.clone(),
            config,
        })
        .await
        .unwrap();
    app.state.runner.start(run);
    tokio::time::timeout(RUN_DEADLINE, app.state.runner.wait(run))
        .await
        .expect("the run ended in time");
    let status = app.store.get_run(run).await.unwrap().unwrap().status;
    assert_eq!(status, RunStatus::Finished, "{}", app.backend);

    let mut records = app.store.list_request_records(run).await.unwrap();
    records.sort_by_key(|r| r.sent_at_us);
    let alpha: Vec<_> = records.iter().filter(|r| r.candidate_id == ids[0]).collect();
    let beta: Vec<_> = records.iter().filter(|r| r.candidate_id == ids[1]).collect();
    assert_eq!(alpha.len(), 4 + 2, "{}: four cases and two retried 429s", app.backend);
    assert_eq!(alpha.iter().filter(|r| r.http_status == Some(429)).count(), 2);
    // One at a time: the n-th request the mock admitted saw LIMIT - n remaining in its window.
    for (n, r) in alpha.iter().enumerate() {
        let rl = r
            .rate_limit
            .as_deref()
            .unwrap_or_else(|| panic!("{}: record {n} has rate-limit data", app.backend));
        assert_eq!(rl.requests.limit, Some(u64::from(LIMIT)), "{rl:?}");
        assert_eq!(rl.requests.remaining, Some(u64::from(LIMIT) - n as u64 - 1), "{rl:?}");
        assert!(rl.requests.reset_s.is_some_and(|s| (0.0..=60.0).contains(&s)), "{rl:?}");
        let asked = (r.http_status == Some(429)).then_some(1.0);
        assert_eq!(rl.retry_after_s, asked, "{rl:?}");
        assert_eq!(rl.tokens, Default::default(), "the mock states no token limit");
    }
    assert!(
        beta.iter().all(|r| r.rate_limit.is_none() && r.succeeded()),
        "{}",
        app.backend
    );

    let page = app.get_html(&format!("/runs/{run}")).await;
    let rows = page.texts(".rate-limit-list li");
    assert_eq!(rows.len(), 1, "only alpha had rate limits to explain: {rows:?}");
    let text = &rows[0];
    assert!(text.starts_with("alpha"), "{text}");
    let lowest = u64::from(LIMIT) - alpha.len() as u64;
    for part in [
        "The provider throttled: 2 of 6 attempts answered 429".to_string(),
        format!("limit {LIMIT} requests/min"),
        format!("remaining requests went down to {lowest} at "),
        "retry-after asked: 1 s".to_string(),
    ] {
        assert!(text.contains(&part), "{}: {part:?} in {text:?}", app.backend);
    }
    assert!(!text.contains("sk-rate-limit-test"));
}
each_backend!(rate_limit_headers_are_recorded_and_the_run_page_explains_the_429s);

/// Both clients (the kernel-stamped one and reqwest, as behind a proxy) hand the same
/// rate-limit headers to the exchange, on a success and on a 429.
#[tokio::test]
async fn both_clients_record_the_rate_limit_headers() {
    use bakeoff::engine::wire::client::{CandidateClient, Timeouts};
    use bakeoff::engine::wire::protocol::RequestParams;
    use std::time::Duration;

    let file = evalset(1);
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            rate_limit_requests: vec![2, 4],
            retry_after_s: 7,
            ..quick("m")
        }],
        answer_keys: vec![file.clone()],
        seed: 3,
    })
    .await;
    let spec = CandidateSpec::openai_chat("m", mock.base_url(), "m");
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        first_token: Duration::from_secs(5),
        stall: Duration::from_secs(5),
        total: Duration::from_secs(10),
    };
    let params = RequestParams {
        max_tokens: Some(8),
        temperature: None,
        stream: true,
    };
    let request = bakeoff::engine::wire::provider::prepare(&spec, None, &file, &file.cases[0], &params).unwrap();
    let stamped = CandidateClient::new(&spec, 1, timeouts).unwrap();
    let reference = CandidateClient::reference(&spec, 1, timeouts).unwrap();
    // Admitted requests 1..4: ok, 429, ok, 429 — alternating clients.
    for (n, client) in [&stamped, &reference, &reference, &stamped].into_iter().enumerate() {
        let x = client.send(&request, 0).await;
        let rl = x
            .rate_limit
            .unwrap_or_else(|| panic!("request {} has rate-limit data", n + 1));
        assert_eq!(rl.requests.limit, Some(u64::from(LIMIT)), "{rl:?}");
        assert_eq!(rl.requests.remaining, Some(u64::from(LIMIT) - n as u64 - 1), "{rl:?}");
        let refused = n % 2 == 1;
        assert_eq!(x.http_status, Some(if refused { 429 } else { 200 }));
        assert_eq!(rl.retry_after_s, refused.then_some(7.0), "{rl:?}");
        // The successes show which client carried them.
        let clock = [Some(TimingClock::KernelStamp), None, Some(TimingClock::UserSpace), None][n];
        if clock.is_some() {
            assert_eq!(x.clock, clock, "request {}", n + 1);
        }
    }
    mock.shutdown().await.unwrap();
}
