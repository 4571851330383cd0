//! Hosted APIs as teams call them (issue 53, item 4), against the mock: the OpenAI Responses API
//! streamed and whole, and an Azure-shaped deployment URL with its `api-version` and `api-key`.
use std::time::Duration;

use bakeoff::domain::candidate::{CandidateDraft, CandidateSpec, Secret};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::run::{ErrorClass, TokenSource};
use bakeoff::engine::wire::client::{CandidateClient, Exchange, Timeouts};
use bakeoff::engine::wire::protocol::RequestParams;
use bakeoff::engine::wire::provider::prepare;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};
use serde_json::Value;

const EVALSET: &str = r#"{"bakeoff_evalset":1,"name":"hosted","task":"classification","system":"One word.","prompt":"Label: {{text}}","graders":[{"kind":"exact"}]}
{"id":"a","vars":{"text":"I love it"},"expected":"positive"}
"#;

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        first_token: Duration::from_secs(10),
        stall: Duration::from_secs(10),
        total: Duration::from_secs(20),
    }
}

async fn mock(file: &EvalSetFile) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles: vec![ModelProfile {
            ttft_ms: 5.0,
            inter_token_ms: Some(20.0),
            reasoning_tokens: 4,
            ..ModelProfile::named("gpt-dep")
        }],
        answer_keys: vec![file.clone()],
        seed: 53,
    })
    .await
}

async fn send(spec: &CandidateSpec, file: &EvalSetFile, stream: bool) -> Exchange {
    let params = RequestParams {
        max_tokens: Some(32),
        temperature: Some(0.0),
        stream,
    };
    let key = spec.resolve_api_key();
    let request = prepare(spec, key.as_ref(), file, &file.cases[0], &params).unwrap();
    CandidateClient::new(spec, 1, timeouts())
        .unwrap()
        .send(&request, 0)
        .await
}

async fn last_truth(mock: &MockServer) -> Value {
    let page: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["requests"].as_array().unwrap().last().cloned().unwrap()
}

fn candidate(provider: &str, base_url: &str) -> CandidateSpec {
    let mut spec = CandidateDraft {
        name: format!("hosted {provider}"),
        provider: provider.into(),
        base_url: base_url.into(),
        model: "gpt-dep".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    spec.api_key = Some(Secret::new("sk-hosted-test-0123456789"));
    spec
}

#[tokio::test]
async fn a_responses_api_stream_and_whole_response_are_measured_as_the_mock_sent_them() {
    let file = EvalSetFile::parse("hosted.jsonl", EVALSET).unwrap();
    let mock = mock(&file).await;
    let spec = candidate("openai-responses", &mock.base_url());

    let x = send(&spec, &file, true).await;
    assert!(x.succeeded(), "{:?}", x.failure);
    let truth = last_truth(&mock).await;
    assert_eq!(truth["endpoint"], "responses");
    assert_eq!(truth["auth_header"], "authorization");
    assert_eq!(x.output, "positive");
    assert_eq!(
        bakeoff::mock::tokens::count_tokens(&x.reasoning),
        4,
        "{:?}",
        x.reasoning
    );
    // Usage from `response.completed`, reasoning tokens included.
    assert_eq!(x.output_tokens_source, Some(TokenSource::Usage));
    assert_eq!(x.output_tokens, Some(truth["tokens_sent"].as_u64().unwrap() as u32));
    assert_eq!(x.reasoning_tokens, Some(4));
    assert_eq!(x.input_tokens, Some(truth["prompt_tokens"].as_u64().unwrap() as u32));
    assert_eq!(x.finish_reason.as_deref(), Some("stop"));
    // Reasoning deltas before the answer's, apart by what the mock put between them (4 tokens
    // 20 ms apart).
    let server_gap = truth["first_content_ms"].as_f64().unwrap() - truth["first_token_ms"].as_f64().unwrap();
    let gap = (x.first_content_us.unwrap() - x.first_reasoning_us.unwrap()) as f64 / 1000.0;
    assert!(
        server_gap >= 60.0 && (gap - server_gap).abs() < 25.0,
        "{gap} vs {server_gap}"
    );
    assert_eq!(x.chunks.len() as u64, truth["token_chunks_sent"].as_u64().unwrap());

    // The same, not streamed: one JSON response object with its output items.
    let x = send(&spec, &file, false).await;
    assert!(x.succeeded(), "{:?}", x.failure);
    assert_eq!(x.output, "positive");
    assert_eq!(x.reasoning_tokens, Some(4));
    assert!(!x.reasoning.is_empty());

    // Cut by max_output_tokens: `response.incomplete` is a `length` finish.
    let params = RequestParams {
        max_tokens: Some(1),
        temperature: None,
        stream: true,
    };
    let request = prepare(&spec, spec.api_key.as_ref(), &file, &file.cases[0], &params).unwrap();
    let x = CandidateClient::new(&spec, 1, timeouts())
        .unwrap()
        .send(&request, 0)
        .await;
    assert_eq!(x.finish_reason.as_deref(), Some("length"), "{:?}", x.failure);
}

#[tokio::test]
async fn an_azure_deployment_gets_its_api_version_and_the_key_as_api_key() {
    let file = EvalSetFile::parse("hosted.jsonl", EVALSET).unwrap();
    let mock = mock(&file).await;
    // As pasted from the portal: the whole chat-completions URL.
    let url = format!(
        "{}/openai/deployments/gpt-dep/chat/completions?api-version=2024-10-21",
        mock.root_url()
    );
    let spec = candidate("azure-openai", &url);
    assert_eq!(
        spec.base_url,
        format!("{}/openai/deployments/gpt-dep?api-version=2024-10-21", mock.root_url())
    );
    for stream in [true, false] {
        let x = send(&spec, &file, stream).await;
        assert!(x.succeeded(), "{:?}", x.failure);
        assert_eq!(x.output, "positive");
        let truth = last_truth(&mock).await;
        assert_eq!(
            truth["auth_header"], "api-key",
            "the key went as api-key, not a bearer token"
        );
        assert_eq!(truth["api_version"], "2024-10-21");
        assert_eq!(truth["model"], "gpt-dep");
    }
    // Without a key Azure answers 401 (a client error, as every 4xx but 429).
    let mut keyless = spec.clone();
    keyless.api_key = None;
    let x = send(&keyless, &file, true).await;
    assert_eq!(x.http_status, Some(401));
    assert_eq!(
        x.failure.as_ref().map(|f| f.class),
        Some(ErrorClass::HttpClientError),
        "{:?}",
        x.failure
    );
}
