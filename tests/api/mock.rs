//! The built-in mock over real HTTP: OpenAI wire shapes, answer keys, injected faults, slots and
//! the ground truth it records. Every server binds 127.0.0.1:0 and is shut down at the end.
use std::time::Duration;

use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile, parse_profiles};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

const SET: &str = r#"{"bakeoff_evalset":1,"name":"routing","task":"classification","system":"Answer with the queue.","prompt":"Ticket: {{ticket}}"}
{"id":"a","vars":{"ticket":"charged twice"},"expected":"billing"}
{"id":"b","vars":{"ticket":"app crashes"},"expected":"technical"}
{"id":"c","vars":{"ticket":"cannot log in"},"expected":"account"}
{"id":"d","vars":{"ticket":"parcel stuck"},"expected":"shipping"}
{"id":"e","vars":{"ticket":"refund please"},"expected":"billing"}
{"id":"f","vars":{"ticket":"explain the delay"},"expected":"the parcel is held in customs until the duty is paid"}
"#;

struct Mock {
    server: MockServer,
    http: reqwest::Client,
}

impl Mock {
    async fn start(profiles: Vec<ModelProfile>, seed: u64) -> Mock {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = MockConfig {
            profiles,
            answer_keys: vec![set()],
            seed,
        };
        let server = bakeoff::mock::spawn(config, listener).await.unwrap();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Mock { server, http }
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.server.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn chat(&self, body: Value) -> (u16, Value) {
        let r = self.post("/chat/completions", body).await;
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// A streamed 200 response: its headers and its `data:` payloads, in order.
    async fn stream(&self, path: &str, body: Value) -> (HeaderMap, Vec<String>) {
        let r = self.post(path, body).await;
        assert_eq!(r.status(), 200);
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        assert!(
            text.ends_with("\n\n") || text.is_empty(),
            "events end with a blank line: {text:?}"
        );
        let events = text
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.strip_prefix("data: ")
                    .expect("every event is a data line")
                    .to_string()
            })
            .collect();
        (headers, events)
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.server.root_url()))
            .send()
            .await
            .unwrap()
    }

    async fn ground_truth(&self, query: &str) -> Vec<Value> {
        let page: Value = self.get(&format!("/mock/requests{query}")).await.json().await.unwrap();
        page["requests"].as_array().unwrap().clone()
    }

    async fn stop(self) {
        drop(self.http);
        self.server.shutdown().await.unwrap();
    }
}

fn set() -> EvalSetFile {
    EvalSetFile::parse("routing.jsonl", SET).unwrap()
}

/// A profile that answers at once: tests about shapes should not wait.
fn quick(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 1.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named(name)
    }
}

fn messages(ticket: &str) -> Value {
    json!([
        { "role": "system", "content": "Answer with the queue." },
        { "role": "user", "content": format!("Ticket: {ticket}") }
    ])
}

fn parse(event: &str) -> Value {
    serde_json::from_str(event).unwrap_or_else(|e| panic!("{e}: {event}"))
}

/// Content of the JSON chunks of a chat stream, concatenated per delta field.
fn deltas(events: &[String], field: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| parse(e))
        .filter_map(|v| v["choices"][0]["delta"][field].as_str().map(str::to_string))
        .filter(|s| !s.is_empty())
        .collect()
}

#[tokio::test]
async fn streaming_chat_has_role_chunk_tokens_finish_and_usage() {
    let mock = Mock::start(vec![quick("m")], 1).await;
    let (headers, events) = mock
        .stream(
            "/chat/completions",
            json!({ "model": "m", "messages": messages("something new"), "max_tokens": 10, "stream": true,
                    "stream_options": { "include_usage": true } }),
        )
        .await;
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(headers["server"].to_str().unwrap().starts_with("bakeoff-mock/"));
    assert!(
        headers.contains_key("x-ratelimit-limit-requests") && headers.contains_key("x-ratelimit-remaining-requests")
    );
    let id = headers["x-request-id"].to_str().unwrap().to_string();

    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| parse(e)).collect();
    let first = &chunks[0];
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(
        (first["id"].as_str(), first["model"].as_str()),
        (Some(id.as_str()), Some("m"))
    );
    assert!(first["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(
        first["choices"][0]["delta"],
        json!({ "role": "assistant", "content": "" })
    );

    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    let usage = &usage_chunk["usage"];
    assert_eq!(usage["completion_tokens"], 10);
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 8);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().unwrap() + 10)
    );

    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let content = deltas(&events, "content");
    // An unknown prompt gets filler of exactly max_tokens tokens, one per chunk here.
    assert_eq!(content.len(), 10);
    assert_eq!(bakeoff::mock::tokens::count_tokens(&content.concat()), 10);
    for chunk in &chunks[1..chunks.len() - 2] {
        assert!(chunk["choices"][0]["finish_reason"].is_null());
    }
    mock.stop().await;
}

#[tokio::test]
async fn non_streaming_reports_usage_and_stop_or_length() {
    let mock = Mock::start(vec![quick("m")], 1).await;
    let long = "the parcel is held in customs until the duty is paid";
    let expected_tokens = bakeoff::mock::tokens::count_tokens(long);
    let (status, body) = mock
        .chat(json!({ "model": "m", "messages": messages("explain the delay"), "max_tokens": 100 }))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "m");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["content"], long);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], expected_tokens);
    assert_eq!(body["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

    let (_, cut) = mock
        .chat(json!({ "model": "m", "messages": messages("explain the delay"), "max_tokens": 3 }))
        .await;
    assert_eq!(cut["choices"][0]["finish_reason"], "length");
    assert_eq!(cut["choices"][0]["message"]["content"], "the parcel is");
    assert_eq!(cut["usage"]["completion_tokens"], 3);

    // Completions: same answer key through the flattened prompt, object text_completion.
    let r = mock
        .post(
            "/completions",
            json!({ "model": "m", "prompt": "Answer with the queue.\n\nTicket: charged twice", "max_tokens": 5 }),
        )
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], "billing");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    mock.stop().await;
}

#[tokio::test]
async fn chunks_carry_several_tokens_and_completions_stream_has_no_role_chunk() {
    let mock = Mock::start(
        vec![ModelProfile {
            tokens_per_chunk: 4,
            ..quick("m")
        }],
        1,
    )
    .await;
    let (_, events) = mock
        .stream(
            "/completions",
            json!({ "model": "m", "prompt": "write on", "max_tokens": 13, "stream": true }),
        )
        .await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| parse(e)).collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let texts: Vec<&str> = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .filter(|t| !t.is_empty())
        .collect();
    let sizes: Vec<u32> = texts.iter().map(|t| bakeoff::mock::tokens::count_tokens(t)).collect();
    // The first token goes alone, then chunks of four.
    assert_eq!(sizes, vec![1, 4, 4, 4]);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
    let truth = mock.ground_truth("").await;
    assert_eq!(
        (truth[0]["tokens_sent"].as_u64(), truth[0]["token_chunks_sent"].as_u64()),
        (Some(13), Some(4))
    );
    mock.stop().await;
}

#[tokio::test]
async fn reasoning_comes_before_the_answer_and_is_counted() {
    let mock = Mock::start(
        vec![ModelProfile {
            reasoning_tokens: 5,
            ..quick("thinker")
        }],
        1,
    )
    .await;
    let (_, events) = mock
        .stream(
            "/chat/completions",
            json!({ "model": "thinker", "messages": messages("app crashes"), "max_tokens": 4, "stream": true,
                    "stream_options": { "include_usage": true } }),
        )
        .await;
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| parse(e))
        .filter_map(|v| {
            let delta = &v["choices"][0]["delta"];
            if delta["reasoning_content"].as_str().is_some_and(|s| !s.is_empty()) {
                Some("reasoning")
            } else if delta["content"].as_str().is_some_and(|s| !s.is_empty()) {
                Some("content")
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        kinds,
        vec!["reasoning"; 5]
            .into_iter()
            .chain(["content", "content"])
            .collect::<Vec<_>>()
    );
    assert_eq!(deltas(&events, "content").concat(), "technical");
    let usage = parse(&events[events.len() - 2])["usage"].clone();
    // Reasoning is in completion_tokens, and does not use up max_tokens by default.
    assert_eq!(usage["completion_tokens"], 7);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 5);

    let (_, body) = mock
        .chat(json!({ "model": "thinker", "messages": messages("app crashes") }))
        .await;
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], "technical");
    assert_eq!(
        bakeoff::mock::tokens::count_tokens(message["reasoning_content"].as_str().unwrap()),
        5
    );
    let truth = mock.ground_truth("").await;
    let first = &truth[0];
    assert!(first["first_token_ms"].as_f64().unwrap() < first["first_content_ms"].as_f64().unwrap());
    mock.stop().await;
}

/// Each profile's answers to every case of the set, via chat.
async fn answers(mock: &Mock, model: &str) -> Vec<String> {
    let mut out = Vec::new();
    for case in &set().cases {
        let ticket = case.vars["ticket"].as_str().unwrap();
        let (status, body) = mock
            .chat(json!({ "model": model, "messages": messages(ticket), "max_tokens": 50 }))
            .await;
        assert_eq!(status, 200);
        out.push(body["choices"][0]["message"]["content"].as_str().unwrap().to_string());
    }
    out
}

#[tokio::test]
async fn answer_key_accuracy_is_deterministic_per_case_and_seed() {
    let profiles = || {
        vec![
            ModelProfile {
                accuracy: 1.0,
                ..quick("right")
            },
            ModelProfile {
                accuracy: 0.0,
                ..quick("wrong")
            },
            ModelProfile {
                accuracy: 0.5,
                ..quick("half")
            },
        ]
    };
    let expected: Vec<String> = set().cases.iter().map(|c| c.expected_text().unwrap()).collect();
    let mock = Mock::start(profiles(), 7).await;
    assert_eq!(answers(&mock, "right").await, expected);
    let wrong = answers(&mock, "wrong").await;
    for (got, want) in wrong.iter().zip(&expected) {
        assert_ne!(got, want);
        // A plausible wrong answer: another label of the same set.
        assert!(expected.contains(got), "{got}");
    }
    let half = answers(&mock, "half").await;
    // Asking again gives the same answers: the decision is per case, not per request.
    assert_eq!(answers(&mock, "half").await, half);
    let truth = mock.ground_truth("?model=half").await;
    assert_eq!(truth.len(), 2 * expected.len());
    for (record, (got, want)) in truth.iter().zip(half.iter().zip(&expected)) {
        assert_eq!(record["case"]["set"], "routing");
        assert_eq!(record["case"]["correct"].as_bool(), Some(got == want));
    }
    mock.stop().await;

    // Another server with the same seed answers the same way.
    let again = Mock::start(profiles(), 7).await;
    assert_eq!(answers(&again, "half").await, half);
    again.stop().await;
}

#[tokio::test]
async fn injected_429_and_500_use_openai_error_shapes() {
    let mock = Mock::start(
        vec![
            ModelProfile {
                error_429_rate: 1.0,
                retry_after_s: 3,
                ..quick("limited")
            },
            ModelProfile {
                error_500_rate: 1.0,
                ..quick("broken")
            },
        ],
        1,
    )
    .await;
    let r = mock
        .post(
            "/chat/completions",
            json!({ "model": "limited", "messages": messages("x"), "stream": true }),
        )
        .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "3");
    assert!(r.headers().contains_key("x-ratelimit-remaining-requests"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(body["error"]["message"].as_str().is_some() && body["error"].get("param").is_some());

    let (status, body) = mock.chat(json!({ "model": "broken", "messages": messages("x") })).await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["type"], "server_error");
    assert!(body["error"]["code"].is_null());

    let truth = mock.ground_truth("").await;
    let statuses: Vec<u64> = truth.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, vec![429, 500]);
    assert!(truth.iter().all(|r| r["outcome"] == "error"));
    mock.stop().await;
}

#[tokio::test]
async fn bad_requests_get_400_404_and_context_length_exceeded() {
    let mock = Mock::start(
        vec![ModelProfile {
            context_length: 40,
            ..quick("small")
        }],
        1,
    )
    .await;
    let long = "word ".repeat(60);
    let (status, body) = mock
        .chat(json!({ "model": "small", "messages": [{ "role": "user", "content": long }] }))
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["param"], "messages");
    // Prompt fits, but prompt + max_tokens does not.
    let (status, body) = mock
        .chat(json!({ "model": "small", "messages": messages("x"), "max_tokens": 39 }))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("context_length_exceeded"))
    );

    let (status, body) = mock.chat(json!({ "model": "nope", "messages": messages("x") })).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("model_not_found")));
    let (status, body) = mock.chat(json!({ "model": "small", "messages": [] })).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("messages")));
    let (status, body) = mock
        .chat(json!({ "model": "small", "messages": messages("x"), "max_tokens": 0 }))
        .await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("max_tokens")));
    let r = mock
        .http
        .post(format!("{}/chat/completions", mock.server.base_url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let r = mock.get("/v1/nothing-here").await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "unknown_url");
    mock.stop().await;
}

#[tokio::test]
async fn malformed_chunk_and_cut_stream_are_injected() {
    let mock = Mock::start(
        vec![
            ModelProfile {
                malformed_probability: 1.0,
                ..quick("garbled")
            },
            ModelProfile {
                cut_probability: 1.0,
                ..quick("cut")
            },
        ],
        1,
    )
    .await;
    let request = |model: &str| json!({ "model": model, "messages": messages("x"), "max_tokens": 20, "stream": true });
    let (_, events) = mock.stream("/chat/completions", request("garbled")).await;
    let invalid = events
        .iter()
        .filter(|e| e.as_str() != "[DONE]" && serde_json::from_str::<Value>(e).is_err())
        .count();
    assert_eq!(invalid, 1);
    assert_eq!(events.last().unwrap(), "[DONE]");

    let (_, events) = mock.stream("/chat/completions", request("cut")).await;
    assert!(!events.iter().any(|e| e == "[DONE]"));
    let chunks: Vec<Value> = events.iter().map(|e| parse(e)).collect();
    assert!(chunks.iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
    let content = deltas(&events, "content");
    assert!(!content.is_empty() && content.len() < 20, "{}", content.len());

    let truth = mock.ground_truth("").await;
    assert_eq!(truth[0]["malformed_chunks"], 1);
    assert_eq!(truth[0]["outcome"], "completed");
    assert_eq!(truth[1]["outcome"], "cut");
    assert_eq!(truth[1]["tokens_sent"].as_u64(), Some(content.len() as u64));
    assert!(truth[1]["finish_reason"].is_null());

    // Non-streaming: the malformed body is not JSON; the cut one breaks off mid-body.
    let r = mock
        .post(
            "/chat/completions",
            json!({ "model": "garbled", "messages": messages("x") }),
        )
        .await;
    assert!(serde_json::from_str::<Value>(&r.text().await.unwrap()).is_err());
    let r = mock
        .post(
            "/chat/completions",
            json!({ "model": "cut", "messages": messages("x") }),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.is_err());
    mock.stop().await;
}

#[tokio::test]
async fn requests_beyond_the_slots_wait_in_a_fifo_queue() {
    let mock = Mock::start(
        vec![ModelProfile {
            slots: Some(2),
            ttft_ms: 150.0,
            inter_token_ms: Some(5.0),
            ..ModelProfile::named("narrow")
        }],
        1,
    )
    .await;
    let send = |i: usize| {
        let body =
            json!({ "model": "narrow", "messages": messages(&format!("q{i}")), "max_tokens": 4, "stream": true });
        mock.stream("/chat/completions", body)
    };
    let (a, b, c, d) = tokio::join!(send(0), send(1), send(2), send(3));
    for (_, events) in [a, b, c, d] {
        assert_eq!(events.last().unwrap(), "[DONE]");
    }
    let truth = mock.ground_truth("?model=narrow").await;
    assert_eq!(truth.len(), 4);
    let waits: Vec<f64> = truth.iter().map(|r| r["queue_wait_ms"].as_f64().unwrap()).collect();
    // Two go at once, two wait for a whole generation (>= 150 ms); bounds are generous.
    let waited = waits.iter().filter(|w| **w > 100.0).count();
    assert_eq!(waited, 2, "{waits:?}");
    for r in &truth {
        let first = r["first_token_ms"].as_f64().unwrap();
        assert!(first >= r["queue_wait_ms"].as_f64().unwrap() + 150.0, "{r}");
    }
    mock.stop().await;
}

#[tokio::test]
async fn ground_truth_records_server_timings_and_can_be_cleared() {
    let mock = Mock::start(
        vec![
            ModelProfile {
                ttft_ms: 200.0,
                inter_token_ms: Some(10.0),
                ..ModelProfile::named("timed")
            },
            quick("other"),
        ],
        1,
    )
    .await;
    let r = mock
        .http
        .post(format!("{}/chat/completions", mock.server.base_url()))
        .header("x-request-id", "client-42")
        .json(&json!({ "model": "timed", "messages": messages("charged twice"), "max_tokens": 5, "stream": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    mock.chat(json!({ "model": "other", "messages": messages("x"), "max_tokens": 2 }))
        .await;

    let all = mock.ground_truth("").await;
    assert_eq!(all.len(), 2);
    let timed = mock.ground_truth("?model=timed").await;
    assert_eq!(timed.len(), 1);
    let r = &timed[0];
    assert_eq!(r["client_request_id"], "client-42");
    assert_eq!(
        (r["endpoint"].as_str(), r["stream"].as_bool()),
        (Some("chat"), Some(true))
    );
    assert_eq!(
        (r["status"].as_u64(), r["outcome"].as_str()),
        (Some(200), Some("completed"))
    );
    assert_eq!(r["finish_reason"], "stop");
    assert_eq!(r["tokens_sent"], bakeoff::mock::tokens::count_tokens("billing"));
    assert_eq!(r["case"]["case_id"], "a");
    let ttft = r["first_token_ms"].as_f64().unwrap();
    assert!(
        (200.0..5_000.0).contains(&ttft),
        "server TTFT {ttft} ms for a 200 ms profile"
    );
    assert!(r["end_ms"].as_f64().unwrap() >= ttft);
    assert!(r["received_unix_ms"].as_f64().unwrap() > 1.6e12);

    let seq = all[0]["seq"].as_u64().unwrap();
    assert_eq!(mock.ground_truth(&format!("?since_seq={seq}")).await.len(), 1);
    let r = mock
        .http
        .delete(format!("{}/mock/requests", mock.server.root_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(mock.ground_truth("").await.is_empty());
    mock.stop().await;
}

#[tokio::test]
async fn a_request_is_received_when_it_reached_the_machine_not_when_a_busy_mock_read_it() {
    // The mock's only thread is blocked for 400 ms while a request arrives: its record must
    // start when the request came in (the kernel's stamp), and its time in the server must hold
    // the 400 ms the request waited to be read, as a busy real server's TTFT would.
    let mock = Mock::start(vec![quick("quick")], 1).await;
    let addr = mock.server.root_url().trim_start_matches("http://").to_string();
    let body = json!({ "model": "quick", "messages": messages("x"), "max_tokens": 2 }).to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // Connected (and accepted) before the block, so only the request's read waits.
    let mut socket = std::net::TcpStream::connect(&addr).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let client = std::thread::spawn(move || {
        use std::io::{Read, Write};
        std::thread::sleep(Duration::from_millis(50));
        let sent_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1000.0;
        socket.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        socket.read_to_string(&mut response).unwrap();
        (sent_unix_ms, response)
    });
    std::thread::sleep(Duration::from_millis(400));
    let (sent_unix_ms, response) = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let records = mock.ground_truth("").await;
    assert_eq!(records.len(), 1);
    let received = records[0]["received_unix_ms"].as_f64().unwrap();
    let read_late = received - sent_unix_ms;
    assert!(
        (-1.0..100.0).contains(&read_late),
        "received {read_late:.1} ms after it was sent (the mock read it ~350 ms late)"
    );
    let in_server = records[0]["end_ms"].as_f64().unwrap();
    assert!(in_server >= 300.0, "{in_server} ms in the server");
    mock.stop().await;
}

#[tokio::test]
async fn metrics_models_and_health_are_served() {
    let mock = Mock::start(vec![quick("m1"), quick("m2")], 1).await;
    mock.chat(json!({ "model": "m1", "messages": messages("x"), "max_tokens": 3 }))
        .await;
    mock.chat(json!({ "model": "zzz", "messages": messages("x") })).await;

    let r = mock.get("/metrics").await;
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = r.text().await.unwrap();
    let mut samples = std::collections::HashMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(comment) = line.strip_prefix("# ") {
            assert!(comment.starts_with("HELP ") || comment.starts_with("TYPE "), "{line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("not a number: {line}"));
        samples.insert(series.to_string(), value);
    }
    assert_eq!(samples[r#"bakeoff_mock_requests_total{model="m1",status="200"}"#], 1.0);
    assert_eq!(
        samples[r#"bakeoff_mock_requests_total{model="unknown",status="404"}"#],
        1.0
    );
    assert_eq!(samples[r#"bakeoff_mock_generated_tokens_total{model="m1"}"#], 3.0);
    assert_eq!(samples[r#"bakeoff_mock_requests_in_flight{model="m2"}"#], 0.0);
    assert_eq!(samples[r#"bakeoff_mock_queue_depth{model="m1"}"#], 0.0);
    let version = format!(r#"bakeoff_mock_info{{version="{}"}}"#, bakeoff::VERSION);
    assert_eq!(samples[&version], 1.0);

    let models: Value = mock.get("/v1/models").await.json().await.unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["m1", "m2"]);
    assert_eq!(models["data"][0]["max_model_len"], 8192);
    let health = mock.get("/health").await;
    assert_eq!(health.status(), 200);
    assert!(
        health.headers()["server"]
            .to_str()
            .unwrap()
            .starts_with("bakeoff-mock/")
    );
    mock.stop().await;
}

#[tokio::test]
async fn profile_files_are_checked_and_errors_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profiles.toml");
    std::fs::write(&path, "[[model]]\nname = \"a\"\ntokens_per_chunk = 0\n").unwrap();
    let e = bakeoff::mock::load_profiles(&path).unwrap_err().to_string();
    assert!(e.contains("profiles.toml:3 (field `tokens_per_chunk`)"), "{e}");
    let e = parse_profiles("p.toml", "[[model]]\nname = \"a\"\nttft = 5\n").unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("ttft")));

    // Invalid profiles passed in code are refused at spawn.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = MockConfig {
        profiles: vec![ModelProfile {
            accuracy: 2.0,
            ..ModelProfile::named("x")
        }],
        ..MockConfig::default()
    };
    let e = bakeoff::mock::spawn(config, listener).await.err().unwrap();
    assert!(e.to_string().contains("accuracy"), "{e}");
}
