//! Output tokens counted by a candidate's own tokenize endpoint, end to end: a loopback server
//! (axum on 127.0.0.1:0) streams answers without `usage`, several words per chunk, and offers
//! the three real tokenize shapes (llama.cpp, vLLM, llama-cpp-python) with a tokenizer that is
//! neither o200k nor one token per chunk: every word is two tokens. Runs go through the real
//! executor; counts are read back from the store, the run page and the drill-down.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bakeoff::app::transfer::{export_run, import_run, parse_export};
use bakeoff::domain::candidate::{CandidateDraft, CandidateSpec};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::metrics::summarise_candidate;
use bakeoff::domain::run::{ChunkAttribution, NewRun, RunConfig, RunStatus, ServerTokenCount, TokenSource};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::run::executor::execute;
use bakeoff::engine::tokens::tokenizer;
use bakeoff::store::DynStore;
use serde_json::{Value, json};

use crate::support::app::{TINY_EVALSET, spawn_app};
use crate::support::db::{TestStore, each_backend, each_backend_pair};

/// Every answer: six words, streamed three words per chunk.
const ANSWER: &str = "alpha beta gamma delta epsilon zeta";
/// The test tokenizer: two tokens per word.
const SERVER_TOKENS: u32 = 12;
const MODEL: &str = "quiet-model";

#[derive(Default)]
struct Counters {
    chats_in_flight: AtomicUsize,
    chats: AtomicUsize,
    tokenize_calls: AtomicUsize,
    /// Tokenize calls that arrived while a chat stream was being measured.
    tokenize_during_load: AtomicUsize,
}

struct Server {
    base_url: String,
    counters: Arc<Counters>,
}

fn word_tokens(text: &str) -> Vec<u32> {
    (0..text.split_whitespace().count() as u32 * 2).collect()
}

fn note_tokenize(c: &Counters) {
    c.tokenize_calls.fetch_add(1, Ordering::SeqCst);
    if c.chats_in_flight.load(Ordering::SeqCst) > 0 {
        c.tokenize_during_load.fetch_add(1, Ordering::SeqCst);
    }
}

async fn chat(State(c): State<Arc<Counters>>, Json(_body): Json<Value>) -> Response {
    c.chats.fetch_add(1, Ordering::SeqCst);
    c.chats_in_flight.fetch_add(1, Ordering::SeqCst);
    // The stream takes a little while, so a tokenize call during the load would overlap it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let words: Vec<&str> = ANSWER.split(' ').collect();
    let mut body = String::new();
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n");
    for (i, piece) in words.chunks(3).enumerate() {
        let text = if i == 0 {
            piece.join(" ")
        } else {
            format!(" {}", piece.join(" "))
        };
        body.push_str(&format!(
            "data: {}\n\n",
            json!({"choices":[{"index":0,"delta":{"content": text},"finish_reason":null}]})
        ));
    }
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    c.chats_in_flight.fetch_sub(1, Ordering::SeqCst);
    ([("content-type", "text/event-stream")], body).into_response()
}

/// llama.cpp server: `{"content"}` → `{"tokens"}`.
async fn llama_cpp(State(c): State<Arc<Counters>>, Json(body): Json<Value>) -> Response {
    note_tokenize(&c);
    let Some(text) = body["content"].as_str() else {
        return (StatusCode::BAD_REQUEST, "content missing").into_response();
    };
    Json(json!({"tokens": word_tokens(text)})).into_response()
}

/// vLLM: `{"model", "prompt"}` → `{"count", "max_model_len", "tokens"}`; another model is a 404.
async fn vllm(State(c): State<Arc<Counters>>, Json(body): Json<Value>) -> Response {
    note_tokenize(&c);
    if body["model"] != MODEL {
        let message = format!("The model `{}` does not exist.", body["model"]);
        return (StatusCode::NOT_FOUND, Json(json!({"error": {"message": message}}))).into_response();
    }
    let tokens = word_tokens(body["prompt"].as_str().unwrap_or_default());
    Json(json!({"count": tokens.len(), "max_model_len": 2048, "tokens": tokens})).into_response()
}

/// llama-cpp-python: `{"input", "model"}` → `{"tokens"}`, always with a BOS in front.
async fn llama_cpp_python(State(c): State<Arc<Counters>>, Json(body): Json<Value>) -> Response {
    note_tokenize(&c);
    let mut tokens = vec![1u32];
    tokens.extend(word_tokens(body["input"].as_str().unwrap_or_default()));
    Json(json!({"tokens": tokens})).into_response()
}

/// Answers 200 with a shape no kind expects.
async fn odd_shape(State(c): State<Arc<Counters>>) -> Response {
    note_tokenize(&c);
    Json(json!({"n_tokens": 3})).into_response()
}

async fn start_server() -> Server {
    let counters = Arc::new(Counters::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/tokenize", post(llama_cpp))
        .route("/vllm/tokenize", post(vllm))
        .route("/extras/tokenize", post(llama_cpp_python))
        .route("/odd/tokenize", post(odd_shape))
        .with_state(counters.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server {
        base_url: format!("http://{addr}/v1"),
        counters,
    }
}

fn spec(base_url: &str, kind: &str, path: &str) -> CandidateSpec {
    CandidateDraft {
        name: format!("quiet {kind} {path}"),
        provider: "openai-chat".into(),
        base_url: base_url.into(),
        model: MODEL.into(),
        tokenize_kind: kind.into(),
        tokenize_path: path.into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap()
}

fn config() -> RunConfig {
    RunConfig {
        concurrency: 2,
        repetitions: 1,
        warmup_requests: 1,
        retries: 0,
        ..RunConfig::default()
    }
}

/// Stores the tiny eval set, the candidate and a run of it; executes the run to its end.
async fn run_once(store: &DynStore, spec: &CandidateSpec) -> (i64, i64) {
    let file = EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap();
    let version = store.save_evalset_version(&file).await.unwrap();
    let candidate_id = store
        .create_candidate(&crate::support::checked::admin_new(spec))
        .await
        .unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: "no usage in streams".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate_id],
            config: config(),
        })
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), execute(store.clone(), run_id, Cancel::never()))
        .await
        .expect("the run ends in time")
        .unwrap();
    assert_eq!(status, RunStatus::Finished);
    (run_id, candidate_id)
}

async fn events(store: &DynStore, run_id: i64) -> Vec<(String, String)> {
    store
        .list_run_events(run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.level, e.message))
        .collect()
}

each_backend_pair!(
    streamed_tokens_are_counted_by_the_servers_tokenizer_after_the_load_and_labelled,
    flavor = "multi_thread",
    worker_threads = 2
);
/// `s` runs the load; the run exported from it is imported into `t`.
async fn streamed_tokens_are_counted_by_the_servers_tokenizer_after_the_load_and_labelled(s: TestStore, t: TestStore) {
    let server = start_server().await;
    let (run_id, candidate_id) = run_once(&s.store, &spec(&server.base_url, "llama-cpp", "")).await;
    let c = &server.counters;
    assert_eq!(
        c.tokenize_during_load.load(Ordering::SeqCst),
        0,
        "{}: no tokenize call while the server was measured",
        s.backend
    );
    // One check before the load; after it, one call to learn what the endpoint adds to "" and
    // one per distinct answer, then one prefix per inner chunk boundary of the distinct answer
    // (12 tokens in 2 chunks is not one a chunk).
    assert_eq!(c.tokenize_calls.load(Ordering::SeqCst), 4, "{}", s.backend);

    let records = s.store.list_request_records(run_id).await.unwrap();
    let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
    assert_eq!(measured.len(), 3, "{}", s.backend);
    for r in &measured {
        assert_eq!(r.output(), ANSWER);
        assert_eq!(
            r.output_tokens_source,
            Some(TokenSource::ServerTokenizer),
            "{}",
            s.backend
        );
        assert_eq!(r.output_tokens, Some(SERVER_TOKENS), "{}", s.backend);
        // Two content chunks of three words: the server's tokenizer counted the first chunk's
        // prefix, so each has exactly its 6 tokens.
        assert_eq!(
            r.chunks.iter().map(|c| c.1).collect::<Vec<_>>(),
            [6, 6],
            "{}",
            s.backend
        );
        assert_eq!(
            r.chunk_attribution,
            Some(ChunkAttribution::ServerPrefixes),
            "{}",
            s.backend
        );
        assert_eq!(
            r.canonical_tokens,
            Some(tokenizer::count(ANSWER)),
            "the canonical o200k count stays"
        );
        assert_ne!(
            tokenizer::count(ANSWER),
            SERVER_TOKENS,
            "the test tokenizer differs from o200k"
        );
    }
    // Warm-ups and rollout requests are excluded from figures and are not counted.
    for r in records.iter().filter(|r| r.is_warmup) {
        assert_eq!(r.output_tokens_source, Some(TokenSource::Tokenizer));
    }
    let summary = summarise_candidate(candidate_id, &records, |_| 1.0);
    assert_eq!(summary.token_sources, vec![(TokenSource::ServerTokenizer, 3)]);
    assert_eq!(summary.output_tokens, 3 * u64::from(SERVER_TOKENS));

    // The drill-down's read path (by case) applies the counts too.
    let case = s.store.list_case_records(run_id, &["c1".to_string()]).await.unwrap();
    let measured_case: Vec<_> = case.iter().filter(|r| !r.is_warmup).collect();
    assert_eq!(measured_case.len(), 1);
    assert_eq!(
        measured_case[0].output_tokens_source,
        Some(TokenSource::ServerTokenizer)
    );

    let log = events(&s.store, run_id).await;
    let counted: Vec<_> = log.iter().filter(|(_, m)| m.contains("counted by the")).collect();
    assert_eq!(counted.len(), 1, "{}: one event: {log:?}", s.backend);
    assert!(counted[0].1.contains("3 record(s)") && counted[0].1.contains("/tokenize"));
    assert!(counted[0].1.contains("server-tokenizer"));
    assert!(
        log.iter()
            .any(|(l, m)| l == "info" && m.contains("answers; output tokens")),
        "{log:?}"
    );

    // Resuming counts nothing twice.
    let again = s.store.uncounted_records(run_id, candidate_id).await.unwrap();
    assert!(again.is_empty(), "{}", s.backend);

    // An export carries the counts and the declaration; the imported run shows the same.
    let export = export_run(s.store.as_ref(), run_id).await.unwrap();
    let json = serde_json::to_string(&export).unwrap();
    assert!(json.contains("\"server-tokenizer\""));
    let imported = import_run(t.store.as_ref(), &parse_export(&json).unwrap())
        .await
        .unwrap()
        .run_id();
    let copied = t.store.list_request_records(imported).await.unwrap();
    let copied_measured: Vec<_> = copied.iter().filter(|r| !r.is_warmup).collect();
    assert_eq!(copied_measured.len(), 3);
    for r in copied_measured {
        assert_eq!(
            r.output_tokens_source,
            Some(TokenSource::ServerTokenizer),
            "{}",
            t.backend
        );
        assert_eq!(r.output_tokens, Some(SERVER_TOKENS));
        assert_eq!(r.chunks.iter().map(|c| c.1).sum::<u32>(), SERVER_TOKENS);
    }
    let run = t.store.get_run(imported).await.unwrap().unwrap();
    let candidate = t.store.get_candidate(run.candidate_ids[0]).await.unwrap().unwrap();
    assert_eq!(candidate.spec.tokenize.unwrap().path, "/tokenize");
}

each_backend!(
    vllm_and_llama_cpp_python_shapes_are_read_and_a_bos_is_not_counted,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn vllm_and_llama_cpp_python_shapes_are_read_and_a_bos_is_not_counted(s: TestStore) {
    let server = start_server().await;
    for (kind, path) in [("vllm", "/vllm/tokenize"), ("llama-cpp-python", "")] {
        let (run_id, _) = run_once(&s.store, &spec(&server.base_url, kind, path)).await;
        let records = s.store.list_request_records(run_id).await.unwrap();
        for r in records.iter().filter(|r| !r.is_warmup) {
            assert_eq!(r.output_tokens_source, Some(TokenSource::ServerTokenizer), "{kind}");
            assert_eq!(r.output_tokens, Some(SERVER_TOKENS), "{kind}: BOS not counted");
        }
        let log = events(&s.store, run_id).await;
        if kind == "llama-cpp-python" {
            assert!(
                log.iter()
                    .any(|(_, m)| m.contains("/extras/tokenize") && m.contains("1 special token")),
                "{log:?}"
            );
        }
    }
    assert_eq!(server.counters.tokenize_during_load.load(Ordering::SeqCst), 0);
}

each_backend!(
    an_unknown_endpoint_keeps_every_record_and_says_why_once,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn an_unknown_endpoint_keeps_every_record_and_says_why_once(s: TestStore) {
    let server = start_server().await;
    for (path, expected) in [("/missing/tokenize", "404"), ("/odd/tokenize", "keys: n_tokens")] {
        let (run_id, candidate_id) = run_once(&s.store, &spec(&server.base_url, "llama-cpp", path)).await;
        let records = s.store.list_request_records(run_id).await.unwrap();
        let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
        assert_eq!(measured.len(), 3, "{}: no record lost", s.backend);
        for r in &measured {
            assert_eq!(r.output_tokens_source, Some(TokenSource::Tokenizer), "{path}");
            assert_eq!(r.output_tokens, Some(tokenizer::count(ANSWER)));
        }
        let log = events(&s.store, run_id).await;
        let warnings: Vec<_> = log.iter().filter(|(_, m)| m.contains("NOT counted")).collect();
        assert_eq!(warnings.len(), 1, "{path}: said once: {log:?}");
        let (level, message) = warnings[0];
        assert_eq!(level, "warn");
        assert!(message.contains(path) && message.contains(expected), "{message}");
        assert!(message.contains("tokenizer"), "names the source kept: {message}");
        // Already said before the load, while the run could still be cancelled and fixed.
        let early = log
            .iter()
            .position(|(_, m)| m.contains("check before the load failed") && m.contains(path))
            .unwrap_or_else(|| panic!("{path}: no early warning: {log:?}"));
        let first_measured = log.iter().position(|(_, m)| m.contains("warm-up")).unwrap();
        assert!(early < first_measured, "{log:?}");
        // Nothing stored, so a resumed run would try again.
        assert_eq!(s.store.uncounted_records(run_id, candidate_id).await.unwrap().len(), 3);
    }
}

each_backend!(
    a_resumed_run_counts_records_stored_before_the_restart_without_new_requests,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn a_resumed_run_counts_records_stored_before_the_restart_without_new_requests(s: TestStore) {
    let server = start_server().await;
    let file = EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap();
    let version = s.store.save_evalset_version(&file).await.unwrap();
    let candidate_id = s
        .store
        .create_candidate(&crate::support::checked::admin_new(&spec(
            &server.base_url,
            "llama-cpp",
            "",
        )))
        .await
        .unwrap();
    let run_id = s
        .store
        .create_run(&NewRun {
            name: "interrupted".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate_id],
            config: RunConfig {
                warmup_requests: 0,
                staged_rollout: false,
                ..config()
            },
        })
        .await
        .unwrap();
    // Every case was measured before the restart; the counting had not happened.
    let records: Vec<_> = ["c1", "c2", "c3"]
        .iter()
        .map(|case| {
            let mut r = crate::support::app::record(run_id, candidate_id, case, ANSWER, true);
            r.output_tokens = Some(tokenizer::count(ANSWER));
            r.output_tokens_source = Some(TokenSource::Tokenizer);
            r
        })
        .collect();
    s.store.append_request_records(&records).await.unwrap();
    s.store.set_run_status(run_id, RunStatus::Running, None).await.unwrap();

    let status = execute(s.store.clone(), run_id, Cancel::never()).await.unwrap();
    assert_eq!(status, RunStatus::Finished);
    assert_eq!(server.counters.chats.load(Ordering::SeqCst), 0, "nothing re-sent");
    let records = s.store.list_request_records(run_id).await.unwrap();
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_eq!(
            r.output_tokens_source,
            Some(TokenSource::ServerTokenizer),
            "{}",
            s.backend
        );
        assert_eq!(r.output_tokens, Some(SERVER_TOKENS));
    }
}

each_backend!(counts_are_append_only_and_never_replace_usage);
async fn counts_are_append_only_and_never_replace_usage(s: TestStore) {
    let (store, backend) = (&s.store, s.backend);
    let file = EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap();
    let version = store.save_evalset_version(&file).await.unwrap();
    let candidate_id = store
        .create_candidate(&crate::support::checked::admin_new(&spec(
            "http://127.0.0.1:9/v1",
            "vllm",
            "",
        )))
        .await
        .unwrap();
    let run_id = store
        .create_run(&NewRun {
            name: "counts".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate_id],
            config: config(),
        })
        .await
        .unwrap();
    let mut estimated = crate::support::app::record(run_id, candidate_id, "c1", "one two", true);
    estimated.output_tokens_source = Some(TokenSource::Tokenizer);
    // Its two chunks' boundaries ("one", " two"), kept for the prefix counts.
    estimated.texts.get_mut().chunk_text = [(0, 3), (0, 4)].as_slice().into();
    estimated.chunk_attribution = Some(ChunkAttribution::O200kProportional);
    let usage = crate::support::app::record(run_id, candidate_id, "c2", "three four", true);
    store.append_request_records(&[estimated, usage]).await.unwrap();

    // Only the estimated record is offered for counting.
    let uncounted = store.uncounted_records(run_id, candidate_id).await.unwrap();
    assert_eq!(uncounted.len(), 1, "{backend}");
    assert_eq!(uncounted[0].output, "one two");
    assert_eq!(uncounted[0].chunks, 2, "{backend}");
    assert_eq!(uncounted[0].chunk_text, vec![(0, 3), (0, 4)], "{backend}");
    assert_eq!(uncounted[0].chunk_weights, vec![1, 19], "{backend}");
    let id = uncounted[0].record_id;
    let count = |n: u32| ServerTokenCount {
        record_id: id,
        output_tokens: n,
        reasoning_tokens: None,
        tokenizer: "vllm tokenize endpoint http://127.0.0.1:9/tokenize".into(),
        chunks: Some((vec![2, n - 2], ChunkAttribution::ServerPrefixes)),
    };
    assert_eq!(store.save_server_token_counts(run_id, &[count(7)]).await.unwrap(), 1);
    // A second count of the same record is ignored: the first one stays.
    assert_eq!(store.save_server_token_counts(run_id, &[count(9)]).await.unwrap(), 0);
    let err = s
        .execute_raw("UPDATE record_token_counts SET output_tokens = 1")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{backend}: {err}");
    let records = store.list_request_records(run_id).await.unwrap();
    let by_case = |c: &str| records.iter().find(|r| &*r.case_id == c).unwrap();
    assert_eq!(by_case("c1").output_tokens, Some(7), "{backend}");
    assert_eq!(by_case("c1").output_tokens_source, Some(TokenSource::ServerTokenizer));
    // The per-chunk counts found by the prefixes, and how, read back on both backends.
    assert_eq!(by_case("c1").chunks, vec![(40_000, 2), (240_000, 5)], "{backend}");
    assert_eq!(
        by_case("c1").chunk_attribution,
        Some(ChunkAttribution::ServerPrefixes),
        "{backend}"
    );
    assert_eq!(*by_case("c1").chunk_text(), vec![(0, 3), (0, 4)], "{backend}");
    assert_eq!(by_case("c2").output_tokens_source, Some(TokenSource::Usage));
    assert!(store.uncounted_records(run_id, candidate_id).await.unwrap().is_empty());
    // Deleting the run deletes its counts.
    store.delete_run(run_id).await.unwrap();
    assert_eq!(
        s.fetch_i64("SELECT COUNT(*) FROM record_token_counts").await.unwrap(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_declares_the_endpoint_and_the_pages_label_the_source() {
    let app = spawn_app().await;
    let server = start_server().await;
    let fields = |path: &'static str| {
        vec![
            ("name", "quiet"),
            ("provider", "openai-chat"),
            ("base_url", server.base_url.as_str()),
            ("model", MODEL),
            ("tokenize_kind", "llama-cpp"),
            ("tokenize_path", path),
        ]
    };
    // Another server's tokenizer is refused, with the field named, and nothing is stored.
    let page = app
        .post_form_html("/candidates", &fields("http://127.0.0.2:9/tokenize"))
        .await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("body").contains("must be on the candidate's own server"),
        "{}",
        page.text("body")
    );
    assert_eq!(app.candidate_count().await, 0);
    let r = app.post_form("/candidates", &fields("")).await;
    assert_eq!(r.status(), 303);
    let candidate = app.store.list_candidates().await.unwrap().remove(0);
    let endpoint = candidate.spec.tokenize.clone().expect("stored");
    assert_eq!(endpoint.path, "/tokenize");
    let list = app.get_html("/candidates").await;
    assert_eq!(list.text("td.tokenize"), "server: llama-cpp /tokenize");
    let edit = app.get_html(&format!("/candidates/{}/edit", candidate.id)).await;
    assert_eq!(edit.attr("#f-tokenize_path", "value").as_deref(), Some("/tokenize"));
    assert_eq!(
        edit.attr("#f-tokenize_kind option[selected]", "value").as_deref(),
        Some("llama-cpp")
    );

    let version = app.create_evalset().await;
    let run_id = app
        .store
        .create_run(&NewRun {
            name: "labelled".into(),
            evalset_version_id: version,
            candidate_ids: vec![candidate.id],
            config: config(),
        })
        .await
        .unwrap();
    let status = execute(app.store.clone(), run_id, Cancel::never()).await.unwrap();
    assert_eq!(status, RunStatus::Finished);
    let run_page = app.get_html(&format!("/runs/{run_id}")).await;
    let body = run_page.text("body");
    assert!(body.contains("server-tokenizer 3/3"), "{body}");
    let cases = app.get_html(&format!("/runs/{run_id}/cases")).await;
    assert!(
        cases.text("body").contains("server-tokenizer"),
        "{}",
        cases.text("body")
    );
}

#[test]
fn bakeoff_measure_takes_the_declaration_as_flags_and_names_the_source_in_its_json() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(start_server());
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("quiet.json");
    let measure = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
            .args(["measure", "--base-url", &server.base_url, "--model", MODEL])
            .args([
                "--concurrency",
                "2",
                "--requests",
                "4",
                "--prompt-tokens",
                "16",
                "--warmup",
                "1",
            ])
            .args(extra)
            .env("BAKEOFF_LOG", "warn")
            .output()
            .expect("running bakeoff measure")
    };
    // A kind bakeoff does not know, and another server's path, are refused before anything is sent.
    for (flags, message) in [
        (vec!["--tokenize", "sentencepiece"], "--tokenize: choose one of"),
        (
            vec!["--tokenize", "vllm", "--tokenize-path", "http://127.0.0.2:1/tokenize"],
            "--tokenize-path: must be on the candidate's own server",
        ),
    ] {
        let out = measure(&flags);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{stderr}");
    }
    assert_eq!(server.counters.chats.load(Ordering::SeqCst), 0);

    let json = json_path.to_str().unwrap();
    let out = measure(&[
        "--tokenize",
        "vllm",
        "--tokenize-path",
        "/vllm/tokenize",
        "--json",
        json,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("server-tokenizer 4"), "{stdout}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let tokens = &doc["tokens"];
    assert_eq!(tokens["sources"], json!({"server-tokenizer": 4}), "{tokens}");
    assert_eq!(tokens["server_tokenizer"]["kind"], "vllm");
    let url = format!("{}/vllm/tokenize", server.base_url.trim_end_matches("/v1"));
    assert_eq!(tokens["server_tokenizer"]["url"], url.as_str());
    assert_eq!(tokens["canonical_tokenizer"], "o200k_base");
    assert_eq!(doc["levels"][0]["token_sources"], json!({"server-tokenizer": 4}));
    let measured: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["is_warmup"] == false)
        .collect();
    assert_eq!(measured.len(), 4);
    for r in measured {
        assert_eq!(r["output_tokens_source"], "server-tokenizer");
        assert_eq!(r["output_tokens"], SERVER_TOKENS);
    }
    assert_eq!(server.counters.tokenize_during_load.load(Ordering::SeqCst), 0);
}
