//! The harness watching itself: bakeoff's own CPU time (Linux `/proc`, no extra crates), and the
//! run-level report that says whether its speed figures can be trusted.
use std::time::Instant;

use crate::domain::calibers::{HarnessReport, LagSpikes, MAX_LAG_SPIKES};
use crate::domain::histogram::LogHistogram;
use crate::domain::metrics::Distribution;
use crate::domain::run::{RequestRecord, RunConfig};
use crate::run::runtime;

/// p99 schedule lag (open loop) or client queue wait (closed loop) above this, in ms, flags a
/// run's speed figures unreliable: requests left later than the load asked for.
pub const LAG_BOUND_MS: f64 = 10.0;
/// bakeoff using more than this share of all cores flags a run too: a starved client
/// timestamps late.
pub const CPU_SHARE_BOUND: f64 = 0.9;
/// The worst event-loop lag a reliable run may show, ms: one wake-up later than this means some
/// timestamp may be late by as much, whatever the p99 says.
pub const MAX_LAG_BOUND_MS: f64 = 20.0;
/// A tick later than this, ms, is a lag spike: the measured requests whose span overlapped it
/// are marked (their timings may be late by up to the spike).
pub const LAG_SPIKE_MS: f64 = 5.0;
/// More than this share of measured requests overlapping spikes flags a run: enough of them to
/// move a p99.
pub const MARKED_SHARE_BOUND: f64 = 0.01;

/// Threads whose name starts with this are not bakeoff's client (the in-process mock used by
/// `bakeoff calibrate` and the demo), so their CPU time is not counted as the harness's.
pub const EXCLUDED_THREAD_PREFIX: &str = "bakeoff-mock";

/// The kernel's USER_HZ: the unit of `/proc/*/stat` CPU times (100 on every mainstream Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds (user + system) this process has used as a client: minus the in-process mock's
/// threads (`EXCLUDED_THREAD_PREFIX…`) and the threads serving pages (`runtime::PAGE_THREAD_NAME…`,
/// those that ended included), so a page viewed during a run is not charged to the harness;
/// None where `/proc` is not available.
pub fn cpu_seconds() -> Option<f64> {
    let total = process_cpu_seconds()?;
    let pages = threads_cpu_seconds(runtime::PAGE_THREAD_NAME) + runtime::ended_page_threads_cpu_seconds();
    Some((total - threads_cpu_seconds(EXCLUDED_THREAD_PREFIX) - pages).max(0.0))
}

/// CPU seconds (user + system) of the whole process, excluded threads included.
pub fn process_cpu_seconds() -> Option<f64> {
    stat_cpu_seconds(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// CPU seconds (user + system) of another process (`bakeoff calibrate`'s mock process).
pub fn pid_cpu_seconds(pid: u32) -> Option<f64> {
    stat_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU seconds of the live threads named `EXCLUDED_THREAD_PREFIX…` (the in-process mock).
pub fn excluded_cpu_seconds() -> f64 {
    threads_cpu_seconds(EXCLUDED_THREAD_PREFIX)
}

/// CPU seconds of this process's live threads whose name starts with `prefix`.
fn threads_cpu_seconds(prefix: &str) -> f64 {
    let mut sum = 0.0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let path = task.path();
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if name.starts_with(prefix) {
                sum += std::fs::read_to_string(path.join("stat"))
                    .ok()
                    .and_then(|s| stat_cpu_seconds(&s))
                    .unwrap_or(0.0);
            }
        }
    }
    sum
}

/// utime + stime from a `/proc/…/stat` line (fields 14 and 15, counted after the `comm` field,
/// which may itself contain spaces and parentheses).
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14 → index 11, stime index 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// The host's name, for provenance.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}

/// CPU seconds every core of the machine spent busy (not idle or waiting for I/O), from
/// `/proc/stat`; None where it is not available.
pub fn machine_busy_cpu_seconds() -> Option<f64> {
    busy_cpu_seconds(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The `cpu` line of `/proc/stat`: user nice system idle iowait irq softirq steal … (guest time
/// is already inside user); busy is everything but idle and iowait.
fn busy_cpu_seconds(stat: &str) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = line.split_whitespace().skip(1).map_while(|v| v.parse().ok()).collect();
    if ticks.len() < 8 {
        return None;
    }
    let busy: f64 = ticks[..8]
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Some(busy / TICKS_PER_SECOND)
}

/// The 1-minute load average (runnable threads, this process's included).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Cores available to this process.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Started when a run starts; `finish` builds the report from the run's records.
pub struct HarnessClock {
    wall: Instant,
    cpu: Option<f64>,
    lag: LagProbe,
}

impl HarnessClock {
    /// Must be called inside the runtime the run uses (it starts the lag probe there).
    pub fn start() -> Self {
        HarnessClock {
            wall: Instant::now(),
            cpu: cpu_seconds(),
            lag: LagProbe::start(),
        }
    }

    /// The report over `records` (this execution's measured requests: warm-ups and rollout
    /// excluded by the caller or here).
    pub async fn finish(self, config: &RunConfig, records: &[RequestRecord]) -> HarnessReport {
        self.stop().await.report(config, records)
    }

    /// Stops the clock now (wall time, CPU, event-loop lag), so work done after the load (e.g.
    /// counting with a server's tokenizer) is not charged to the harness; report later.
    pub async fn stop(self) -> StoppedClock {
        let wall_s = self.wall.elapsed().as_secs_f64();
        let cpu_s = match (self.cpu, cpu_seconds()) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        let (lag, spikes) = self.lag.finish().await;
        StoppedClock {
            wall_s,
            cpu_s,
            lag,
            spikes,
        }
    }
}

/// What a stopped `HarnessClock` measured, waiting for the records to report on.
pub struct StoppedClock {
    wall_s: f64,
    cpu_s: Option<f64>,
    lag: Option<Distribution>,
    spikes: Vec<(i64, i64, f64)>,
}

impl StoppedClock {
    pub fn report(self, config: &RunConfig, records: &[RequestRecord]) -> HarnessReport {
        let mut tally = self.tally();
        records.iter().for_each(|r| tally.add(r));
        self.report_tally(config, tally)
    }

    /// An empty tally to add this execution's records to, a page at a time (so a run of any
    /// size is reported without holding its records).
    pub fn tally(&self) -> RecordTally {
        RecordTally {
            spikes: mark(self.spikes.clone(), &[]),
            ..RecordTally::default()
        }
    }

    /// The report over the records added to `tally`.
    pub fn report_tally(self, config: &RunConfig, tally: RecordTally) -> HarnessReport {
        let mut report = report_from(config, &tally, self.wall_s, self.cpu_s);
        if let Some(d) = &self.lag {
            if d.p99 > LAG_BOUND_MS {
                report.reasons.push(format!(
                    "bakeoff's event loop woke up to {:.1} ms late (p99 {:.1} ms): timestamps may be late by as much",
                    d.max, d.p99
                ));
            } else if d.max > MAX_LAG_BOUND_MS {
                report.reasons.push(format!(
                    "bakeoff's event loop woke up to {:.1} ms late (worst wake-up; bound {MAX_LAG_BOUND_MS} ms): \
                     a timestamp may be late by as much",
                    d.max
                ));
            }
        }
        report.lag_spikes = tally.spikes;
        let spikes = &report.lag_spikes;
        if spikes.measured_requests > 0
            && spikes.marked_requests as f64 > MARKED_SHARE_BOUND * spikes.measured_requests as f64
        {
            report.reasons.push(format!(
                "{} (more than {:.0} %, enough to move a p99)",
                spikes.describe(),
                MARKED_SHARE_BOUND * 100.0
            ));
        }
        report.unreliable = !report.reasons.is_empty();
        report.runtime_lag_ms = self.lag;
        report
    }
}

/// The run's spikes with the measured requests (warm-ups and rollout excluded) that overlapped
/// one counted.
pub fn mark(spikes: Vec<(i64, i64, f64)>, records: &[RequestRecord]) -> LagSpikes {
    let mut out = LagSpikes {
        threshold_ms: LAG_SPIKE_MS,
        spikes,
        ..LagSpikes::default()
    };
    records.iter().for_each(|r| count_mark(&mut out, r));
    out
}

fn count_mark(spikes: &mut LagSpikes, r: &RequestRecord) {
    if !r.is_warmup {
        spikes.measured_requests += 1;
        if spikes.marks(r) {
            spikes.marked_requests += 1;
        }
    }
}

/// What the report needs of an execution's records, added one at a time.
#[derive(Default)]
pub struct RecordTally {
    waits: LogHistogram,
    streamed_tokens: u64,
    spikes: LagSpikes,
}

impl RecordTally {
    /// Adds one record (warm-ups are left out here).
    pub fn add(&mut self, r: &RequestRecord) {
        if r.is_warmup {
            return;
        }
        self.waits.record(r.client_queue_us as f64 / 1000.0);
        self.streamed_tokens += u64::from(r.output_tokens.unwrap_or(0));
        count_mark(&mut self.spikes, r);
    }

    /// Measured records added so far.
    pub fn measured(&self) -> u64 {
        self.spikes.measured_requests
    }
}

/// A lag spike: (start µs, end µs, lateness ms), wall clock.
type Spike = (i64, i64, f64);

/// Ticks every 5 ms on the run's runtime and records how late each tick fires, and when (wall
/// clock) every tick later than `LAG_SPIKE_MS` was due and fired.
struct LagProbe {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<(LogHistogram, Vec<Spike>)>,
}

const LAG_TICK: std::time::Duration = std::time::Duration::from_millis(5);

impl LagProbe {
    fn start() -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut late = LogHistogram::default();
            let mut spikes: Vec<Spike> = Vec::new();
            let mut next = tokio::time::Instant::now() + LAG_TICK;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => {}
                    _ = stopped.changed() => return (late, spikes),
                }
                let now = tokio::time::Instant::now();
                let late_ms = now.saturating_duration_since(next).as_secs_f64() * 1000.0;
                late.record(late_ms);
                if late_ms > LAG_SPIKE_MS {
                    let end = crate::wire::client::wall_clock_us();
                    let start = end - (late_ms * 1000.0) as i64;
                    let full = spikes.len() >= MAX_LAG_SPIKES;
                    match spikes.last_mut() {
                        // Full: the last interval grows to cover this one (over-marks, never under).
                        Some(last) if full || last.1 >= start => {
                            last.1 = last.1.max(end);
                            last.2 = last.2.max(late_ms);
                        }
                        _ => spikes.push((start, end, late_ms)),
                    }
                }
                next = (next + LAG_TICK).max(now + LAG_TICK / 5);
            }
        });
        LagProbe { stop, task }
    }

    async fn finish(self) -> (Option<Distribution>, Vec<Spike>) {
        let _ = self.stop.send(true);
        match self.task.await {
            Ok((late, spikes)) => (Distribution::from_histogram(&late), spikes),
            Err(_) => (None, Vec::new()),
        }
    }
}

/// Builds the report (pure apart from host facts; separate for tests).
pub fn report(config: &RunConfig, records: &[RequestRecord], wall_s: f64, cpu_s: Option<f64>) -> HarnessReport {
    let mut tally = RecordTally::default();
    records.iter().for_each(|r| tally.add(r));
    report_from(config, &tally, wall_s, cpu_s)
}

fn report_from(config: &RunConfig, tally: &RecordTally, wall_s: f64, cpu_s: Option<f64>) -> HarnessReport {
    let open_loop = config.load.is_open_loop();
    let streamed_tokens = tally.streamed_tokens;
    let waits = Distribution::from_histogram(&tally.waits);
    let cores = cores();
    let cpu_share = cpu_s.filter(|_| wall_s > 0.0).map(|c| c / (wall_s * f64::from(cores)));
    let mut reasons = Vec::new();
    if let Some(w) = &waits
        && w.p99 > LAG_BOUND_MS
    {
        reasons.push(if open_loop {
            format!(
                "p99 schedule lag {:.1} ms exceeds {LAG_BOUND_MS} ms: requests were sent later than the rate asked",
                w.p99
            )
        } else {
            format!(
                "p99 client queue wait {:.1} ms exceeds {LAG_BOUND_MS} ms: bakeoff could not keep the asked concurrency",
                w.p99
            )
        });
    }
    if let Some(share) = cpu_share
        && share > CPU_SHARE_BOUND
    {
        reasons.push(format!(
            "bakeoff used {:.0} % of all {cores} cores: a starved client timestamps late",
            share * 100.0
        ));
    }
    HarnessReport {
        bakeoff_version: crate::VERSION.to_string(),
        host: host_name(),
        cores,
        wall_s,
        cpu_s,
        cpu_share,
        streamed_tokens,
        cpu_s_per_million_tokens: cpu_s
            .filter(|_| streamed_tokens > 0)
            .map(|c| c / streamed_tokens as f64 * 1e6),
        open_loop,
        schedule_lag_ms: if open_loop { waits.clone() } else { None },
        client_queue_ms: if open_loop { None } else { waits },
        runtime_lag_ms: None,
        lag_bound_ms: LAG_BOUND_MS,
        unreliable: !reasons.is_empty(),
        reasons,
        lag_spikes: LagSpikes::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_busy_time_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 1000 40 3 2 1 0 0\ncpu0 50 2 25 500 20 1 1 0 0 0\nintr 1 2\n";
        // user + nice + system + irq + softirq + steal = 161 ticks.
        assert_eq!(busy_cpu_seconds(stat), Some(1.61));
        assert_eq!(busy_cpu_seconds("cpu  1 2 3\n"), None);
    }

    #[tokio::test]
    async fn the_lag_probe_sees_a_blocked_runtime() {
        let clock = HarnessClock::start();
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // Block this (current-thread) runtime for 40 ms: the probe's next tick is that late.
        std::thread::sleep(std::time::Duration::from_millis(40));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let report = clock.finish(&RunConfig::default(), &[]).await;
        let lag = report.runtime_lag_ms.expect("the probe ticked");
        assert!(lag.max >= 30.0, "{lag:?}");
        assert!(report.unreliable && report.reasons.iter().any(|r| r.contains("event loop")));
    }

    #[tokio::test]
    async fn the_worst_lag_flags_a_run_and_marks_the_requests_it_overlapped() {
        let clock = HarnessClock::start();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let before = crate::wire::client::wall_clock_us();
        // One 30 ms stall of this (current-thread) runtime.
        std::thread::sleep(std::time::Duration::from_millis(30));
        let after = crate::wire::client::wall_clock_us();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let request = |sent_at_us: i64, end_us: i64| RequestRecord {
            sent_at_us,
            end_us: Some(end_us).into(),
            ..RequestRecord::test_quality("c")
        };
        // Inside the stall, long before it, and one spanning it; a warm-up is not counted.
        let mut records = vec![
            request(before + 5_000, 10_000),
            request(before - 900_000, 1_000),
            request(before - 10_000, (after - before) + 20_000),
        ];
        records.push(RequestRecord {
            is_warmup: true,
            ..request(before, 10_000)
        });
        let report = clock.finish(&RunConfig::default(), &records).await;
        let spikes = &report.lag_spikes;
        assert!(!spikes.spikes.is_empty(), "{report:?}");
        assert_eq!((spikes.marked_requests, spikes.measured_requests), (2, 3));
        assert_eq!(
            spikes.describe(),
            "2 of 3 requests overlapped a lag spike > 5 ms; their timings are marked"
        );
        assert!(report.unreliable);
        assert!(
            report.reasons.iter().any(|r| r.contains("enough to move a p99")),
            "{:?}",
            report.reasons
        );
    }

    #[test]
    fn spikes_overlap_by_interval() {
        let s = LagSpikes {
            threshold_ms: 5.0,
            spikes: vec![(100, 200, 7.0), (500, 600, 9.0)],
            ..LagSpikes::default()
        };
        assert!(s.overlaps(150, 160) && s.overlaps(50, 100) && s.overlaps(550, 9_000));
        assert!(!s.overlaps(0, 99) && !s.overlaps(201, 499) && !s.overlaps(601, 700));
    }

    #[test]
    fn reads_cpu_times_from_a_stat_line() {
        let line = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 8 0 100 0 0";
        assert_eq!(stat_cpu_seconds(line), Some(3.0));
        assert_eq!(stat_cpu_seconds("garbage"), None);
    }

    #[test]
    fn a_page_threads_time_is_not_the_clients_while_it_runs_or_after_it_ends() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            return;
        }
        let pages = || threads_cpu_seconds(runtime::PAGE_THREAD_NAME) + runtime::ended_page_threads_cpu_seconds();
        let before = pages();
        let (burnt_tx, burnt) = std::sync::mpsc::channel();
        let (end, end_rx) = std::sync::mpsc::channel::<()>();
        let page = std::thread::Builder::new()
            .name(format!("{}-test", runtime::PAGE_THREAD_NAME))
            .spawn(move || {
                // 300 ms of its own CPU time, by its own clock, however fast the machine.
                let start = runtime::this_thread_cpu_ns().unwrap();
                let mut x = 0u64;
                while runtime::this_thread_cpu_ns().unwrap() < start + 300_000_000 {
                    for i in 0..10_000u64 {
                        x = x.wrapping_add(i * i);
                    }
                }
                std::hint::black_box(x);
                burnt_tx.send(()).unwrap();
                end_rx.recv().unwrap();
                runtime::page_thread_ending();
            })
            .unwrap();
        burnt.recv().unwrap();
        // /proc counts in 10 ms ticks.
        let running = pages() - before;
        end.send(()).unwrap();
        page.join().unwrap();
        let ended = pages() - before;
        assert!(running >= 0.25, "while it runs: {running} s");
        assert!(ended >= 0.25, "after it ended: {ended} s");
    }

    #[test]
    fn this_process_has_a_cpu_time_and_a_host() {
        if std::path::Path::new("/proc/self/stat").exists() {
            let a = cpu_seconds().unwrap();
            let mut x = 0u64;
            for i in 0..30_000_000u64 {
                x = x.wrapping_add(i * i);
            }
            std::hint::black_box(x);
            assert!(cpu_seconds().unwrap() >= a);
        }
        assert!(!host_name().is_empty());
    }
}
