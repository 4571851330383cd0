//! What the real-server tests share: a server process on a free loopback port (its whole process
//! group ended on drop), its Prometheus counters, the eval sets, and the end-to-end checks every
//! server goes through.
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bakeoff::domain::candidate::{CandidateSpec, Conditions, TokenizeEndpoint, TokenizeKind};
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::operability::{ProbeKind, ProbeOutcome, ProbeReport};
use bakeoff::domain::run::{ErrorClass, NewRun, RequestRecord, Run, RunConfig, RunStatus, TokenSource};
use bakeoff::engine::probes::{ProbeOptions, run_probes};
use bakeoff::engine::tokens::server_tokenizer::ServerTokenizer;
use bakeoff::store::DynStore;
use serde_json::json;

use crate::support::db::{TempDirGuard, sqlite_store};
use crate::support::recipe::RecipeGate;
use crate::support::runs::run_to_end_within;

/// The name every server here serves its model under.
pub const MODEL: &str = "smollm2-135m";

/// Longest one run against a real model on this CPU may take before the test fails.
pub const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// `$var`, else `$HOME/default`: where an install script put a server.
pub fn home(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(default))
}

/// A port nobody listens on now (the servers cannot take a listener from us).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server started by a test: its own process group, so the helpers it forks (vLLM's engine
/// core and workers) end with it; output kept in a file, shown when something fails.
pub struct ServerProcess {
    name: &'static str,
    child: Child,
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub root: String,
    log: tempfile::NamedTempFile,
}

impl ServerProcess {
    /// Starts `command` (which listens on `port`) and waits, polling, until `GET ready_path`
    /// answers 2xx; fails the test with the server's last output when it exits or `deadline`
    /// passes first.
    pub async fn start(
        name: &'static str,
        mut command: Command,
        port: u16,
        ready_path: &str,
        deadline: Duration,
    ) -> Self {
        let log = tempfile::NamedTempFile::new().unwrap();
        command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap());
        let child = command.spawn().unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let mut server = ServerProcess {
            name,
            child,
            root: format!("http://127.0.0.1:{port}"),
            log,
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let url = format!("{}{ready_path}", server.root);
        let started = Instant::now();
        loop {
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                eprintln!(
                    "{name} answered GET {ready_path} after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("{name} exited ({status}) before answering:\n{}", server.log_tail());
            }
            assert!(
                started.elapsed() < deadline,
                "{name} did not answer GET {ready_path} within {deadline:?}:\n{}",
                server.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root)
    }

    /// The last few KB the server wrote.
    pub fn log_tail(&self) -> String {
        let mut file = self.log.reopen().unwrap();
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        file.seek(SeekFrom::Start(len.saturating_sub(6000))).unwrap();
        let mut tail = Vec::new();
        file.read_to_end(&mut tail).unwrap();
        format!(
            "--- {} output (tail) ---\n{}",
            self.name,
            String::from_utf8_lossy(&tail)
        )
    }

    fn signal_group(&self, signal: &str) {
        let _ = Command::new("kill")
            .args(["-s", signal, "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Asked to stop first (vLLM then ends its engine processes); killed when it does not
        // within the grace period, and the whole group killed anyway, so nothing outlives the test.
        self.signal_group("TERM");
        let grace = Instant::now() + Duration::from_secs(15);
        while Instant::now() < grace && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.signal_group("KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's Prometheus counters, each series summed over its labels.
pub async fn scrape(root: &str) -> BTreeMap<String, f64> {
    let text = reqwest::get(format!("{root}/metrics"))
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut series = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        let name = name_labels.split('{').next().unwrap().to_string();
        if let Ok(v) = value.parse::<f64>() {
            *series.entry(name).or_insert(0.0) += v;
        }
    }
    series
}

/// How far a counter moved between two scrapes (0 when it is missing from both).
pub fn moved(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, name: &str) -> f64 {
    let get = |m: &BTreeMap<String, f64>| m.get(name).copied().unwrap_or(0.0);
    assert!(
        after.contains_key(name),
        "no counter {name} in /metrics: {:?}",
        after.keys()
    );
    get(after) - get(before)
}

/// Four yes/no questions SmolLM2-135M answers in a few tokens.
pub const SMOKE: &str = r#"{"bakeoff_evalset":1,"name":"real-engine-smoke","task":"classification","system":"Answer with one word: yes or no.","prompt":"{{q}}","graders":[{"kind":"exact","ignore_case":true}],"max_tokens":16,"temperature":0}
{"id":"q1","vars":{"q":"Is water wet?"},"expected":"yes"}
{"id":"q2","vars":{"q":"Is fire cold?"},"expected":"no"}
{"id":"q3","vars":{"q":"Is the sky blue?"},"expected":"yes"}
{"id":"q4","vars":{"q":"Do fish fly?"},"expected":"no"}"#;

/// Four questions behind one long system prompt (about 700 tokens): what a server with a prefix
/// cache computes once.
pub fn shared_prefix_evalset() -> EvalSetFile {
    let rules: Vec<String> = (1..=60)
        .map(|i| format!("Rule {i}: answer the question briefly and politely."))
        .collect();
    let header = json!({
        "bakeoff_evalset": 1,
        "name": "real-engine-shared-prefix",
        "task": "classification",
        "system": rules.join(" "),
        "prompt": "{{q}}",
        "graders": [{"kind": "contains", "value": "e", "ignore_case": true}],
        "max_tokens": 8,
        "temperature": 0,
    });
    let cases = ["Is water wet?", "Is fire cold?", "Is the sky blue?", "Do fish fly?"]
        .iter()
        .enumerate()
        .map(|(i, q)| json!({"id": format!("p{i}"), "vars": {"q": q}, "expected": "yes"}).to_string());
    let text = std::iter::once(header.to_string())
        .chain(cases)
        .collect::<Vec<_>>()
        .join("\n");
    EvalSetFile::parse("real-engine-shared-prefix.jsonl", &text).unwrap()
}

/// One case whose prompt is longer than any context the servers here are started with.
pub fn overlong_evalset(words: usize) -> EvalSetFile {
    let header = json!({
        "bakeoff_evalset": 1,
        "name": "real-engine-overlong",
        "task": "classification",
        "prompt": "{{q}}",
        "graders": [{"kind": "exact"}],
        "max_tokens": 4,
        "temperature": 0,
    });
    let case = json!({"id": "too-long", "vars": {"q": " the".repeat(words)}, "expected": "x"});
    EvalSetFile::parse("real-engine-overlong.jsonl", &format!("{header}\n{case}")).unwrap()
}

/// One tool case (docs/tool-cases.md): a question with a tool to call, after two turns that
/// called it (a 135M model follows the pattern; told only in words, it answers in prose).
pub fn tool_evalset(tool_choice: serde_json::Value) -> EvalSetFile {
    let call = |city: &str| {
        format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\"}}}}\n</tool_call>")
    };
    let header = json!({
        "bakeoff_evalset": 1,
        "name": "real-engine-tools",
        "task": "generation",
        "max_tokens": 64,
        "temperature": 0,
    });
    let case = json!({
        "id": "weather",
        "messages": [
            {"role": "user", "content": "What is the weather in Rome?"},
            {"role": "assistant", "content": call("Rome")},
            {"role": "user", "content": "What is the weather in Oslo?"},
            {"role": "assistant", "content": call("Oslo")},
            {"role": "user", "content": "What is the weather in Paris?"},
        ],
        "tools": [{
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"]
                }
            }
        }],
        "tool_choice": tool_choice,
        "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
    });
    EvalSetFile::parse("real-engine-tools.jsonl", &format!("{header}\n{case}")).unwrap()
}

/// What differs between the servers the shared checks run against.
pub struct Engine {
    /// As the test messages and candidate names say it.
    pub name: &'static str,
    pub framework: &'static str,
    pub quantization: &'static str,
    pub context_length: u32,
    pub tokenize: TokenizeKind,
    /// The counter of generated tokens in its /metrics.
    pub generated_counter: &'static str,
    /// The counters of prompt tokens in its /metrics that add up to every prompt token.
    pub prompt_counters: &'static [&'static str],
    /// The counter of prompt tokens answered from its prefix cache.
    pub cached_counter: &'static str,
    /// The engine bakeoff's telemetry catalogue recognises in its /metrics.
    pub telemetry_engine: &'static str,
    /// Whether its streams end with `usage` (`stream_options.include_usage`); without it, a
    /// streamed answer's tokens are counted by the declared tokenize endpoint.
    pub usage_in_stream: bool,
}

impl Engine {
    pub fn candidate(&self, server: &ServerProcess, what: &str) -> CandidateSpec {
        CandidateSpec {
            conditions: Conditions {
                hardware: Some("CI machine, CPU".into()),
                framework: Some(self.framework.into()),
                quantization: Some(self.quantization.into()),
                context_length: Some(self.context_length),
            },
            tokenize: Some(TokenizeEndpoint {
                kind: self.tokenize,
                path: self.tokenize.default_path().into(),
            }),
            ..CandidateSpec::openai_chat(format!("{} {what}", self.name), server.base_url(), MODEL)
        }
    }
}

/// A SQLite store of its own for one check.
pub struct Bench {
    pub store: DynStore,
    _guard: TempDirGuard,
}

impl Bench {
    pub async fn new() -> Self {
        let (store, _guard) = sqlite_store().await;
        Bench { store, _guard }
    }

    /// Runs `file` against `spec` to its end; the run and all its records (warm-ups too).
    pub async fn run(&self, file: &EvalSetFile, spec: &CandidateSpec, config: RunConfig) -> (Run, Vec<RequestRecord>) {
        let version = self.store.save_evalset_version(file).await.unwrap();
        let candidate = self
            .store
            .create_candidate(&crate::support::checked::admin_new(spec))
            .await
            .unwrap();
        let run_id = self
            .store
            .create_run(&NewRun {
                name: format!("{} on {}", file.header.name, spec.name),
                evalset_version_id: version,
                candidate_ids: vec![candidate],
                config,
            })
            .await
            .unwrap();
        let run = run_to_end_within(&self.store, run_id, RUN_DEADLINE).await;
        let records = self.store.list_request_records(run_id).await.unwrap();
        (run, records)
    }
}

/// A small closed-loop run: c=2, one warm-up, no retries.
pub fn small_config(stream: bool) -> RunConfig {
    RunConfig {
        concurrency: 2,
        repetitions: 1,
        warmup_requests: 1,
        retries: 0,
        stream,
        timeout_secs: 120,
        ..RunConfig::default()
    }
}

/// One request after the other, no warm-up, no staged rollout: nothing sent but the cases.
pub fn one_by_one(stream: bool) -> RunConfig {
    RunConfig {
        concurrency: 1,
        warmup_requests: 0,
        staged_rollout: false,
        ..small_config(stream)
    }
}

fn describe(r: &RequestRecord) -> String {
    format!(
        "case {} ({}): {:?} {:?}, finish {:?}, output {:?}",
        r.case_id,
        if r.is_warmup { "warm-up" } else { "measured" },
        r.error_class,
        r.error_detail(),
        r.finish_reason,
        r.output()
    )
}

/// The engine's declared tokenize endpoint, calibrated (bakeoff's `ServerTokenizer`).
async fn server_tokenizer(engine: &Engine, server: &ServerProcess) -> ServerTokenizer {
    let mut tokenizer = ServerTokenizer::new(&engine.candidate(server, "tokenizer"))
        .unwrap()
        .unwrap();
    tokenizer
        .calibrate()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", engine.name));
    tokenizer
}

/// Streamed and whole answers: every case answered, tokens from the server's `usage` (both
/// servers honour `stream_options.include_usage`), and every token the server's own counters
/// say it read and generated is in bakeoff's records, no more, no fewer. Then each answer
/// recounted by the declared tokenize endpoint (bakeoff's `ServerTokenizer`, as a run without
/// usage would count it): the server's `usage` is that count plus `eos_in_usage` for an
/// answer that ended on the end-of-turn token.
pub async fn streams_and_whole_answers(engine: &Engine, server: &ServerProcess, eos_in_usage: u32) {
    let bench = Bench::new().await;
    let file = EvalSetFile::parse("real-engine-smoke.jsonl", SMOKE).unwrap();
    let tokenizer = server_tokenizer(engine, server).await;
    for stream in [true, false] {
        let spec = engine.candidate(server, &format!("smoke stream={stream}"));
        let before = scrape(&server.root).await;
        let (run, records) = bench.run(&file, &spec, small_config(stream)).await;
        let after = scrape(&server.root).await;
        let say = format!("{} stream={stream}", engine.name);
        assert_eq!(
            run.status,
            RunStatus::Finished,
            "{say}: {:?}\n{}",
            run.error,
            server.log_tail()
        );
        let measured: Vec<_> = records.iter().filter(|r| !r.is_warmup).collect();
        assert_eq!(measured.len(), file.cases.len(), "{say}: one record per case");
        for r in &records {
            assert!(r.succeeded(), "{say}: {}\n{}", describe(r), server.log_tail());
            assert_eq!(
                r.output_tokens_source,
                Some(TokenSource::Usage),
                "{say}: {}",
                describe(r)
            );
            assert!(r.output_tokens.unwrap_or(0) > 0, "{say}: {}", describe(r));
            assert!(r.input_tokens.unwrap_or(0) > 0, "{say}: prompt tokens from usage");
            assert!(r.canonical_tokens.is_some(), "{say}: canonical o200k count");
            assert!(r.ttft_us().is_some() && r.ttft_us() <= r.end_us.get(), "{say}: timings");
            assert_eq!(
                r.grades.len(),
                usize::from(!r.is_warmup),
                "{say}: measured answers graded"
            );
            if stream {
                // Every token usage reports is in some chunk (one token a chunk, the
                // end-of-turn token given to the last).
                assert_eq!(
                    r.chunks.iter().map(|c| c.1).sum::<u32>(),
                    r.output_tokens.unwrap(),
                    "{say}: chunk tokens add up to usage: {}",
                    describe(r)
                );
            }
            let counted = tokenizer.count(r.output()).await.unwrap();
            let eos = u32::from(r.finish_reason.as_deref() == Some("stop")) * eos_in_usage;
            assert_eq!(
                r.output_tokens,
                Some(counted + eos),
                "{say}: usage against the server's tokenizer ({} /tokenize counts {counted}): {}",
                engine.name,
                describe(r)
            );
        }
        let generated: u32 = records.iter().filter_map(|r| r.output_tokens).sum();
        let prompted: u32 = records.iter().filter_map(|r| r.input_tokens).sum();
        assert_eq!(
            moved(&before, &after, engine.generated_counter),
            f64::from(generated),
            "{say}: the server's {} against bakeoff's records",
            engine.generated_counter
        );
        let counted: f64 = engine.prompt_counters.iter().map(|c| moved(&before, &after, c)).sum();
        assert_eq!(
            counted,
            f64::from(prompted),
            "{say}: the server's {:?} against bakeoff's records",
            engine.prompt_counters
        );
    }
}

/// A run whose candidate declares the server's /metrics as its telemetry source: the scrapes
/// are stored, the engine's naming is recognised, and the level's increase of the server's
/// output-token counter is what bakeoff's records received (usage), within one token; the run's
/// telemetry page shows the server's series.
pub async fn telemetry(engine: &Engine, server: &ServerProcess) {
    let bench = Bench::new().await;
    let file = EvalSetFile::parse("real-engine-smoke.jsonl", SMOKE).unwrap();
    let spec = CandidateSpec {
        metrics_url: Some(format!("{}/metrics", server.root)),
        ..engine.candidate(server, "telemetry")
    };
    let (run, records) = bench.run(&file, &spec, small_config(true)).await;
    let say = engine.name;
    assert_eq!(
        run.status,
        RunStatus::Finished,
        "{say}: {:?}\n{}",
        run.error,
        server.log_tail()
    );
    let t = bakeoff::app::telemetry::run_telemetry(&bench.store, run.id)
        .await
        .unwrap();
    let c = t
        .candidates
        .first()
        .unwrap_or_else(|| panic!("{say}: no scrapes stored"));
    assert_eq!(c.failed_scrapes, 0, "{say}: {:?}", c.first_error);
    assert!(
        c.engines.iter().any(|e| e == engine.telemetry_engine),
        "{say}: {:?}",
        c.engines
    );
    let level = c.levels.first().unwrap_or_else(|| panic!("{say}: no level"));
    let received: u32 = records
        .iter()
        .filter(|r| !r.is_warmup)
        .filter_map(|r| r.output_tokens)
        .sum();
    let increase =
        bakeoff::domain::telemetry::window::find(&level.server, bakeoff::domain::telemetry::Signal::GenerationTokens)
            .and_then(|s| s.increase)
            .unwrap_or_else(|| panic!("{say}: no output-token counter in the window: {:?}", level.server));
    assert!(
        (increase - f64::from(received)).abs() <= 1.0,
        "{say}: the server counted {increase} output tokens in the level, bakeoff received {received}"
    );
    assert!(
        t.charts.iter().any(|ch| ch.id.starts_with("chart-telemetry-")),
        "{say}: the server's series are drawn: {:?}",
        t.charts.iter().map(|c| &c.id).collect::<Vec<_>>()
    );
}

/// Runs every probe and checks each verdict against `expected` (the cancel probe compares
/// timings, which a shared CI machine cannot promise: its verdict is only reported).
pub async fn probes(engine: &Engine, server: &ServerProcess, expected: &[(ProbeKind, ProbeOutcome)]) -> ProbeReport {
    let spec = engine.candidate(server, "probed");
    let options = ProbeOptions {
        timeout: Duration::from_secs(60),
        quick_error: Duration::from_secs(10),
        cancel_streams: 2,
        abandoned_max_tokens: 64,
        ..ProbeOptions::default()
    };
    let report = run_probes(&spec, &options).await;
    let said: Vec<String> = report
        .results
        .iter()
        .map(|r| {
            format!(
                "{}: {:?}, {} {:?}",
                r.kind.key(),
                r.outcome,
                r.summary,
                r.evidence.notes
            )
        })
        .collect();
    eprintln!("{} probes:\n{}", engine.name, said.join("\n"));
    for (kind, want) in expected {
        let got = report.result(*kind).unwrap();
        assert_eq!(
            got.outcome,
            *want,
            "{} {}:\n{}",
            engine.name,
            kind.key(),
            said.join("\n")
        );
    }
    assert_eq!(
        expected.len(),
        ProbeKind::ALL.len() - 1,
        "every probe but the cancel one is checked"
    );
    report
}

/// A prompt longer than the context: the request fails, once, with the class bakeoff gives a
/// too-long prompt, and the server's own words in the detail.
pub async fn overlong_prompt(
    engine: &Engine,
    server: &ServerProcess,
    words: usize,
    server_says: &str,
) -> RequestRecord {
    let bench = Bench::new().await;
    let (run, records) = bench
        .run(
            &overlong_evalset(words),
            &engine.candidate(server, "overlong"),
            one_by_one(true),
        )
        .await;
    assert_eq!(run.status, RunStatus::Finished, "{}: {:?}", engine.name, run.error);
    assert_eq!(records.len(), 1, "{}: one request", engine.name);
    let r = records.into_iter().next().unwrap();
    assert_eq!(
        r.error_class,
        Some(ErrorClass::ContextLengthExceeded),
        "{}: {}",
        engine.name,
        describe(&r)
    );
    assert_eq!(r.http_status, Some(400), "{}: {}", engine.name, describe(&r));
    let detail = r.error_detail().unwrap_or_default();
    assert!(detail.contains(server_says), "{}: {detail}", engine.name);
    r
}

/// The tool case sent natively (`tools` and `tool_choice` in the request), streamed and whole:
/// the server's call is read (streamed `tool_calls` deltas assembled by index; a whole message's
/// `tool_calls`), kept raw on the record and graded call by call; the record is a success (a call
/// with no text is an answer). Returns the streamed record; every grade is printed (what a
/// 135M model calls is its own business, that it is read and graded is ours).
pub async fn tool_call(engine: &Engine, server: &ServerProcess, tool_choice: serde_json::Value) -> RequestRecord {
    use bakeoff::domain::tool_calls::{TOOL_GRADER, ToolCallsDetail};
    let bench = Bench::new().await;
    let file = tool_evalset(tool_choice);
    let mut streamed = None;
    for stream in [true, false] {
        // One candidate per mode: the bench's store refuses a second one of the same name.
        let spec = engine.candidate(server, if stream { "tools streamed" } else { "tools whole" });
        let (run, records) = bench.run(&file, &spec, one_by_one(stream)).await;
        assert_eq!(run.status, RunStatus::Finished, "{}: {:?}", engine.name, run.error);
        assert_eq!(records.len(), 1, "{}: one request", engine.name);
        let r = records.into_iter().next().unwrap();
        eprintln!("{} tool call (stream {stream}): {}", engine.name, describe(&r));
        assert_eq!(r.http_status, Some(200), "{}: {}", engine.name, describe(&r));
        assert!(r.succeeded(), "{}: a call is an answer: {}", engine.name, describe(&r));
        let turn = r.tool_turn().expect("the record keeps its tool turn");
        assert_eq!(turn.calls.len(), 1, "{}: {turn:?}", engine.name);
        assert_eq!(turn.calls[0].name, "get_weather", "{}: {turn:?}", engine.name);
        if stream {
            assert!(
                turn.first_argument_us.is_some() && turn.complete_us.is_some(),
                "{turn:?}"
            );
        }
        let grade = r
            .grades
            .iter()
            .find(|g| &*g.grader == TOOL_GRADER)
            .expect("a tool-calls grade");
        let detail = ToolCallsDetail::from_grade(grade).unwrap();
        eprintln!(
            "{} tool call graded (stream {stream}): passed {}, {}, arguments {:?}",
            engine.name, grade.passed, grade.reason, turn.calls[0].arguments
        );
        // Constrained to a call by `tool_choice`, the call is never malformed.
        assert!(!detail.malformed, "{}: {}", engine.name, grade.reason);
        // Without `usage` in its stream, a tool-only answer has no text to count.
        if engine.usage_in_stream || !stream {
            assert_eq!(
                r.output_tokens_source,
                Some(TokenSource::Usage),
                "{}: {}",
                engine.name,
                describe(&r)
            );
            assert!(r.output_tokens.unwrap_or(0) > 0, "{}: {}", engine.name, describe(&r));
        }
        if stream {
            streamed = Some(r);
        }
    }
    streamed.expect("the streamed record")
}

/// The tool case in prompt mode (`tool_mode = "prompt"`), streamed: no `tools` in the request,
/// the tools described in the system message, the call read from the answer's text. The record
/// keeps a prompt-mode tool turn and a `tool-calls` grade; what the model wrote and how it was
/// graded is printed (what a 135M model calls is its own business, that it is read and graded is
/// ours).
pub async fn prompt_mode_tool_call(engine: &Engine, server: &ServerProcess) -> RequestRecord {
    use bakeoff::domain::tool_calls::{RunToolMode, TOOL_GRADER, ToolCallsDetail, ToolMode};
    let bench = Bench::new().await;
    let config = RunConfig {
        tool_mode: RunToolMode::Prompt,
        ..one_by_one(true)
    };
    let (run, records) = bench
        .run(
            &tool_evalset(json!("auto")),
            &engine.candidate(server, "tools in prompt mode"),
            config,
        )
        .await;
    assert_eq!(run.status, RunStatus::Finished, "{}: {:?}", engine.name, run.error);
    assert_eq!(records.len(), 1, "{}: one request", engine.name);
    let r = records.into_iter().next().unwrap();
    eprintln!("{} tool case in prompt mode: {}", engine.name, describe(&r));
    assert_eq!(r.http_status, Some(200), "{}: {}", engine.name, describe(&r));
    assert!(
        r.succeeded(),
        "{}: {}\n{}",
        engine.name,
        describe(&r),
        server.log_tail()
    );
    let turn = r.tool_turn().expect("the record keeps its tool turn");
    assert_eq!(turn.mode, ToolMode::Prompt, "{}: {turn:?}", engine.name);
    let grade = r
        .grades
        .iter()
        .find(|g| &*g.grader == TOOL_GRADER)
        .expect("a tool-calls grade");
    let detail = ToolCallsDetail::from_grade(grade).unwrap();
    eprintln!(
        "{} prompt-mode answer graded: passed {}, malformed {}, {}",
        engine.name, grade.passed, detail.malformed, grade.reason
    );
    r
}

/// Four cases behind one long system prompt, one after the other after a warm-up: every record
/// whole, and the server's cache counter says each measured prompt found at least `at_least`
/// of its tokens cached (and no more than bakeoff recorded as prompt tokens).
pub async fn shared_prefix(engine: &Engine, server: &ServerProcess, at_least: u32) -> f64 {
    let bench = Bench::new().await;
    let file = shared_prefix_evalset();
    let before = scrape(&server.root).await;
    let config = RunConfig {
        warmup_requests: 1,
        ..one_by_one(true)
    };
    let (run, records) = bench
        .run(&file, &engine.candidate(server, "shared prefix"), config)
        .await;
    let after = scrape(&server.root).await;
    assert_eq!(run.status, RunStatus::Finished, "{}: {:?}", engine.name, run.error);
    for r in &records {
        assert!(r.succeeded(), "{}: {}\n{}", engine.name, describe(r), server.log_tail());
        assert!(
            r.input_tokens.unwrap_or(0) > 600,
            "{}: the shared prompt is long: {}",
            engine.name,
            describe(r)
        );
    }
    let prompted: u32 = records.iter().filter_map(|r| r.input_tokens).sum();
    let measured = records.iter().filter(|r| !r.is_warmup).count() as u32;
    let cached = moved(&before, &after, engine.cached_counter);
    assert!(
        cached >= f64::from(measured * at_least) && cached < f64::from(prompted),
        "{}: {} moved by {cached}; {measured} measured requests, {prompted} prompt tokens in all",
        engine.name,
        engine.cached_counter
    );
    // Where the server's usage reports cached tokens, bakeoff's per-request figures add up to
    // its own counter, and its prefix-cache hit rate (vLLM's `prefix_cache_hits` over
    // `prefix_cache_queries`, tokens) sits beside bakeoff's (read / whole prompt).
    if records.iter().all(|r| r.prompt_cache.is_some()) {
        let read: u32 = records
            .iter()
            .filter_map(|r| r.prompt_cache)
            .map(|c| c.read_tokens)
            .sum();
        assert_eq!(
            f64::from(read),
            cached,
            "{}: Σ usage cached tokens vs {}",
            engine.name,
            engine.cached_counter
        );
        if after.contains_key("vllm:prefix_cache_hits_total") {
            let hits = moved(&before, &after, "vllm:prefix_cache_hits_total");
            let queries = moved(&before, &after, "vllm:prefix_cache_queries_total");
            let ours = f64::from(read) / f64::from(prompted);
            let server = hits / queries;
            eprintln!(
                "{}: prefix-cache hit rate: server {server:.4}, bakeoff {ours:.4}",
                engine.name
            );
            assert!(
                (server - ours).abs() < 0.005,
                "{}: server {server} vs bakeoff {ours}",
                engine.name
            );
        }
    }
    cached
}

/// docs/recipes/`recipe` as shipped, only its address and model name pointed at this server, in
/// `bakeoff run start` (the built binary): the gate a pipeline would run, end to end, with the
/// server's tokenize endpoint the recipe declares. Every request must succeed (what a 135M model
/// answers is not the point); the verdict is GO and the JUnit report has no failure.
pub async fn recipe_gates(recipe: &str, address: &str, model_line: &str, server: &ServerProcess, candidate: &str) {
    let gate = RecipeGate {
        recipe,
        replace: vec![
            (address.into(), server.base_url()),
            (model_line.into(), format!("model = \"{MODEL}\"")),
        ],
        evalset: ("real-engine-smoke.jsonl", SMOKE),
        timeout_secs: 120,
        candidate,
    };
    crate::support::recipe::recipe_gates(gate, || server.log_tail()).await;
}

/// Three conversations of three turns (the model's own replies as history), for two users.
pub fn conversation_evalset() -> EvalSetFile {
    let header = json!({
        "bakeoff_evalset": 1,
        "name": "real-engine-conversations",
        "task": "generation",
        "system": "You are a helpful assistant. Answer in one short sentence.",
        "history": "own",
        "graders": [{"kind": "contains", "ignore_case": true}],
        "max_tokens": 12,
        "temperature": 0,
    });
    let cases = ["apple", "river", "candle"].iter().map(|word| {
        json!({
            "id": format!("remember-{word}"),
            "vars": {"word": word},
            "turns": [
                {"user": "Please remember the word {{word}}.", "expected": word},
                {"user": "Name a colour."},
                {"user": "Which word did I ask you to remember?", "expected": word},
            ],
        })
        .to_string()
    });
    let text = std::iter::once(header.to_string())
        .chain(cases)
        .collect::<Vec<_>>()
        .join("\n");
    EvalSetFile::parse("real-engine-conversations.jsonl", &text).unwrap()
}

/// A conversation set sent by two users with a fixed think time, end to end: every turn of
/// every conversation answered once, recorded with its turn facts (conversation, turn, user, the
/// think time kept — never short of the schedule) and graded where the turn has graders; and the
/// context growth token-exact against the server's own tokenizer: turn k's prompt tokens (the
/// server's `usage`) are turn k-1's plus the reply it got plus the new user message plus the same
/// chat-template framing on every turn. `escapes`: characters the server's chat template
/// rewrites (llama-cpp-python HTML-escapes messages), so a reply holding one is checked only for
/// growing the prompt by at least its tokens. When `BAKEOFF_CHART_DIR` is set, the run page's
/// chart of TTFT against context length is written there as `<engine>-ttft-context.svg`.
pub async fn conversation(
    engine: &Engine,
    server: &ServerProcess,
    stream: bool,
    escapes: &[char],
) -> Vec<RequestRecord> {
    use bakeoff::domain::conversation::ThinkTime;
    let bench = Bench::new().await;
    let file = conversation_evalset();
    let spec = engine.candidate(server, "conversations");
    let tokenizer = server_tokenizer(engine, server).await;
    let config = RunConfig {
        concurrency: 2,
        warmup_requests: 0,
        staged_rollout: false,
        think_time: Some(ThinkTime::Fixed { ms: 20.0 }),
        ..small_config(stream)
    };
    let (run, records) = bench.run(&file, &spec, config).await;
    let say = format!("{} stream={stream}", engine.name);
    assert_eq!(
        run.status,
        RunStatus::Finished,
        "{say}: {:?}\n{}",
        run.error,
        server.log_tail()
    );
    let turns: usize = file.cases.iter().map(|c| c.turns.len()).sum();
    assert_eq!(records.len(), turns, "{say}: every turn of every conversation, once");
    let mut by_turn = BTreeMap::new();
    for r in &records {
        assert!(r.succeeded(), "{say}: {}\n{}", describe(r), server.log_tail());
        let facts = r.turn.as_deref().expect("a turn record carries its facts");
        assert!(facts.user < 2, "{say}: {facts:?}");
        if let (Some(s), Some(w)) = (facts.think_scheduled_us, facts.think_waited_us) {
            assert!(
                w >= s - 200,
                "{say}: {}: waited {w} µs of a scheduled {s} µs",
                r.case_id
            );
        }
        assert!(
            r.input_tokens.unwrap_or(0) > 0,
            "{say}: prompt tokens from usage: {}",
            describe(r)
        );
        if stream {
            assert!(
                r.ttft_us().is_some(),
                "{say}: a streamed turn has a TTFT: {}",
                describe(r)
            );
        }
        by_turn.insert((facts.conversation.clone(), facts.turn), r);
    }
    // Turns 1 and 3 are graded (they have an `expected`), turn 2 is not.
    for ((_, turn), r) in &by_turn {
        assert_eq!(r.grades.len(), usize::from(*turn != 2), "{say}: {}", describe(r));
    }
    let mut framing = Vec::new();
    for case in &file.cases {
        for k in 2..=case.turns.len() as u32 {
            let (prev, this) = (by_turn[&(case.id.clone(), k - 1)], by_turn[&(case.id.clone(), k)]);
            let reply = prev.output();
            let user = case.turns[k as usize - 1].user_message(&case.vars);
            let carried = tokenizer.count(reply).await.unwrap() + tokenizer.count(&user).await.unwrap();
            let growth = this.input_tokens.unwrap() - prev.input_tokens.unwrap();
            let say = format!("{say}: {} turn {k} (reply {reply:?})", case.id);
            println!(
                "{say}: prompt {} tokens = {} + {growth} (reply and message {carried}), TTFT {:?} µs",
                this.input_tokens.unwrap(),
                prev.input_tokens.unwrap(),
                this.ttft_us()
            );
            assert!(
                growth > carried,
                "{say}: the prompt grew by {growth} tokens, less than the reply and the new message ({carried})"
            );
            if !reply.contains(escapes) {
                framing.push((growth - carried, say));
            }
        }
    }
    // The same framing on every turn: the prompt carried exactly the earlier reply and message.
    let (first, _) = framing.first().expect("a turn whose reply the template keeps as it is");
    for (f, say) in &framing {
        assert_eq!(f, first, "{say}: framing tokens differ between turns: {framing:?}");
    }
    if let Ok(dir) = std::env::var("BAKEOFF_CHART_DIR") {
        use bakeoff::app::pages::conversations::{candidate_conversations, ttft_context_chart};
        let id = run.candidate_ids[0];
        let part = candidate_conversations(spec.name.clone(), &records, id).expect("a conversation part");
        let chart = ttft_context_chart(&[part], &[id]).expect("a chart of TTFT against context");
        std::fs::write(
            PathBuf::from(dir).join(format!("{}-ttft-context.svg", engine.name)),
            chart.svg,
        )
        .unwrap();
    }
    records
}
