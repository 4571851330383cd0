//! `bakeoff calibrate`: starts the built-in mock on threads of its own and measures every level
//! against it (`engine::calibrate` measures and compares with the mock's ground truth).
//!
//! The mock has its own runtime (two workers by default: one thread could not read new requests
//! promptly while writing ~60,000 chunks a second), so bakeoff's client is measured honestly:
//! its CPU time excludes the mock's threads, and the mock never waits for the client's scheduler.
use std::time::Duration;

use anyhow::Context;

use crate::engine::calibrate::{
    CalibrateOptions, CalibrationReport, LevelSpec, MockUrls, level_specs, report, run_level,
};
use crate::engine::run::harness::EXCLUDED_THREAD_PREFIX;
use crate::mock::{MockConfig, ModelProfile};

/// Ground-truth records kept: a whole level's (c=1,024 with short answers sends ~2,000 requests a
/// second), so every request can be matched.
const TRUTH_CAPACITY: usize = 100_000;

/// Runs the calibration; `progress` gets one line per level as it starts.
pub async fn calibrate(options: &CalibrateOptions, progress: impl Fn(String)) -> anyhow::Result<CalibrationReport> {
    let specs = level_specs(options)?;
    let mut profiles: Vec<ModelProfile> = Vec::new();
    for spec in &specs {
        if !profiles.iter().any(|p| p.name == spec.model) {
            profiles.push(profile(spec));
        }
    }
    let threads = options.mock_threads.max(1);
    let mock = tokio::task::spawn_blocking(move || MockThread::start(profiles, threads))
        .await
        .context("starting the mock")??;
    let urls = MockUrls {
        base_url: &mock.base_url,
        root_url: &mock.root_url,
    };
    let http = reqwest::Client::new();
    let store = crate::store::connect("sqlite::memory:").await?;
    let mut levels = Vec::new();
    for spec in &specs {
        levels.push(run_level(&http, &store, &urls, spec, options.seconds_per_level, &progress).await?);
    }
    drop(mock);
    Ok(report(options, threads, levels))
}

/// The mock profile that serves a level's conditions exactly (no jitter).
fn profile(spec: &LevelSpec) -> ModelProfile {
    ModelProfile {
        ttft_ms: spec.ttft_ms,
        inter_token_ms: Some(spec.inter_token_ms),
        tokens_per_chunk: spec.tokens_per_chunk,
        batch_first_chunk: spec.batch_first_chunk,
        jitter: 0.0,
        context_length: 1_000_000,
        default_max_tokens: spec.tokens,
        ..ModelProfile::named(spec.model)
    }
}

/// The mock on threads of its own (named `bakeoff-mock…`, so the harness does not count their
/// CPU): one current-thread runtime, or a multi-thread runtime with `threads` workers.
struct MockThread {
    base_url: String,
    root_url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}
impl MockThread {
    fn start(profiles: Vec<ModelProfile>, threads: u32) -> anyhow::Result<MockThread> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(EXCLUDED_THREAD_PREFIX.to_string())
            .spawn(move || {
                let built = if threads <= 1 {
                    tokio::runtime::Builder::new_current_thread().enable_all().build()
                } else {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(threads as usize)
                        .thread_name(EXCLUDED_THREAD_PREFIX)
                        .enable_all()
                        .build()
                };
                let runtime = match built {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = addr_tx.send(Err(format!("mock runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let started = async {
                        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                        crate::mock::spawn_with_log(
                            MockConfig {
                                profiles,
                                answer_keys: Vec::new(),
                                seed: 42,
                            },
                            listener,
                            TRUTH_CAPACITY,
                        )
                        .await
                    };
                    match started.await {
                        Ok(server) => {
                            let _ = addr_tx.send(Ok((server.base_url(), server.root_url())));
                            let _ = stop_rx.await;
                            let _ = server.shutdown().await;
                        }
                        Err(e) => {
                            let _ = addr_tx.send(Err(format!("starting the mock: {e}")));
                        }
                    }
                });
            })
            .context("starting the mock's thread")?;
        let (base_url, root_url) = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .context("the mock did not start within 10 s")?
            .map_err(anyhow::Error::msg)?;
        Ok(MockThread {
            base_url,
            root_url,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for MockThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
