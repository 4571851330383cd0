//! llama-cpp-python's OpenAI-compatible server (scripts/install-llama-server.sh) serving
//! SmolLM2-135M (Q4_1 GGUF) with `--chat_format chatml-function-calling`, the one chat format of
//! llama-cpp-python that takes `tools` for a ChatML model: the tools are described in the system
//! message, and a call is generated under a grammar of the tool's parameters. What it does not
//! do (docs/tool-cases.md, "Real engines"): `tool_choice: "required"` (refused, HTTP 500), a
//! streamed answer to `tool_choice: "auto"` that calls a tool (refused: "Automatic streaming tool
//! choice is not supported"), parallel calls in a stream, `usage` in a stream, and unescaped
//! prompts (its template HTML-escapes every message, `<tool_call>` included). Each test
//! starts its own server (a few seconds) on a free loopback port.
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use bakeoff::domain::candidate::TokenizeKind;
use bakeoff::domain::tool_calls::{TOOL_GRADER, ToolCallsDetail};
use serde_json::json;

use super::common::{self, Bench, Engine, MODEL, ServerProcess, free_port, home};

const CONTEXT: u32 = 2048;

const ENGINE: Engine = Engine {
    name: "llama-cpp-python",
    framework: "llama-cpp-python 0.3.36 server, chat_format chatml-function-calling",
    quantization: "Q4_1",
    context_length: CONTEXT,
    tokenize: TokenizeKind::LlamaCppPython,
    // No /metrics: the checks that read a server's counters are not run against it.
    generated_counter: "",
    prompt_counters: &[],
    cached_counter: "",
    telemetry_engine: "",
    usage_in_stream: false,
};

/// (python with llama_cpp.server, model); panics with what to install when missing (the tests
/// run without them only when asked to run ignored tests, or under BAKEOFF_TEST_REQUIRE_ALL).
fn installed() -> (PathBuf, PathBuf) {
    let home = home("BAKEOFF_LLAMA_HOME", ".cache/bakeoff/llama-server");
    let python = home.join("venv/bin/python");
    let model = home.join("models/smollm2-135m.gguf");
    assert!(
        python.is_file() && model.is_file(),
        "this test needs the llama-cpp-python server under {}: run scripts/install-llama-server.sh",
        home.display()
    );
    (python, model)
}

async fn start() -> ServerProcess {
    let (python, model) = installed();
    let port = free_port();
    let mut command = Command::new(python);
    command
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
        .args(["--n_ctx", &CONTEXT.to_string(), "--n_threads", "1"])
        .args(["--chat_format", "chatml-function-calling", "--verbose", "False"]);
    ServerProcess::start(
        "llama-cpp-python",
        command,
        port,
        "/v1/models",
        Duration::from_secs(120),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama),
    ignore = "needs llama-cpp-python and SmolLM2-135M: run scripts/install-llama-server.sh (then touch build.rs)"
)]
async fn llama_cpp_python_calls_a_named_tool_natively_streamed_and_whole() {
    let server = start().await;
    // A named tool choice: the call is generated under the grammar of the tool's parameters,
    // streamed as `tool_calls` deltas (each repeating the call's id and name) or whole.
    let r = common::tool_call(
        &ENGINE,
        &server,
        json!({"type": "function", "function": {"name": "get_weather"}}),
    )
    .await;
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"), "{:?}", r.error_detail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama),
    ignore = "needs llama-cpp-python and SmolLM2-135M: run scripts/install-llama-server.sh (then touch build.rs)"
)]
async fn llama_cpp_python_answers_auto_tool_choice_whole_and_takes_prompt_mode() {
    use bakeoff::domain::run::{ErrorClass, RunStatus};
    let server = start().await;
    // `tool_choice: "auto"`, not streamed: the server lets a grammar choose between a message and
    // a call (at temperature 0). Either way the request is answered and the answer is read; a
    // call is graded, a message is graded as no call, and the message this chat format writes
    // may be empty (its follow-up grammar allows only a call or the end of turn).
    let bench = Bench::new().await;
    let (run, records) = bench
        .run(
            &common::tool_evalset(json!("auto")),
            &ENGINE.candidate(&server, "tools auto"),
            common::one_by_one(false),
        )
        .await;
    assert_eq!(run.status, RunStatus::Finished, "{:?}", run.error);
    assert_eq!(records.len(), 1);
    let r = &records[0];
    eprintln!(
        "llama-cpp-python auto, whole: {:?} {:?}, finish {:?}, calls {:?}, output {:?}",
        r.error_class,
        r.error_detail(),
        r.finish_reason,
        r.tool_turn().map(|t| &t.calls),
        r.output()
    );
    assert_eq!(
        r.http_status,
        Some(200),
        "{:?}\n{}",
        r.error_detail(),
        server.log_tail()
    );
    if r.succeeded() {
        let grade = r
            .grades
            .iter()
            .find(|g| &*g.grader == TOOL_GRADER)
            .expect("a tool-calls grade");
        let detail = ToolCallsDetail::from_grade(grade).unwrap();
        eprintln!(
            "llama-cpp-python auto: {:?} graded: passed {}, malformed {}, {}",
            r.tool_turn().map(|t| &t.calls),
            grade.passed,
            detail.malformed,
            grade.reason
        );
    } else {
        assert_eq!(r.error_class, Some(ErrorClass::EmptyOutput), "{:?}", r.error_detail());
    }

    // Prompt mode: no `tools` in the request (the chat format's plain ChatML path), the call read
    // from the text. This chat format renders messages with HTML autoescaping, so the model sees
    // (and imitates) `&lt;tool_call&gt;`: read and graded, but no call is found in it.
    common::prompt_mode_tool_call(&ENGINE, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_llama),
    ignore = "needs llama-cpp-python and SmolLM2-135M: run scripts/install-llama-server.sh (then touch build.rs)"
)]
async fn llama_cpp_python_holds_conversations_turn_by_turn_with_exact_context_growth() {
    // Whole answers: its streams carry no `usage`, so a streamed turn's prompt tokens are unknown.
    // Its template HTML-escapes every message.
    let server = start().await;
    common::conversation(&ENGINE, &server, false, &['<', '>', '&', '\'', '"']).await;
}
