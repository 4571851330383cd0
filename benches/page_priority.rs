//! How late the measurement runtime wakes while the threads serving pages are saturated, with
//! those threads at the measurement runtime's priority and `PAGE_THREAD_NICE` below it (what
//! `bakeoff serve` does), against the same runtime on an otherwise idle process, in one run.
//!
//! `cargo bench --bench page_priority` (release; `BAKEOFF_BENCH_ROUNDS=N`, default 3)
//!
//! The measurement runtime (`bakeoff-engine` threads, built first from this thread at normal
//! priority, as `bakeoff serve` builds it) runs the harness's own probe: a ticker due every 5 ms
//! that records how late each tick fires, i.e. how late a stream's timestamp could be taken,
//! beside 32 stream-like tasks that each spend 10 µs of CPU every millisecond.
//! The page load is one thread per core, each summarising a 20,000-request candidate again and
//! again (the work of a big run's page). Each round measures idle, same priority and lowered in
//! turn; the figures are printed per round and as ratios to the idle reference.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bakeoff::engine::run::harness::LAG_SPIKE_MS;
use bakeoff::engine::run::runtime;

mod support;
use support::percentile;

const TICK: Duration = Duration::from_millis(5);
const WINDOW: Duration = Duration::from_secs(4);

/// Streams' work on the measurement runtime meanwhile: `STREAMS` tasks each taking a "chunk"
/// every millisecond and spending `CHUNK_WORK` of CPU on it (about a third of a core in all), so
/// the engine's threads are busy as during a run, not only waking for the ticker.
const STREAMS: usize = 32;
const CHUNK_WORK: Duration = Duration::from_micros(10);

fn spin(d: Duration) {
    let until = std::time::Instant::now() + d;
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Lateness of each tick (ms) over `WINDOW`, on the measurement runtime, with the streams' work
/// running beside it.
fn tick_lateness(engine: &tokio::runtime::Handle) -> Vec<f64> {
    let streams: Vec<_> = (0..STREAMS)
        .map(|_| {
            engine.spawn(async {
                let start = tokio::time::Instant::now();
                while start.elapsed() < WINDOW {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    spin(CHUNK_WORK);
                }
            })
        })
        .collect();
    let ticker = engine.spawn(async {
        let mut late = Vec::new();
        let start = tokio::time::Instant::now();
        let mut next = start + TICK;
        while start.elapsed() < WINDOW {
            tokio::time::sleep_until(next).await;
            let now = tokio::time::Instant::now();
            late.push(now.saturating_duration_since(next).as_secs_f64() * 1000.0);
            next = (next + TICK).max(now + TICK / 5);
        }
        late
    });
    let late = engine.block_on(ticker).expect("the ticker");
    for stream in streams {
        engine.block_on(stream).expect("a stream");
    }
    late
}

/// Starts `n` page threads (each lowered first when `lowered`) that summarise `records` until
/// `stop`; returns them and the count of summaries they made.
fn page_load(
    n: usize,
    lowered: bool,
    records: &Arc<Vec<bakeoff::domain::run::RequestRecord>>,
    stop: &Arc<AtomicBool>,
) -> (Vec<std::thread::JoinHandle<()>>, Arc<AtomicU64>) {
    let done = Arc::new(AtomicU64::new(0));
    let threads = (0..n)
        .map(|_| {
            let (records, stop, done) = (records.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                if lowered {
                    runtime::lower_this_thread_priority();
                }
                while !stop.load(Ordering::Relaxed) {
                    let s = bakeoff::domain::metrics::summarise_candidate(1, &records, |_| 1.0);
                    std::hint::black_box(s);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    (threads, done)
}

fn main() {
    // `cargo test --benches` runs every bench with --bench absent: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rounds: usize = std::env::var("BAKEOFF_BENCH_ROUNDS").map_or(3, |n| n.parse().expect("a whole number"));
    let engine = runtime::handle();
    let cores = runtime::worker_threads();
    let records: Arc<Vec<_>> = Arc::new(
        (0..20_000)
            .map(|i| support::record(1, 1, i % 1_000, (i / 1_000) as u32, i as i64 * 1_000))
            .collect(),
    );
    println!(
        "measurement runtime: {cores} threads; page load: {cores} threads summarising 20,000 records; \
         a 5 ms ticker for {} s per condition, {rounds} rounds",
        WINDOW.as_secs()
    );
    // Per condition, per round: (p99, max, ticks later than the harness's lag-spike bound).
    let mut figures: [Vec<(f64, f64, usize)>; 3] = Default::default();
    for round in 1..=rounds {
        for (i, condition) in ["idle", "same priority", "pages lowered"].into_iter().enumerate() {
            let stop = Arc::new(AtomicBool::new(false));
            let load = (i > 0).then(|| page_load(cores, i == 2, &records, &stop));
            let mut late = tick_lateness(&engine);
            stop.store(true, Ordering::Relaxed);
            let summaries = load.map_or(0, |(threads, done)| {
                threads.into_iter().for_each(|t| t.join().expect("a page thread"));
                done.load(Ordering::Relaxed)
            });
            late.sort_by(f64::total_cmp);
            let spikes = late.iter().filter(|&&ms| ms > LAG_SPIKE_MS).count();
            let (p99, max) = (percentile(&late, 99.0), late.last().copied().unwrap_or(0.0));
            figures[i].push((p99, max, spikes));
            println!(
                "round {round} {condition:>13}: tick lateness p50 {:.3} ms, p99 {p99:.3} ms, max {max:.1} ms, \
                 {spikes} of {} ticks > {LAG_SPIKE_MS} ms ({summaries} page summaries)",
                percentile(&late, 50.0),
                late.len()
            );
        }
    }
    let median = |v: Vec<f64>| {
        let mut v = v;
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let p99 = |i: usize| median(figures[i].iter().map(|f| f.0).collect());
    let max = |i: usize| figures[i].iter().map(|f| f.1).fold(0.0, f64::max);
    let spikes = |i: usize| figures[i].iter().map(|f| f.2).sum::<usize>();
    let idle = p99(0).max(0.001);
    println!(
        "median p99 lateness as a ratio to idle: same priority {:.1}×, pages lowered {:.1}×; \
         worst tick idle / same priority / lowered: {:.1} / {:.1} / {:.1} ms; \
         ticks > {LAG_SPIKE_MS} ms over all rounds: {} / {} / {}",
        p99(1) / idle,
        p99(2) / idle,
        max(0),
        max(1),
        max(2),
        spikes(0),
        spikes(1),
        spikes(2)
    );
}
