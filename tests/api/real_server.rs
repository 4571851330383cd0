//! Against a server nobody here wrote: llama-cpp-python's OpenAI-compatible server with the real
//! SmolLM2-135M model, installed by scripts/install-llama-server.sh (no download at test time).
//! Ignored, with the reason, where build.rs found it not installed; under
//! BAKEOFF_TEST_REQUIRE_ALL (CI) it always runs, and a missing server fails it.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bakeoff::domain::candidate::{CandidateSpec, Conditions, TokenizeEndpoint, TokenizeKind};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::metrics::summarise_candidate;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus, TokenSource};

use crate::support::db::sqlite_store;
use crate::support::recipe::{RecipeGate, recipe_gates};
use crate::support::runs::run_to_end_within;

/// The model alias the server is started with.
const MODEL: &str = "smollm2-135m";

/// Longest a run against the real model on this CPU may take before the test fails.
const REAL_RUN_DEADLINE: Duration = Duration::from_secs(240);

fn llama_home() -> PathBuf {
    std::env::var_os("BAKEOFF_LLAMA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/bakeoff/llama-server")
        })
}

/// (python with llama_cpp.server, model file); panics with what to install when missing (the
/// test runs without them only when asked to run ignored tests, or under
/// BAKEOFF_TEST_REQUIRE_ALL).
fn installed() -> (PathBuf, PathBuf) {
    let home = llama_home();
    let python = home.join("venv/bin/python");
    let model = home.join("models/smollm2-135m.gguf");
    assert!(
        python.is_file() && model.is_file(),
        "this test needs the llama-cpp-python server under {}: run scripts/install-llama-server.sh",
        home.display()
    );
    (python, model)
}

/// The server process, killed on drop.
struct LlamaServer {
    child: Child,
    base_url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_llama(python: &PathBuf, model: &PathBuf) -> LlamaServer {
    // The server cannot take a listener: pick a free port, then poll /v1/models (bounded).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python)
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(model)
        .args([
            "--model_alias",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "--n_ctx",
            "2048",
            "--n_threads",
            "1",
            "--interrupt_requests",
            "False",
            "--verbose",
            "False",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llama_cpp.server");
    let server = LlamaServer {
        child,
        base_url: format!("http://127.0.0.1:{port}/v1"),
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(r) = reqwest::get(format!("{}/models", server.base_url)).await
            && r.status().is_success()
        {
            return server;
        }
        assert!(Instant::now() < deadline, "llama server did not answer within 90 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Four yes/no questions SmolLM2-135M answers in a few tokens.
const EVALSET: &str = r#"{"bakeoff_evalset":1,"name":"real-server-smoke","task":"classification","system":"Answer with one word: yes or no.","prompt":"{{q}}","graders":[{"kind":"exact","ignore_case":true}],"max_tokens":16,"temperature":0}
{"id":"q1","vars":{"q":"Is water wet?"},"expected":"yes"}
{"id":"q2","vars":{"q":"Is fire cold?"},"expected":"no"}
{"id":"q3","vars":{"q":"Is the sky blue?"},"expected":"yes"}
{"id":"q4","vars":{"q":"Do fish fly?"},"expected":"no"}"#;

fn evalset() -> EvalSetFile {
    EvalSetFile::parse("real-server-smoke.jsonl", EVALSET).unwrap()
}

fn candidate(base_url: &str) -> CandidateSpec {
    CandidateSpec {
        conditions: Conditions {
            hardware: Some("CI machine, 1 CPU thread".into()),
            framework: Some("llama-cpp-python 0.3.36".into()),
            quantization: Some("Q4_1".into()),
            context_length: Some(2048),
        },
        ..CandidateSpec::openai_chat("llama.cpp smollm2-135m", base_url, MODEL)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama),
    ignore = "needs llama-cpp-python and SmolLM2-135M: run scripts/install-llama-server.sh (then touch build.rs)"
)]
async fn a_run_against_llama_cpp_records_every_case_with_honest_token_sources() {
    let (python, model) = installed();
    let server = start_llama(&python, &model).await;
    let (store, _guard) = sqlite_store().await;
    let file = evalset();
    let version = store.save_evalset_version(&file).await.unwrap();
    let candidate_id = store
        .create_candidate(&crate::support::checked::admin_new(&candidate(&server.base_url)))
        .await
        .unwrap();
    for stream in [true, false] {
        let config = RunConfig {
            concurrency: 2,
            repetitions: 1,
            warmup_requests: 1,
            retries: 0,
            stream,
            ..RunConfig::default()
        };
        let run_id = store
            .create_run(&NewRun {
                name: format!("real server, stream={stream}"),
                evalset_version_id: version,
                candidate_ids: vec![candidate_id],
                config,
            })
            .await
            .unwrap();
        let run = run_to_end_within(&store, run_id, REAL_RUN_DEADLINE).await;
        assert_eq!(run.status, RunStatus::Finished, "stream={stream}: {:?}", run.error);

        let records = store.list_request_records(run_id).await.unwrap();
        let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
        assert_eq!(measured.len(), file.cases.len(), "stream={stream}: one record per case");
        for r in &measured {
            assert!(
                r.succeeded(),
                "stream={stream} case {}: {:?} {:?}",
                r.case_id,
                r.error_class,
                r.error_detail()
            );
            assert!(
                r.output_tokens.unwrap_or(0) > 0,
                "stream={stream}: output tokens counted"
            );
            // llama-cpp-python ignores `stream_options.include_usage`: streamed counts must come
            // from bakeoff's own tokenizer and say so; non-streamed answers carry `usage`.
            let expected_source = if stream {
                TokenSource::Tokenizer
            } else {
                TokenSource::Usage
            };
            assert_eq!(
                r.output_tokens_source,
                Some(expected_source),
                "stream={stream}: token source"
            );
            assert!(r.canonical_tokens.is_some(), "stream={stream}: canonical o200k count");
            assert!(
                r.ttft_us().is_some() && r.end_us.get().is_some(),
                "stream={stream}: timings recorded"
            );
            assert!(r.ttft_us() <= r.end_us.get());
            assert!(r.output_chars > 0);
            assert_eq!(r.grades.len(), 1, "graded");
        }
        let summary = summarise_candidate(candidate_id, &records, |_| 1.0);
        assert_eq!(summary.requests, file.cases.len());
        assert!(summary.aggregate_tok_s.is_some_and(|t| t > 0.0));
    }

    // The same server with its `/extras/tokenize` declared: streamed outputs are counted with
    // SmolLM2's own tokenizer once the load has ended, and labelled so.
    let declared = CandidateSpec {
        name: "llama.cpp smollm2-135m, own tokenizer".into(),
        tokenize: Some(TokenizeEndpoint {
            kind: TokenizeKind::LlamaCppPython,
            path: "/extras/tokenize".into(),
        }),
        ..candidate(&server.base_url)
    };
    let declared_id = store
        .create_candidate(&crate::support::checked::admin_new(&declared))
        .await
        .unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: "real server, own tokenizer".into(),
            evalset_version_id: version,
            candidate_ids: vec![declared_id],
            config: RunConfig {
                concurrency: 2,
                warmup_requests: 1,
                retries: 0,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let run = run_to_end_within(&store, run_id, REAL_RUN_DEADLINE).await;
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
    let events = store.list_run_events(run_id).await.unwrap();
    let counted = events
        .iter()
        .find(|e| e.message.contains("counted by the llama-cpp-python tokenize endpoint"))
        .unwrap_or_else(|| panic!("no counting event: {events:?}"));
    assert_eq!(counted.level, "info", "{}", counted.message);
    let tokenize_url = server.base_url.trim_end_matches("/v1").to_string() + "/extras/tokenize";
    let http = reqwest::Client::new();
    let records = store.list_request_records(run_id).await.unwrap();
    for r in records.iter().filter(|r| !r.is_warmup) {
        assert!(r.succeeded(), "case {}: {:?}", r.case_id, r.error_detail());
        assert_eq!(
            r.output_tokens_source,
            Some(TokenSource::ServerTokenizer),
            "case {}",
            r.case_id
        );
        // The stored count is the server's own for that text, less what it adds to any text.
        let ask = |text: String| {
            let http = http.clone();
            let url = tokenize_url.clone();
            async move {
                let answer: serde_json::Value = http
                    .post(url)
                    .json(&serde_json::json!({"input": text, "model": MODEL}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                answer["tokens"].as_array().unwrap().len() as u32
            }
        };
        let expected = ask(r.output().to_string()).await - ask(String::new()).await;
        assert_eq!(r.output_tokens, Some(expected), "case {}: {:?}", r.case_id, r.output());
        assert_eq!(r.chunks.iter().map(|c| c.1).sum::<u32>(), expected);
    }
}

/// docs/recipes/llama-cpp-python.toml as shipped (only its address pointed at this server) in
/// `bakeoff run start`, the built binary: the gate a pipeline would run, end to end against a
/// real server, with the server's own tokenizer the recipe declares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama),
    ignore = "needs llama-cpp-python and SmolLM2-135M: run scripts/install-llama-server.sh (then touch build.rs)"
)]
async fn the_llama_cpp_python_recipe_gates_a_run_from_the_terminal() {
    let (python, model) = installed();
    let server = start_llama(&python, &model).await;
    let gate = RecipeGate {
        recipe: "llama-cpp-python.toml",
        replace: vec![
            ("http://127.0.0.1:8000/v1".into(), server.base_url.clone()),
            ("model = \"local\"".into(), format!("model = \"{MODEL}\"")),
        ],
        evalset: ("real-server-smoke.jsonl", EVALSET),
        timeout_secs: 60,
        candidate: "llama-cpp-python local",
    };
    recipe_gates(gate, String::new).await;
}

/// Issue 46: a conversation set end to end against the real server: every turn sent with the
/// model's own history, the prompt growing turn by turn as the server counts it, think time
/// waited, the figures by turn computed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama),
    ignore = "needs llama-cpp-python and SmolLM2-135M: run scripts/install-llama-server.sh (then touch build.rs)"
)]
async fn a_conversation_set_runs_turn_by_turn_against_llama_cpp() {
    let (python, model) = installed();
    let server = start_llama(&python, &model).await;
    let (store, _guard) = sqlite_store().await;
    let file = EvalSetFile::parse(
        "chat.jsonl",
        r#"{"bakeoff_evalset":1,"name":"real-chat","task":"generation","system":"You are brief.","max_tokens":12,"temperature":0,"graders":[{"kind":"contains","value":"Paris","ignore_case":true}]}
{"id":"en","turns":[{"user":"What is the capital of France?","expected":"Paris"},{"user":"And its most famous tower?"},{"user":"Repeat the city's name.","expected":"Paris"}]}
{"id":"zh","turns":[{"user":"法国的首都是哪里？请用英文回答。","expected":"Paris"},{"user":"谢谢。"},{"user":"Say the city's name in English.","expected":"Paris"}]}"#,
    )
    .unwrap();
    let version = store.save_evalset_version(&file).await.unwrap();
    let candidate_id = store
        .create_candidate(&crate::support::checked::admin_new(&candidate(&server.base_url)))
        .await
        .unwrap();
    let config = RunConfig {
        concurrency: 2,
        repetitions: 1,
        warmup_requests: 0,
        retries: 0,
        // Whole answers carry llama-cpp-python's usage: its own prompt-token counts.
        stream: false,
        staged_rollout: false,
        think_time: Some(bakeoff::domain::conversation::ThinkTime::Fixed { ms: 20.0 }),
        ..RunConfig::default()
    };
    let run_id = store
        .create_run(&NewRun {
            name: "real conversations".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate_id],
            config,
        })
        .await
        .unwrap();
    let run = run_to_end_within(&store, run_id, REAL_RUN_DEADLINE).await;
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
    let records = store.list_request_records(run_id).await.unwrap();
    assert_eq!(records.len(), 6, "every turn of both conversations");
    for case in ["en", "zh"] {
        let mut turns: Vec<_> = records
            .iter()
            .filter(|r| r.turn.as_ref().is_some_and(|t| t.conversation == case))
            .collect();
        turns.sort_by_key(|r| r.turn.as_ref().unwrap().turn);
        assert_eq!(turns.len(), 3, "{case}");
        for pair in turns.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                a.succeeded() && b.succeeded(),
                "{case}: {:?} {:?}",
                a.error_detail(),
                b.error_detail()
            );
            // The history carries the model's own reply: the server counts a longer prompt.
            assert!(
                b.input_tokens.unwrap() > a.input_tokens.unwrap() + 3,
                "{case}: {:?} then {:?}",
                a.input_tokens,
                b.input_tokens
            );
            let facts = b.turn.as_deref().unwrap();
            assert_eq!(facts.think_scheduled_us, Some(20_000));
            assert!(facts.think_waited_us.unwrap() >= 19_800, "{facts:?}");
        }
    }
    let f = bakeoff::domain::conversation::figures(records.iter(), 0.95);
    assert_eq!(f.turns.len(), 3);
    assert_eq!(f.conversations.graded, 2);
    eprintln!(
        "llama-cpp-python conversations: {:?}",
        f.turns
            .iter()
            .map(|t| (t.turn, t.context_tokens.p50, t.ttft_ms.p50, t.accuracy.passed))
            .collect::<Vec<_>>()
    );
}
