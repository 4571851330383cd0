//! Ingest with 1, 2 and 3 `bakeoff worker` processes sharing one PostgreSQL database: each
//! worker measures one run (one candidate, closed loop at a fixed concurrency for a fixed time)
//! against the built-in mock, all at once. Reported per worker (streamed tokens per second of
//! its unit, its CPU-seconds per million tokens, from the unit's harness report) and in total
//! over the window all units spanned, as ratios to the one-worker figure measured in the same
//! run. On a 2-core machine the mock and the workers share the cores, so what this shows there
//! is the coordination's overhead and the machine's ceiling, not a cluster's scaling.
//!
//! `cargo bench --bench workers` (release), or `cargo test --bench workers -- --quick` (debug,
//! shorter). Needs PostgreSQL: `BAKEOFF_BENCH_POSTGRES_URL` or `BAKEOFF_TEST_POSTGRES_URL`.
mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::run::{NewRun, RunConfig};
use bakeoff::mock::{MockConfig, ModelProfile};

const CONCURRENCY: u32 = 16;

/// One `bakeoff worker` process, killed when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one configuration measured.
struct Measured {
    workers: usize,
    /// Per worker: (name, tokens/s of its unit, CPU-s per million tokens).
    per_worker: Vec<(String, f64, Option<f64>)>,
    total_tokens_per_s: f64,
    records_per_s: f64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let seconds: u32 = if quick { 3 } else { 10 };
    let Some(admin) = support::postgres_admin_url() else {
        println!("workers bench: skipped (set BAKEOFF_BENCH_POSTGRES_URL=postgres://…)");
        return;
    };
    // The mock: no answer key, so 64 filler tokens a request (the run's max_tokens), 2 ms
    // apart, one a chunk (≈ 7k tok/s per 16 streams).
    let names = ["bench-1", "bench-2", "bench-3"];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::mock::spawn(
        MockConfig {
            profiles: names
                .iter()
                .map(|n| ModelProfile {
                    ttft_ms: 5.0,
                    inter_token_ms: Some(2.0),
                    tokens_per_chunk: 1,
                    jitter: 0.0,
                    ..ModelProfile::named(*n)
                })
                .collect(),
            answer_keys: vec![],
            seed: 3,
        },
        listener,
    )
    .await
    .expect("starting the mock");
    println!(
        "workers bench ({}): {CONCURRENCY} streams per worker for {seconds} s, mock in the bench process",
        if quick { "quick, debug" } else { "release" }
    );
    let mut results = Vec::new();
    for workers in 1..=3 {
        let schema = format!("bench_workers_{}_{workers}", std::process::id());
        let mock_url = mock.base_url();
        let measured = support::in_postgres_schema(&admin, &schema, |url| async move {
            measure(&url, &mock_url, &names[..workers], seconds).await
        })
        .await;
        results.push(measured);
    }
    let reference = results[0].total_tokens_per_s;
    println!(
        "\n{:<8} {:>14} {:>10} {:>12}   per worker: tok/s (CPU-s per million tokens)",
        "workers", "total tok/s", "× 1 worker", "records/s"
    );
    for r in &results {
        let each: Vec<String> = r
            .per_worker
            .iter()
            .map(|(name, tps, cpu)| match cpu {
                Some(c) => format!("{name} {tps:.0} ({c:.2})"),
                None => format!("{name} {tps:.0}"),
            })
            .collect();
        println!(
            "{:<8} {:>14.0} {:>10.2} {:>12.0}   {}",
            r.workers,
            r.total_tokens_per_s,
            r.total_tokens_per_s / reference,
            r.records_per_s,
            each.join(", ")
        );
    }
    mock.shutdown().await.ok();
}

/// One run per candidate, one worker per run, all at once; returns what the units stored.
async fn measure(url: &str, mock_url: &str, names: &[&str], seconds: u32) -> Measured {
    let store = bakeoff::store::connect(url).await.expect("opening the bench schema");
    let version = store
        .save_evalset_version(&support::evalset("workers-bench", 200))
        .await
        .unwrap();
    let mut runs = Vec::new();
    for name in names {
        let candidate = store
            .create_candidate(&bench_checked::admin_new(&CandidateSpec::openai_chat(
                *name, mock_url, *name,
            )))
            .await
            .unwrap();
        let run = store
            .create_run(&NewRun {
                name: format!("ingest {name}"),
                evalset_version_id: version,
                candidate_ids: vec![candidate],
                config: RunConfig {
                    concurrency: CONCURRENCY,
                    repetitions: 1,
                    warmup_requests: 0,
                    timeout_secs: 30,
                    retries: 0,
                    staged_rollout: false,
                    duration_secs: Some(seconds),
                    max_tokens: Some(64),
                    ..RunConfig::default()
                },
            })
            .await
            .unwrap();
        store.request_run(run).await.unwrap();
        runs.push(run);
    }
    let _workers: Vec<Worker> = (0..names.len())
        .map(|i| {
            Worker(
                Command::new(env!("CARGO_BIN_EXE_bakeoff"))
                    .args([
                        "worker",
                        "--database-url",
                        url,
                        "--name",
                        &format!("w{}", i + 1),
                        "--capacity",
                        "1",
                    ])
                    .env("BAKEOFF_LOG", "warn")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("starting bakeoff worker"),
            )
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(seconds) * 6 + 60);
    for &run in &runs {
        loop {
            let status = store.get_run(run).await.unwrap().unwrap().status;
            if status.is_terminal() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "run {run} did not end in time");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut per_worker = Vec::new();
    let (mut tokens, mut records, mut first, mut last) = (0u64, 0usize, i64::MAX, i64::MIN);
    for &run in &runs {
        let unit = store
            .list_run_units(run)
            .await
            .unwrap()
            .into_iter()
            .next()
            .expect("a unit");
        let harness = unit.harness.expect("the unit's harness report");
        tokens += harness.streamed_tokens;
        per_worker.push((
            unit.worker.unwrap_or_default(),
            harness.streamed_tokens as f64 / harness.wall_s.max(1e-9),
            harness.cpu_s_per_million_tokens,
        ));
        for (_, r) in store.list_request_records_page(run, 0, i64::MAX).await.unwrap() {
            records += 1;
            first = first.min(r.sent_at_us);
            last = last.max(r.sent_at_us + r.end_us.get().unwrap_or(0));
        }
    }
    let window_s = ((last - first) as f64 / 1e6).max(1e-9);
    Measured {
        workers: names.len(),
        per_worker,
        total_tokens_per_s: tokens as f64 / window_s,
        records_per_s: records as f64 / window_s,
    }
}

/// Candidates as the store takes them: checked as an admin's (`domain::credentials`).
mod bench_checked {
    pub fn admin_new(spec: &bakeoff::domain::candidate::CandidateSpec) -> bakeoff::domain::credentials::NewCandidate {
        bakeoff::domain::credentials::check_new(bakeoff::domain::accounts::Role::Admin, spec.clone(), false)
            .expect("an admin may set credentials")
    }
}
