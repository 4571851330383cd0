//! Page times at scale: with 1,000 archived runs and one run of 100,000 requests in the store,
//! how long do the archive, the big run's page, its drill-down, a comparison and a history take
//! at p95 — on SQLite and, when `BAKEOFF_BENCH_POSTGRES_URL` (or `BAKEOFF_TEST_POSTGRES_URL`)
//! names a server, on PostgreSQL (in a fresh schema, dropped afterwards).
//!
//! `cargo bench --bench pages` (add `-- --quick` for fewer samples)
//!
//! The app is served over real HTTP on loopback (the same router `bakeoff serve` builds) and each
//! page is fetched `SAMPLES` times one after another, after one untimed load (the first load of
//! an ended run computes and caches its summary; that cold time is reported separately).
//! Figures are printed in milliseconds and as ratios to a reference measured in the same run —
//! a small static asset through the same stack — because absolute numbers depend on the machine.
use std::time::{Duration, Instant};

use bakeoff::domain::Timestamp;
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::domain::scorecard::{RecordedVerdict, Verdict};
use bakeoff::engine::run::Runner;
use bakeoff::store::DynStore;
use bakeoff::web::{AppState, build_app};

mod support;
use support::{evalset, on_each_store, record};

const ARCHIVED_RUNS: usize = 1_000;
const RECORDS_PER_ARCHIVED_RUN: usize = 20;
/// The big run: 1,000 cases × 2 candidates × 50 repetitions = 100,000 requests.
const BIG_CASES: usize = 1_000;
const BIG_REPETITIONS: u32 = 50;
const INSERT_BATCH: usize = 2_000;
const GOAL_MS: f64 = 100.0;

struct Seeded {
    big_run: i64,
    small_runs: (i64, i64),
    candidate: i64,
    evalset_id: i64,
    profile: i64,
}

async fn seed(store: &DynStore) -> Seeded {
    let small_set = store.save_evalset_version(&evalset("bench-small", 20)).await.unwrap();
    let big_set = store
        .save_evalset_version(&evalset("bench-big", BIG_CASES))
        .await
        .unwrap();
    let mut candidates = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
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
    // Every archived run judged by one profile (as the verdict worker does when runs finish),
    // so the archive's profile and verdict filters are timed over 1,000 judged runs.
    let (profile, _) = store
        .save_threshold_profile(
            "bench",
            "",
            &bakeoff::domain::thresholds::templates::batch_default_rules(),
            "bench",
            "bench",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut pending = Vec::new();
    let mut first_small = 0;
    let mut last_small = 0;
    for i in 0..ARCHIVED_RUNS {
        let who = candidates[i % candidates.len()];
        let run = store
            .create_run(&NewRun {
                name: format!("archived {i}"),
                evalset_version_id: small_set,
                candidate_ids: vec![who],
                config: RunConfig::default(),
            })
            .await
            .unwrap();
        if i == 0 {
            first_small = run;
        }
        last_small = run;
        let base = Timestamp::now().0 * 1000;
        for case in 0..RECORDS_PER_ARCHIVED_RUN {
            pending.push(record(run, who, case, 0, base + case as i64 * 1_000));
        }
        if pending.len() >= INSERT_BATCH {
            store.append_request_records(&pending).await.unwrap();
            pending.clear();
        }
        store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
        let verdict = [Verdict::Go, Verdict::NoGo, Verdict::Inconclusive][(i / 3) % 3];
        let judged = RecordedVerdict {
            candidate_id: who,
            candidate: String::new(),
            verdict,
        };
        store.save_run_verdicts(run, profile, 1, &[judged]).await.unwrap();
    }
    store.append_request_records(&pending).await.unwrap();
    pending.clear();
    eprintln!(
        "  seeded {ARCHIVED_RUNS} archived runs in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let big = store
        .create_run(&NewRun {
            name: "big".into(),
            evalset_version_id: big_set,
            candidate_ids: candidates[..2].to_vec(),
            config: RunConfig {
                concurrency: 8,
                repetitions: BIG_REPETITIONS,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    let base = Timestamp::now().0 * 1000;
    let mut n = 0i64;
    for &who in &candidates[..2] {
        for repetition in 0..BIG_REPETITIONS {
            for case in 0..BIG_CASES {
                pending.push(record(big, who, case, repetition, base + n * 100));
                n += 1;
                if pending.len() >= INSERT_BATCH {
                    store.append_request_records(&pending).await.unwrap();
                    pending.clear();
                }
            }
        }
    }
    store.append_request_records(&pending).await.unwrap();
    store.set_run_status(big, RunStatus::Finished, None).await.unwrap();
    eprintln!(
        "  seeded one run of {n} requests in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let evalset_id = store
        .list_evalsets()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.name == "bench-small")
        .unwrap()
        .id;
    Seeded {
        big_run: big,
        small_runs: (first_small, last_small),
        candidate: candidates[0],
        evalset_id,
        profile,
    }
}

/// A page's times and weight over `samples` sequential loads after one cold load.
struct PageTimes {
    cold_ms: f64,
    p50_ms: f64,
    p95_ms: f64,
    /// The body's size in bytes (HTML only: assets are cached by the browser).
    bytes: usize,
}

async fn time_page(client: &reqwest::Client, url: &str, samples: usize) -> PageTimes {
    let fetch = || async {
        let t = Instant::now();
        let r = client.get(url).send().await.expect("GET");
        assert!(r.status().is_success(), "{url}: {}", r.status());
        let body = r.bytes().await.expect("body");
        (t.elapsed(), body.len())
    };
    let (cold, bytes) = fetch().await;
    let mut times: Vec<f64> = Vec::with_capacity(samples);
    for _ in 0..samples {
        times.push(fetch().await.0.as_secs_f64() * 1000.0);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    PageTimes {
        cold_ms: cold.as_secs_f64() * 1000.0,
        p50_ms: q(0.5),
        p95_ms: q(0.95),
        bytes,
    }
}

async fn bench(label: &str, store: DynStore, samples: usize) {
    eprintln!("{label}: seeding…");
    let s = seed(&store).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState {
        app: bakeoff::app::state::App::new(store.clone(), Runner::new(store.clone())),
        demo_mock_url: None,
        security: std::sync::Arc::new(bakeoff::web::security::Security::for_loopback(addr)),
    };
    let server = tokio::spawn(async move {
        axum::serve(listener, build_app(state)).await.unwrap();
    });
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");
    let pages = [
        ("reference: /static/app.css", "/static/app.css".to_string()),
        ("/ (overview)", "/".to_string()),
        ("/candidates", "/candidates".to_string()),
        ("/candidates/{id} (≈333 runs)", format!("/candidates/{}", s.candidate)),
        ("/evalsets", "/evalsets".to_string()),
        ("/thresholds", "/thresholds".to_string()),
        ("/runs", "/runs".to_string()),
        ("/runs/new", "/runs/new".to_string()),
        ("/audit", "/audit".to_string()),
        ("/measure", "/measure".to_string()),
        ("/archive", "/archive".to_string()),
        (
            "/archive filtered (candidate, page 5)",
            format!("/archive?candidate={}&page=5", s.candidate),
        ),
        (
            "/archive filtered (profile, GO, page 3)",
            format!("/archive?profile={}&verdict=GO&page=3", s.profile),
        ),
        ("/runs/{big} (100,000 requests)", format!("/runs/{}", s.big_run)),
        ("/runs/{big}/cases", format!("/runs/{}/cases", s.big_run)),
        (
            "/runs/{big}/cases?failures=on&page=3",
            format!("/runs/{}/cases?failures=on&page=3", s.big_run),
        ),
        (
            "/archive/compare (two archived runs)",
            format!("/archive/compare?runs={},{}", s.small_runs.0, s.small_runs.1),
        ),
        (
            "/archive/history (≈333 runs)",
            format!("/archive/history?candidate={}&evalset={}", s.candidate, s.evalset_id),
        ),
    ];
    let mut reference = None;
    println!("\n{label}: {samples} sequential loads per page after one untimed cold load");
    println!(
        "{:<42} {:>10} {:>9} {:>9} {:>12} {:>9} {:>6}",
        "page", "cold ms", "p50 ms", "p95 ms", "p95 / ref", "KB", "goal"
    );
    for (name, path) in pages {
        let t = time_page(&client, &format!("{base}{path}"), samples).await;
        let reference_p95 = *reference.get_or_insert(t.p95_ms);
        let p95 = t.p95_ms;
        println!(
            "{name:<42} {:>10.1} {:>9.1} {p95:>9.1} {:>12.1} {:>9.1} {:>6}",
            t.cold_ms,
            t.p50_ms,
            p95 / reference_p95.max(1e-3),
            t.bytes as f64 / 1024.0,
            if name.starts_with("reference") {
                ""
            } else if p95 < GOAL_MS {
                "ok"
            } else {
                "MISS"
            }
        );
    }
    server.abort();
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let samples = if quick { 10 } else { 40 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(on_each_store("bakeoff_bench", |label, store| {
        bench(label, store, samples)
    }));
    // The app's pools close with the runtime.
    std::thread::sleep(Duration::from_millis(50));
}

/// Candidates as the store takes them: checked as an admin's (`domain::credentials`).
mod bench_checked {
    pub fn admin_new(spec: &bakeoff::domain::candidate::CandidateSpec) -> bakeoff::domain::credentials::NewCandidate {
        bakeoff::domain::credentials::check_new(bakeoff::domain::accounts::Role::Admin, spec.clone(), false)
            .expect("an admin may set credentials")
    }
}
