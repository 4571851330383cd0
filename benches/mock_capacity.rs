//! How many concurrent streams the mock sustains on one core, as a ratio to a bare axum SSE
//! endpoint measured in the same run.
//!
//! `cargo bench --bench mock_capacity`
//!
//! The server under test runs on a single-threaded tokio runtime in its own thread (one core);
//! the client runs on a one-worker runtime in another thread. For each level (64, 256, 1024
//! concurrent streams) each client task loops over streaming chat requests for a fixed window:
//! 200 tokens, 1 ms between tokens, 1 token per chunk, no time to first token. The reference
//! server sends the same bytes on the same timer pattern (absolute deadlines, the same
//! re-anchoring rule) with none of the mock's logic: no parsing, accounting, answer lookup or
//! rendering. Figures are printed as ratios (mock / reference) because absolute numbers depend
//! on the machine and on whatever else it is doing.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use bakeoff::mock::{MockConfig, ModelProfile};
use tokio::time::Instant;

const TOKENS: u32 = 200;
const INTER_TOKEN: Duration = Duration::from_millis(1);
const LEVELS: [usize; 3] = [64, 256, 1024];
const WARM_UP: Duration = Duration::from_millis(500);
const WINDOW: Duration = Duration::from_secs(2);
/// A stream "held" its delays when it decoded at >= this share of the planned 1000 tok/s.
const HELD_SHARE: f64 = 0.9;

/// A server running on its own thread with a current-thread runtime; stopped on drop.
struct ServerThread {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Joins to the CPU seconds the server thread used (None where /proc is unavailable).
    thread: Option<std::thread::JoinHandle<Option<f64>>>,
}

impl ServerThread {
    fn start(kind: Kind) -> ServerThread {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let cpu_before = thread_cpu_seconds();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                match kind {
                    Kind::Mock => {
                        let config = MockConfig {
                            profiles: vec![ModelProfile {
                                ttft_ms: 0.0,
                                inter_token_ms: Some(INTER_TOKEN.as_secs_f64() * 1000.0),
                                tokens_per_chunk: 1,
                                ..ModelProfile::named("bench")
                            }],
                            answer_keys: Vec::new(),
                            seed: 1,
                        };
                        let server = bakeoff::mock::spawn(config, listener).await.unwrap();
                        let _ = stopped.await;
                        let _ = server.shutdown().await;
                    }
                    Kind::Reference => {
                        use axum::serve::ListenerExt;
                        let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(reference));
                        let listener = listener.tap_io(|tcp| {
                            let _ = tcp.set_nodelay(true);
                        });
                        axum::serve(listener, app)
                            .with_graceful_shutdown(async {
                                let _ = stopped.await;
                            })
                            .await
                            .unwrap();
                    }
                }
            });
            Some(thread_cpu_seconds()? - cpu_before?)
        });
        ServerThread {
            addr: addr_rx.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl ServerThread {
    /// Stops the server; returns the CPU seconds its thread used.
    fn stop(mut self) -> Option<f64> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.thread.take().and_then(|t| t.join().ok()).flatten()
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// User + system CPU time of the calling thread (Linux), from /proc/thread-self/stat.
fn thread_cpu_seconds() -> Option<f64> {
    cpu_seconds("/proc/thread-self/stat")
}

/// User + system CPU time of a thread or process from its /proc stat file.
fn cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every mainstream Linux configuration.
    Some(ticks / 100.0)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Reference,
    Mock,
}

const HEAD: &str = r#"data: {"id":"chatcmpl-mock-1","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"#;

/// The bare endpoint: the mock's bytes on the mock's timer pattern, nothing else.
async fn reference(_body: Bytes) -> Response {
    struct S {
        next: u32,
        due: Instant,
    }
    let role = Bytes::from(
        format!(r#"{HEAD}"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]}}"#)
            + "\n\n",
    );
    let token = Bytes::from(
        format!(r#"{HEAD}"delta":{{"content":" token"}},"logprobs":null,"finish_reason":null}}]}}"#) + "\n\n",
    );
    let finish = Bytes::from(format!(r#"{HEAD}"delta":{{}},"logprobs":null,"finish_reason":"length"}}]}}"#) + "\n\n");
    let usage = Bytes::from(
        r#"data: {"id":"chatcmpl-mock-1","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[],"usage":{"completion_tokens":200,"completion_tokens_details":{"reasoning_tokens":0},"prompt_tokens":20,"total_tokens":220}}"#
            .to_string()
            + "\n\n",
    );
    let done = Bytes::from_static(b"data: [DONE]\n\n");
    let body = futures_util::stream::unfold(
        S {
            next: 0,
            due: Instant::now(),
        },
        move |mut s| {
            let (role, token, finish, usage, done) =
                (role.clone(), token.clone(), finish.clone(), usage.clone(), done.clone());
            async move {
                let chunk = match s.next {
                    0 => role,
                    n if n <= TOKENS => {
                        // Same pattern as the mock's generator: absolute deadlines, re-anchored
                        // when more than two gaps (at least 5 ms) late.
                        if n > 1 {
                            s.due += INTER_TOKEN;
                        }
                        tokio::time::sleep_until(s.due).await;
                        let now = Instant::now();
                        if now > s.due + (INTER_TOKEN * 2).max(Duration::from_millis(5)) {
                            s.due = now;
                        }
                        token
                    }
                    n if n == TOKENS + 1 => finish,
                    n if n == TOKENS + 2 => usage,
                    n if n == TOKENS + 3 => done,
                    _ => return None,
                };
                s.next += 1;
                Some((Ok::<_, Infallible>(chunk), s))
            }
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}

/// What one run measured.
#[derive(Default)]
struct Measured {
    /// Tokens received inside the window.
    window_tokens: u64,
    /// Tokens received over the server's whole life (for tokens per server CPU second).
    all_tokens: u64,
    /// Per-stream decode speed, (tokens - 1) / (last - first), of streams inside the window.
    decode: Vec<f64>,
    failures: usize,
    server_cpu_s: f64,
    /// The rest of the process: the client (the main thread only waits).
    client_cpu_s: f64,
    runs: u32,
}

impl Measured {
    fn add(&mut self, other: Measured) {
        self.window_tokens += other.window_tokens;
        self.all_tokens += other.all_tokens;
        self.decode.extend(other.decode);
        self.failures += other.failures;
        self.server_cpu_s += other.server_cpu_s;
        self.client_cpu_s += other.client_cpu_s;
        self.runs += other.runs;
    }

    fn tokens_per_s(&self) -> f64 {
        self.window_tokens as f64 / (WINDOW.as_secs_f64() * f64::from(self.runs.max(1)))
    }

    fn tokens_per_cpu_s(&self) -> f64 {
        self.all_tokens as f64 / self.server_cpu_s.max(1e-9)
    }

    /// Server CPU use as a share of one core over the measured run time.
    fn cpu_busy(&self, run_s: f64) -> f64 {
        self.server_cpu_s / (run_s * f64::from(self.runs.max(1)))
    }

    fn client_busy(&self, run_s: f64) -> f64 {
        self.client_cpu_s / (run_s * f64::from(self.runs.max(1)))
    }

    fn decode_quantile(&mut self, q: f64) -> f64 {
        self.decode.sort_by(f64::total_cmp);
        if self.decode.is_empty() {
            return 0.0;
        }
        self.decode[((self.decode.len() - 1) as f64 * q).round() as usize]
    }
}

/// One client stream loop. The client is a minimal HTTP/1.1 keep-alive client over raw TCP
/// (write the request, count SSE events by their blank lines, wait for the chunked-body
/// terminator), so that the server, not the client, is what saturates.
async fn client_task(
    addr: SocketAddr,
    request: std::sync::Arc<[u8]>,
    window_start: Instant,
    window_end: Instant,
) -> (u64, u64, Vec<f64>, usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// `0\r\n\r\n`: the last chunk of a chunked body, in the low five bytes.
    const TERMINATOR: u64 = 0x30_0d_0a_0d_0a;
    let (mut window_tokens, mut all_tokens, mut decode, mut failures) = (0u64, 0u64, Vec::new(), 0usize);
    let mut buf = vec![0u8; 64 * 1024];
    let mut conn: Option<tokio::net::TcpStream> = None;
    while Instant::now() < window_end {
        if conn.is_none() {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(c) => {
                    let _ = c.set_nodelay(true);
                    conn = Some(c);
                }
                Err(_) => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        if c.write_all(&request).await.is_err() {
            failures += 1;
            conn = None;
            continue;
        }
        // Events end with "\n\n" (chunk framing and headers only ever use "\r\n"); event 0 is
        // the role chunk, events 1..=TOKENS carry one token each.
        let (mut events, mut last_byte, mut tail) = (0u32, 0u8, 0u64);
        let (mut first_token, mut last_token) = (None, None);
        let complete = loop {
            let n = match c.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    failures += 1;
                    break false;
                }
                Ok(n) => n,
            };
            let now = Instant::now();
            for &b in &buf[..n] {
                if b == b'\n' && last_byte == b'\n' {
                    if (1..=TOKENS).contains(&events) {
                        all_tokens += 1;
                        first_token.get_or_insert(now);
                        last_token = Some(now);
                        if now >= window_start && now < window_end {
                            window_tokens += 1;
                        }
                    }
                    events += 1;
                    last_byte = 0;
                } else {
                    last_byte = b;
                }
                tail = (tail << 8) | u64::from(b);
            }
            if events == TOKENS + 4 && tail & 0xff_ffff_ffff == TERMINATOR {
                break true;
            }
            if now >= window_end {
                break false;
            }
        };
        if !complete {
            conn = None;
            continue;
        }
        if let (Some(first), Some(last)) = (first_token, last_token)
            && first >= window_start
            && last < window_end
        {
            decode.push(f64::from(TOKENS - 1) / (last - first).as_secs_f64().max(1e-9));
        }
    }
    (window_tokens, all_tokens, decode, failures)
}

async fn drive(addr: SocketAddr, concurrency: usize) -> Measured {
    let body = serde_json::json!({
        "model": "bench", "messages": [{ "role": "user", "content": "write a long text please" }],
        "max_tokens": TOKENS, "stream": true, "stream_options": { "include_usage": true },
    })
    .to_string();
    let request: std::sync::Arc<[u8]> = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .into();
    let window_start = Instant::now() + WARM_UP;
    let window_end = window_start + WINDOW;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(client_task(addr, request.clone(), window_start, window_end)))
        .collect();
    let mut measured = Measured {
        runs: 1,
        ..Measured::default()
    };
    for t in tasks {
        let (window, all, decode, failures) = t.await.unwrap();
        measured.window_tokens += window;
        measured.all_tokens += all;
        measured.decode.extend(decode);
        measured.failures += failures;
    }
    measured
}

fn main() {
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let planned = 1000.0 / (INTER_TOKEN.as_secs_f64() * 1000.0);
    println!(
        "mock_capacity: server on one current-thread runtime, client on a one-worker runtime; \
         {TOKENS}-token streams, {} ms between tokens (planned {planned:.0} tok/s/stream), 1 token per chunk, \
         {:.1} s window after {:.1} s warm-up",
        INTER_TOKEN.as_millis(),
        WINDOW.as_secs_f64(),
        WARM_UP.as_secs_f64()
    );
    println!(
        "{:>7} | {:>9} {:>9} {:>5} | {:>11} {:>11} {:>5} | {:>9} {:>5} | {:>24} | {:>4}",
        "streams",
        "ref tok/s",
        "mock",
        "ratio",
        "ref tok/CPUs",
        "mock",
        "ratio",
        "srv CPU r/m",
        "cli",
        "mock decode p50/p10/mean",
        "held"
    );
    for level in LEVELS {
        // ABBA order, so drift in machine load (and warm-up effects) falls on both alike.
        let (mut reference, mut mock) = (Measured::default(), Measured::default());
        let mut run_s = 0.0;
        for kind in [Kind::Reference, Kind::Mock, Kind::Mock, Kind::Reference] {
            let server = ServerThread::start(kind);
            let started = std::time::Instant::now();
            let process_before = cpu_seconds("/proc/self/stat").unwrap_or(0.0);
            let mut m = client_rt.block_on(drive(server.addr, level));
            m.server_cpu_s = server.stop().unwrap_or(0.0);
            let process = cpu_seconds("/proc/self/stat").unwrap_or(0.0) - process_before;
            m.client_cpu_s = (process - m.server_cpu_s).max(0.0);
            run_s = started.elapsed().as_secs_f64();
            match kind {
                Kind::Reference => reference.add(m),
                Kind::Mock => mock.add(m),
            }
        }
        let (p50, p10) = (mock.decode_quantile(0.5), mock.decode_quantile(0.1));
        println!(
            "{level:>7} | {:>9.0} {:>9.0} {:>5.2} | {:>11.0} {:>11.0} {:>5.2} | {:>4.0}%/{:>3.0}% {:>4.0}% | {:>7.0} /{:>6.0} /{:>6.0} | {:>4}",
            reference.tokens_per_s(),
            mock.tokens_per_s(),
            mock.tokens_per_s() / reference.tokens_per_s().max(1.0),
            reference.tokens_per_cpu_s(),
            mock.tokens_per_cpu_s(),
            mock.tokens_per_cpu_s() / reference.tokens_per_cpu_s().max(1.0),
            reference.cpu_busy(run_s) * 100.0,
            mock.cpu_busy(run_s) * 100.0,
            (reference.client_busy(run_s) + mock.client_busy(run_s)) * 50.0,
            p50,
            p10,
            mock.tokens_per_s() / level as f64,
            if p10 >= HELD_SHARE * planned { "yes" } else { "no" },
        );
        if reference.failures + mock.failures > 0 {
            println!(
                "        (failed requests: reference {}, mock {})",
                reference.failures, mock.failures
            );
        }
    }
    println!(
        "tok/s = aggregate tokens received per second in the window (mean of two runs each, ABBA order); \
         tok/CPUs = tokens per second of server-thread CPU time (the cleanest efficiency figure on a busy machine); \
         ratio = mock / reference; srv CPU r/m = server thread busy share of one core (reference/mock), \
         cli = client busy share (mean); decode = per-stream \
         (tokens-1)/(last-first) in tok/s of streams complete inside the window (0: none was), \
         mean = aggregate / streams (includes request turnaround); held = mock p10 decode >= {:.0}% of the planned {planned:.0} tok/s.",
        HELD_SHARE * 100.0
    );
}
