//! llama.cpp's own `llama-server`, built from the llama.cpp sources in the llama-cpp-python
//! sdist by scripts/install-llama-cpp-server.sh, serving SmolLM2-135M (Q4_1 GGUF). Each test
//! starts its own server (about a second) on a free loopback port.
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use bakeoff::domain::candidate::TokenizeKind;
use bakeoff::domain::operability::{ProbeKind, ProbeOutcome};
use serde_json::json;

use super::common::{self, Engine, MODEL, ServerProcess, free_port, home};

/// Context of the whole server; each of the `PARALLEL` slots gets an equal share.
const CONTEXT: u32 = 4096;
const PARALLEL: u32 = 2;

const ENGINE: Engine = Engine {
    name: "llama-server",
    framework: "llama.cpp llama-server (llama-cpp-python 0.3.36's llama.cpp)",
    quantization: "Q4_1",
    context_length: CONTEXT / PARALLEL,
    tokenize: TokenizeKind::LlamaCpp,
    generated_counter: "llamacpp:tokens_predicted_total",
    // llamacpp:prompt_tokens_total counts only the prompt tokens it evaluated, not those it
    // found in a slot's cache.
    prompt_counters: &["llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"],
    cached_counter: "llamacpp:prompt_tokens_cached_total",
    telemetry_engine: "llama.cpp",
    usage_in_stream: true,
};

/// (llama-server, model, tool template); panics with what to install when missing (the tests run without them
/// only when asked to run ignored tests, or under BAKEOFF_TEST_REQUIRE_ALL).
fn installed() -> (PathBuf, PathBuf, PathBuf) {
    let home = home("BAKEOFF_LLAMA_CPP_HOME", ".cache/bakeoff/llama-cpp-server");
    let server = home.join("bin/llama-server");
    let model = home.join("models/smollm2-135m.gguf");
    let template = home.join("templates/chatml-tools.jinja");
    assert!(
        server.is_file() && model.is_file() && template.is_file(),
        "this test needs llama-server under {}: run scripts/install-llama-cpp-server.sh",
        home.display()
    );
    (server, model, template)
}

/// `llama-server` as docs/recipes/llama-cpp.toml starts it, plus `--metrics` (off by default)
/// and `--jinja` (on by default, stated: tool calls need it). With `tools_template`, the chat
/// template is a ChatML one that renders tools (SmolLM2's own ignores them).
async fn start(tools_template: bool) -> ServerProcess {
    let (server, model, template) = installed();
    let port = free_port();
    let mut command = Command::new(server);
    command
        .arg("-m")
        .arg(model)
        .args(["--alias", MODEL, "--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-c", &CONTEXT.to_string(), "--parallel", &PARALLEL.to_string()])
        .args(["--threads", "1", "--metrics", "--jinja", "--no-webui"]);
    if tools_template {
        command.arg("--chat-template-file").arg(template);
    }
    ServerProcess::start("llama-server", command, port, "/health", Duration::from_secs(120)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama_cpp),
    ignore = "needs llama-server and SmolLM2-135M: run scripts/install-llama-cpp-server.sh (then touch build.rs)"
)]
async fn llama_server_streams_usage_that_its_tokenizer_and_counters_agree_with() {
    let server = start(false).await;
    // llama-server's usage counts the end-of-turn token of an answer that stopped on it.
    common::streams_and_whole_answers(&ENGINE, &server, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama_cpp),
    ignore = "needs llama-server and SmolLM2-135M: run scripts/install-llama-cpp-server.sh (then touch build.rs)"
)]
async fn llama_server_metrics_are_scraped_on_the_runs_timeline() {
    let server = start(false).await;
    common::telemetry(&ENGINE, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama_cpp),
    ignore = "needs llama-server and SmolLM2-135M: run scripts/install-llama-cpp-server.sh (then touch build.rs)"
)]
async fn the_probes_give_llama_server_its_verdicts() {
    let server = start(false).await;
    use ProbeKind::*;
    use ProbeOutcome::*;
    let report = common::probes(
        &ENGINE,
        &server,
        &[
            (ModelsListsModel, Pass),
            (HealthEndpoint, Pass),
            (MetricsEndpoint, Pass),
            (UsageInStream, Pass),
            (MaxTokensHonoured, Pass),
            // `max_tokens: -1` is llama.cpp's "no limit": accepted, not refused.
            (InvalidParam4xx, Fail),
            (OverlongPrompt4xx, Pass),
            (RateLimitHeaders, Fail),
            (ModelFieldMatches, Pass),
            // `Server: llama.cpp`, no version.
            (VersionHeaders, Pass),
        ],
    )
    .await;
    let invalid = report.result(InvalidParam4xx).unwrap();
    assert!(
        invalid.summary.contains("accepted with HTTP 200"),
        "{}",
        invalid.summary
    );
    let overlong = report.result(OverlongPrompt4xx).unwrap();
    assert!(
        overlong.summary.contains("naming the context length"),
        "{}",
        overlong.summary
    );
    // /v1/models states a slot's context as `meta.n_ctx`.
    assert!(
        overlong.evidence.notes[0].contains("against a context of 2048 (stated by the server)"),
        "{:?}",
        overlong.evidence.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama_cpp),
    ignore = "needs llama-server and SmolLM2-135M: run scripts/install-llama-cpp-server.sh (then touch build.rs)"
)]
async fn llama_server_errors_tool_calls_and_cache_are_recorded_as_they_are() {
    let server = start(false).await;
    // A prompt beyond a slot's context: HTTP 400, `exceed_context_size_error`.
    common::overlong_prompt(&ENGINE, &server, 5000, "exceeds the available context size").await;

    // The shared system prompt stays in a slot and is reused (`cache_prompt`, on by default).
    common::shared_prefix(&ENGINE, &server, 512).await;
    drop(server);

    // With a template that renders tools, `tool_choice: "required"` constrains the answer to a
    // call, streamed as `tool_calls` deltas with no content.
    let server = start(true).await;
    let r = common::tool_call(&ENGINE, &server, json!("required")).await;
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"), "{:?}", r.error_detail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama_cpp),
    ignore = "needs llama-server and SmolLM2-135M: run scripts/install-llama-cpp-server.sh (then touch build.rs)"
)]
async fn the_llama_cpp_recipe_gates_a_run_from_the_terminal() {
    let server = start(false).await;
    common::recipe_gates(
        "llama-cpp.toml",
        "http://127.0.0.1:8080/v1",
        "model = \"local\"",
        &server,
        "llama.cpp local",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama_cpp),
    ignore = "needs llama-server and SmolLM2-135M: run scripts/install-llama-cpp-server.sh (then touch build.rs)"
)]
async fn llama_server_takes_tool_cases_in_prompt_mode() {
    // SmolLM2's own template: prompt mode sends no `tools`, the tools are in the system message.
    let server = start(false).await;
    common::prompt_mode_tool_call(&ENGINE, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama_cpp),
    ignore = "needs llama-server and SmolLM2-135M: run scripts/install-llama-cpp-server.sh (then touch build.rs)"
)]
async fn llama_server_streams_conversations_turn_by_turn_with_exact_context_growth() {
    let server = start(false).await;
    let records = common::conversation(&ENGINE, &server, true, &[]).await;
    // Its prefix cache: each later turn's prompt begins with the turn before it.
    let cached: Vec<u32> = records
        .iter()
        .filter(|r| r.turn.as_deref().is_some_and(|t| t.turn > 1))
        .filter_map(|r| r.prompt_cache.map(|c| c.read_tokens))
        .collect();
    println!("llama-server: cached prompt tokens reported on later turns: {cached:?}");
}
