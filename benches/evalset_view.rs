//! A 100,000-case eval set viewed by 20 clients at once: the resident memory of a real
//! `bakeoff serve` process (from /proc) and the page time, as ratios against the same page of a
//! 20-case eval set measured in the same run (absolute numbers depend on the machine).
//!
//! `cargo bench --bench evalset_view` (add `-- --quick` for fewer requests)
//!
//! The server runs as its own process on a fresh SQLite database (seeded through the store
//! before it starts); 20 clients each fetch the page one request after another. Reported: page
//! time p50/p95 per page, and serve's RSS (VmRSS) idle before, at its peak while the clients
//! browse, and idle afterwards.
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod support;
use support::{evalset, percentile};

const BIG_CASES: usize = 100_000;
const SMALL_CASES: usize = 20;
const CLIENTS: usize = 20;
const KEY_HEX: &str = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";

/// serve's resident set (VmRSS), bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What 20 clients saw on one page: (p50 ms, p95 ms, peak RSS bytes while they browsed).
struct Browsed {
    p50: f64,
    p95: f64,
    peak_rss: u64,
}

async fn browse(base: &str, path: &str, per_client: usize, pid: u32) -> Browsed {
    let client = reqwest::Client::new();
    // One untimed load (warms the connection pool and the page cache).
    let r = client.get(format!("{base}{path}")).send().await.expect("GET");
    assert!(r.status().is_success(), "{path}: {}", r.status());
    let _ = r.bytes().await;
    let peak = Arc::new(AtomicU64::new(rss(pid)));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (client, url) = (client.clone(), format!("{base}{path}"));
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let started = Instant::now();
                let r = client.get(&url).send().await.expect("GET");
                assert!(r.status().is_success(), "{url}: {}", r.status());
                let _ = r.bytes().await.expect("the body");
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            times
        }));
    }
    let mut times = Vec::new();
    for t in tasks {
        times.extend(t.await.expect("a client"));
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().expect("the RSS sampler");
    times.sort_by(f64::total_cmp);
    Browsed {
        p50: percentile(&times, 50.0),
        p95: percentile(&times, 95.0),
        peak_rss: peak.load(Ordering::Relaxed),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let per_client = if quick { 5 } else { 25 };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let (small, big) = {
        let key = bakeoff::store::server_key::ServerKey::parse(KEY_HEX).expect("the bench key");
        let store = bakeoff::store::connect_with_key(&url, &key)
            .await
            .expect("the bench store");
        let seeding = Instant::now();
        let small = store
            .save_evalset_version(&evalset("view-small", SMALL_CASES))
            .await
            .unwrap();
        let big = store
            .save_evalset_version(&evalset("view-big", BIG_CASES))
            .await
            .unwrap();
        eprintln!(
            "seeded {BIG_CASES} + {SMALL_CASES} cases in {:.1} s",
            seeding.elapsed().as_secs_f64()
        );
        (small, big)
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            &url,
        ])
        .env("BAKEOFF_SECRET_KEY", KEY_HEX)
        .env("BAKEOFF_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting bakeoff serve");
    let serve = Serve(child);
    let pid = serve.0.id();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while reqwest::get(format!("{base}/")).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(60), "serve did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_before = rss(pid);
    let last_page = BIG_CASES.div_ceil(bakeoff::web::evalsets::CASES_PER_PAGE as usize);
    let pages = [
        ("20-case set, page 1", format!("/evalsets/{small}")),
        ("100,000-case set, page 1", format!("/evalsets/{big}")),
        (
            "100,000-case set, last page",
            format!("/evalsets/{big}?page={last_page}"),
        ),
    ];
    let mut results = Vec::new();
    for (label, path) in &pages {
        results.push((label, browse(&base, path, per_client, pid).await));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_after = rss(pid);
    let reference = &results[0].1;
    println!(
        "{CLIENTS} clients × {per_client} requests each; serve RSS idle before: {:.1} MB",
        mb(idle_before)
    );
    println!(
        "{:<30} {:>9} {:>9} {:>12} {:>11} {:>11} {:>10}",
        "page", "p50 ms", "p95 ms", "peak RSS MB", "p50 ratio", "p95 ratio", "RSS ratio"
    );
    for (label, b) in &results {
        println!(
            "{:<30} {:>9.2} {:>9.2} {:>12.1} {:>11.2} {:>11.2} {:>10.2}",
            label,
            b.p50,
            b.p95,
            mb(b.peak_rss),
            b.p50 / reference.p50,
            b.p95 / reference.p95,
            b.peak_rss as f64 / reference.peak_rss.max(1) as f64
        );
    }
    println!("serve RSS idle afterwards: {:.1} MB", mb(idle_after));
    drop(serve);
}
