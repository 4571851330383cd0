//! A run of 1,000,000 requests (`--quick`: 20,000) stored synthetically on SQLite and, when
//! `BAKEOFF_BENCH_POSTGRES_URL` (or `BAKEOFF_TEST_POSTGRES_URL`) names a server, on PostgreSQL
//! (in a fresh schema, dropped afterwards): records stored per second and the process's peak
//! RSS, then every page and export of that run timed — first render against later renders (p95)
//! with its weight in bytes — as ratios to the same page of a 100-request run measured in the
//! same process, because absolute numbers depend on the machine.
//!
//! Peak RSS is the process's so far (`VmHWM`).
//!
//! Both runs end as the runner ends a run: their page and scorecard summaries are stored then
//! (`app::pages::summaries`), so the first render reads them.
//!
//! The big run is 5,000 cases × 2 candidates × 100 repetitions (`--quick`: 1,000 × 2 × 10); a run
//! repeats its cases at most `REPETITION_LIMIT` (100) times, and a stored repetition number past
//! it reads as a later cycle of a lower repetition, whose figures' window spans every cycle.
//!
//! `cargo bench --bench big_run` (release; `BAKEOFF_BENCH_REPETITIONS=N` for N repetitions,
//! `BAKEOFF_BENCH_CASES=N` for N cases (a 100,000-case run: `…CASES=100000
//! …REPETITIONS=1`), `BAKEOFF_BENCH_LIVE_VIEWERS=N` for N views at once of the big run before it
//! ends, `BAKEOFF_BENCH_TOKENS=N` for N streamed tokens (chunks) per answer instead of 16,
//! `BAKEOFF_BENCH_ANSWER_CHARS=N` and `BAKEOFF_BENCH_REASONING_CHARS=N` for answers and reasoning
//! texts of about N characters (unset: short answers, no reasoning),
//! `BAKEOFF_BENCH_SKIP_SQLITE=1` for PostgreSQL only, `BAKEOFF_BENCH_PAGES=text` for the pages
//! whose path contains it, `BAKEOFF_BENCH_KEEP_SQLITE=FILE` to keep the SQLite database); CI
//! runs `cargo test --bench big_run -- --quick` (debug, reusing the tests' build), which exits
//! non-zero only on a gross regression: a page of the big run more than
//! `MAX_BIG_OVER_REFERENCE`× the reference page's time (exports: per byte), or a first render more
//! than `MAX_FIRST_OVER_LATER`× the later ones. Times under `FLOOR_MS` count as `FLOOR_MS`, so
//! scheduler noise on a busy machine cannot fail it.
use std::time::{Duration, Instant};

use bakeoff::domain::Timestamp;
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::engine::run::Runner;
use bakeoff::store::DynStore;
use bakeoff::web::{AppState, build_app};

mod support;
use support::{evalset, on_each_store, record};

/// Cases and repetitions of the big run, and of its `--quick` form (`BAKEOFF_BENCH_CASES` and
/// `BAKEOFF_BENCH_REPETITIONS` set others).
const BIG: (usize, u32) = (5_000, 100);
const QUICK: (usize, u32) = (1_000, 10);
const INSERT_BATCH: usize = 2_000;
/// The reference run: 50 cases × 2 candidates × 1 repetition.
const REFERENCE_CASES: usize = 50;
const MAX_BIG_OVER_REFERENCE: f64 = 20.0;
const MAX_FIRST_OVER_LATER: f64 = 5.0;
const FLOOR_MS: f64 = 20.0;
/// Later renders timed of a page whose weight grows with the run (the run's export).
const GROWING_SAMPLES: usize = 2;

/// Peak resident set of this process, MiB (`VmHWM`).
fn peak_rss_mib() -> Option<f64> {
    status_mib("VmHWM:")
}

/// The process's resident memory now.
fn rss_mib() -> Option<f64> {
    status_mib("VmRSS:")
}

fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Stores a finished run of `cases × 2 candidates × repetitions` requests; returns its id and
/// the records stored per second.
async fn store_run(store: &DynStore, candidates: &[i64], cases: usize, repetitions: u32) -> (i64, f64) {
    let set = store
        .save_evalset_version(&evalset(&format!("big-run-{cases}"), cases))
        .await
        .unwrap();
    let run = store
        .create_run(&NewRun {
            name: format!("{} requests", cases * candidates.len() * repetitions as usize),
            evalset_version_id: set,
            candidate_ids: candidates.to_vec(),
            config: RunConfig {
                concurrency: 8,
                repetitions,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let started = Instant::now();
    let base = Timestamp::now().0 * 1000;
    let mut pending = Vec::with_capacity(INSERT_BATCH);
    let mut n = 0i64;
    for &who in candidates {
        for repetition in 0..repetitions {
            for case in 0..cases {
                pending.push(record(run, who, case, repetition, base + n * 100));
                n += 1;
                if pending.len() >= INSERT_BATCH {
                    store.append_request_records(&pending).await.unwrap();
                    pending.clear();
                }
            }
        }
    }
    store.append_request_records(&pending).await.unwrap();
    store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    (run, n as f64 / started.elapsed().as_secs_f64())
}

/// One page's timings: first render, p95 of the later ones (ms), and its weight (bytes).
struct Timed {
    first: f64,
    p95: f64,
    bytes: usize,
}

async fn time_page(client: &reqwest::Client, url: &str, samples: usize) -> Timed {
    let fetch = || async {
        let t = Instant::now();
        let mut r = client.get(url).send().await.expect("GET");
        assert!(r.status().is_success(), "{url}: {}", r.status());
        // Counted as it arrives, not held: the process's peak RSS is the server's (a whole-run
        // export held here would be hundreds of MB of the client's own).
        let mut bytes = 0;
        while let Some(chunk) = r.chunk().await.expect("body") {
            bytes += chunk.len();
        }
        (t.elapsed().as_secs_f64() * 1000.0, bytes)
    };
    let (first, bytes) = fetch().await;
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        times.push(fetch().await.0);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let p95 = times[((times.len() - 1) as f64 * 0.95).round() as usize];
    Timed { first, p95, bytes }
}

/// Benches one backend; returns the gross regressions found.
async fn bench(label: &str, store: DynStore, cases: usize, repetitions: u32, samples: usize) -> Vec<String> {
    let mut candidates = Vec::new();
    for name in ["alpha", "beta"] {
        let spec = CandidateDraft {
            name: name.into(),
            provider: "openai-chat".into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            model: name.into(),
            ..Default::default()
        }
        .validate(None)
        .unwrap();
        candidates.push(store.create_candidate(&bench_checked::admin_new(&spec)).await.unwrap());
    }
    // The scorecard needs a threshold profile to assess by.
    store
        .save_threshold_profile(
            "bench",
            "",
            &bakeoff::domain::thresholds::templates::batch_default_rules(),
            "bench",
            "bench",
        )
        .await
        .unwrap();
    let (reference, _) = store_run(&store, &candidates, REFERENCE_CASES, 1).await;
    let (big, per_second) = store_run(&store, &candidates, cases, repetitions).await;
    let requests = cases * candidates.len() * repetitions as usize;
    println!(
        "\n{label}: stored {requests} requests at {per_second:.0} records/s; peak RSS {:.0} MiB",
        peak_rss_mib().unwrap_or(f64::NAN)
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState {
        app: bakeoff::app::state::App::new(store.clone(), Runner::new(store.clone())),
        demo_mock_url: None,
        security: std::sync::Arc::new(bakeoff::web::security::Security::for_loopback(addr)),
    };
    let app = build_app(state.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");
    // BAKEOFF_BENCH_LIVE_VIEWERS=N: N views at once of the big run while it is unfinished, in
    // turn its run page, its scorecard and its cases page (failures only): each computed from
    // its records on every view.
    let viewers: usize = std::env::var("BAKEOFF_BENCH_LIVE_VIEWERS")
        .map(|n| n.parse().expect("BAKEOFF_BENCH_LIVE_VIEWERS: a whole number"))
        .unwrap_or(0);
    if viewers > 0 {
        store.set_run_status(big, RunStatus::Running, None).await.unwrap();
        let started = Instant::now();
        let views = (0..viewers).map(|i| {
            let url = format!("{base}/runs/{big}{}", ["", "/scorecard", "/cases?failures=on"][i % 3]);
            let client = client.clone();
            async move {
                let r = client.get(&url).send().await.expect("GET");
                assert!(r.status().is_success(), "{url}: {}", r.status());
                r.bytes().await.expect("body").len()
            }
        });
        let views = tokio::spawn(futures_util::future::join_all(views));
        // Meanwhile a light page (the runs list), every 100 ms: is the app still answering?
        let light = format!("{base}/runs");
        let mut during = Vec::new();
        while !views.is_finished() {
            let at = Instant::now();
            let r = client.get(&light).send().await.expect("GET /runs");
            assert!(r.status().is_success(), "/runs: {}", r.status());
            r.bytes().await.expect("body");
            during.push(at.elapsed().as_secs_f64() * 1000.0);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        views.await.expect("the views");
        let answered_in = started.elapsed().as_secs_f64() * 1000.0;
        let mut idle = Vec::new();
        for _ in 0..10 {
            let at = Instant::now();
            client
                .get(&light)
                .send()
                .await
                .expect("GET /runs")
                .bytes()
                .await
                .expect("body");
            idle.push(at.elapsed().as_secs_f64() * 1000.0);
        }
        during.sort_by(f64::total_cmp);
        idle.sort_by(f64::total_cmp);
        println!(
            "  {viewers} views at once of the unfinished big run (run page, scorecard, cases page): all answered in {answered_in:.0} ms; peak RSS {:.0} MiB",
            peak_rss_mib().unwrap_or(f64::NAN)
        );
        println!(
            "  the runs list meanwhile: {} loads, median {:.1} ms, worst {:.0} ms (afterwards: median {:.1} ms, worst {:.1} ms)",
            during.len(),
            during.get(during.len() / 2).copied().unwrap_or(f64::NAN),
            during.last().copied().unwrap_or(f64::NAN),
            idle[idle.len() / 2],
            idle[idle.len() - 1]
        );
        store.set_run_status(big, RunStatus::Finished, None).await.unwrap();
    }
    // What the runner does when a run ends (the synthetic runs were stored, not executed).
    for run in [reference, big] {
        let started = Instant::now();
        bakeoff::app::pages::summaries::store_when_ended(&state, run)
            .await
            .unwrap();
        println!(
            "  summaries of run {run} stored at its end in {:.0} ms; RSS after it {:.0} MiB, peak so far {:.0} MiB",
            started.elapsed().as_secs_f64() * 1000.0,
            rss_mib().unwrap_or(f64::NAN),
            peak_rss_mib().unwrap_or(f64::NAN)
        );
    }
    // (page, whether its weight grows with the run: exports, compared per byte).
    let pages = [
        ("/runs/{id}", false),
        ("/runs/{id}/cases", false),
        ("/runs/{id}/cases?failures=on", false),
        ("/runs/{id}/scorecard", false),
        ("/runs/{id}/scorecard/export.json", false),
        ("/runs/{id}/scorecard/export.csv", false),
        ("/runs/{id}/scorecard/export.md", false),
        ("/api/v1/runs/{id}/scorecard", false),
        ("/runs/{id}/export.json", true),
    ];
    println!(
        "{:<40} {:>9} {:>9} {:>11} {:>8} {:>8} {:>9} {:>9}",
        "page (big run)", "first ms", "p95 ms", "bytes", "ref p95", "big/ref", "first/p95", "peak RSS"
    );
    let mut regressions = Vec::new();
    // BAKEOFF_BENCH_PAGES=text: only the pages whose path contains it.
    let only = std::env::var("BAKEOFF_BENCH_PAGES").unwrap_or_default();
    for (page, grows) in pages.into_iter().filter(|(page, _)| page.contains(only.as_str())) {
        let url = |id: i64| format!("{base}{}", page.replace("{id}", &id.to_string()));
        // An export of the whole run weighs ~1.8 KB a request (1.8 GB at a million): a few
        // samples of it say as much as twenty, in a twentieth of the time.
        let samples = if grows { samples.min(GROWING_SAMPLES) } else { samples };
        let r = time_page(&client, &url(reference), samples).await;
        let b = time_page(&client, &url(big), samples).await;
        let mut big_over_ref = b.p95.max(FLOOR_MS) / r.p95.max(FLOOR_MS);
        if grows {
            // An export's weight grows with the run: its time is compared per byte.
            big_over_ref /= (b.bytes as f64 / r.bytes.max(1) as f64).max(1.0);
        }
        let first_over_later = b.first.max(FLOOR_MS) / b.p95.max(FLOOR_MS);
        println!(
            "{page:<40} {:>9.1} {:>9.1} {:>11} {:>8.1} {:>8.1} {:>9.1} {:>9.0}",
            b.first,
            b.p95,
            b.bytes,
            r.p95,
            big_over_ref,
            first_over_later,
            peak_rss_mib().unwrap_or(f64::NAN)
        );
        if big_over_ref > MAX_BIG_OVER_REFERENCE {
            regressions.push(format!(
                "{label} {page}: {big_over_ref:.1}× the reference run's time{} (limit {MAX_BIG_OVER_REFERENCE}×)",
                if grows { " per byte" } else { "" }
            ));
        }
        if first_over_later > MAX_FIRST_OVER_LATER {
            regressions.push(format!(
                "{label} {page}: first render {first_over_later:.1}× the later ones (limit {MAX_FIRST_OVER_LATER}×)"
            ));
        }
    }
    server.abort();
    regressions
}

fn main() {
    // As `bakeoff` itself does (its peak RSS is what is measured).
    bakeoff::limit_malloc_arenas();
    let quick = std::env::args().any(|a| a == "--quick");
    // Cases × 2 candidates × repetitions (each page's own cost grows with repetitions: a case
    // holds 2 × N attempts).
    let ((cases, repetitions), samples) = if quick { (QUICK, 3) } else { (BIG, 20) };
    let repetitions = match std::env::var("BAKEOFF_BENCH_REPETITIONS") {
        Ok(n) => n.parse().expect("BAKEOFF_BENCH_REPETITIONS: a whole number"),
        Err(_) => repetitions,
    };
    if repetitions > bakeoff::domain::run::REPETITION_LIMIT {
        println!(
            "note: {repetitions} repetitions are stored as cycles of {} (no run repeats more): each \
             repetition's figures span its cycles",
            bakeoff::domain::run::REPETITION_LIMIT
        );
    }
    let cases = match std::env::var("BAKEOFF_BENCH_CASES") {
        Ok(n) => n.parse().expect("BAKEOFF_BENCH_CASES: a whole number"),
        Err(_) => cases,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let regressions: Vec<String> = runtime
        .block_on(on_each_store("bakeoff_big_run", |label, store| {
            bench(label, store, cases, repetitions, samples)
        }))
        .into_iter()
        .flatten()
        .collect();
    // The app's pools close with the runtime.
    drop(runtime);
    std::thread::sleep(Duration::from_millis(50));
    if regressions.is_empty() {
        println!("\nno gross regression");
    } else {
        eprintln!("\ngross regressions:");
        for r in &regressions {
            eprintln!("  {r}");
        }
        std::process::exit(1);
    }
}

/// Candidates as the store takes them: checked as an admin's (`domain::credentials`).
mod bench_checked {
    pub fn admin_new(spec: &bakeoff::domain::candidate::CandidateSpec) -> bakeoff::domain::credentials::NewCandidate {
        bakeoff::domain::credentials::check_new(bakeoff::domain::accounts::Role::Admin, spec.clone(), false)
            .expect("an admin may set credentials")
    }
}
