//! The harness watching itself: bakeoff's own CPU time (Linux `/proc`, no extra crates), and the
//! run-level report that says whether its speed figures can be trusted.
use std::time::Instant;

use crate::domain::calibers::{HarnessReport, LagSpikes, MAX_LAG_SPIKES};
use crate::domain::histogram::LogHistogram;
use crate::domain::metrics::Distribution;
use crate::domain::run::{RequestRecord, RunConfig};
use crate::domain::self_check::{FigureShift, ShiftTally};
use crate::run::runtime;

/// p99 schedule lag (open loop) or client queue wait (closed loop) above this, in ms, flags a
/// run's speed figures unreliable: requests left later than the load asked for.
pub const LAG_BOUND_MS: f64 = 10.0;
/// A tick or a read later than this, ms, is a lag spike: the measured requests whose span
/// overlapped it are marked, and the timestamps inside it may be late (`domain::self_check`).
pub use crate::wire::read_lag::LAG_SPIKE_MS;

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

/// CPU seconds (user + system) of the whole process, excluded threads included: the kernel's
/// exact counter (ns), or `/proc`'s 10 ms ticks where that clock is missing.
pub fn process_cpu_seconds() -> Option<f64> {
    let mut cpu = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut cpu) } == 0 {
        return Some(cpu.tv_sec as f64 + cpu.tv_nsec as f64 / 1e9);
    }
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

/// The process's peak resident set since it started (`VmHWM` of `/proc/self/status`), bytes;
/// None where `/proc` is not available.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Started when a run starts; `finish` builds the report from the run's records.
pub struct HarnessClock {
    wall: Instant,
    cpu: Option<f64>,
    process_cpu: Option<f64>,
    lag: LagProbe,
}

impl HarnessClock {
    /// Must be called inside the runtime the run uses (it starts the lag probe there).
    pub fn start() -> Self {
        HarnessClock {
            wall: Instant::now(),
            cpu: cpu_seconds(),
            process_cpu: process_cpu_seconds(),
            lag: LagProbe::start(),
        }
    }

    /// A clock whose spikes are its ticker's alone: the read path's log is process-wide, and
    /// the unit tests of this module, which place records at exact times around a stall they
    /// make, run beside tests whose reads may be late on a busy machine.
    #[cfg(test)]
    fn start_ticker_only() -> Self {
        let mut clock = HarnessClock::start();
        clock.lag.reads_mark = u64::MAX;
        clock
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
        let since = |start: Option<f64>, now: Option<f64>| match (start, now) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        let cpu_s = since(self.cpu, cpu_seconds());
        let process_cpu_s = since(self.process_cpu, process_cpu_seconds());
        let (lag, spikes) = self.lag.finish().await;
        StoppedClock {
            wall_s,
            cpu_s,
            process_cpu_s,
            lag,
            spikes,
        }
    }
}

/// What a stopped `HarnessClock` measured, waiting for the records to report on.
pub struct StoppedClock {
    wall_s: f64,
    cpu_s: Option<f64>,
    process_cpu_s: Option<f64>,
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
        report.process_cpu_s = self.process_cpu_s;
        report.peak_rss_bytes = peak_rss_bytes();
        // Lag alone flags nothing: only a reported percentile the lag could have moved beyond
        // its bound does (`domain::self_check`).
        report.figure_shifts = tally.shifts.shifts();
        report.reasons.extend(
            report
                .figure_shifts
                .iter()
                .filter(|s| s.exceeds_bound())
                .map(FigureShift::describe),
        );
        report.lag_spikes = tally.spikes;
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
    shifts: ShiftTally,
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
        self.shifts.add(&self.spikes, r);
    }

    /// Measured records added so far.
    pub fn measured(&self) -> u64 {
        self.spikes.measured_requests
    }
}

/// A lag spike: (start µs, end µs, lateness ms), wall clock.
type Spike = (i64, i64, f64);

/// Ticks every `LAG_TICK` on the run's runtime and records how late each tick fires; for every
/// tick later than `LAG_SPIKE_MS`, the interval bakeoff may have stalled in: from the previous
/// tick's wake-up (the last moment it was known to be on time) to this one.
struct LagProbe {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<(LogHistogram, Vec<Spike>)>,
    /// Where the read path's log of late reads was at the start (`wire::read_lag`).
    reads_mark: u64,
    started_us: i64,
}

/// The probe's period. Each tick may wake an idle runtime thread (~40 µs of CPU here: at 20 ms
/// the ticker was ~2 ms of CPU per second, the whole gap to vllm-bench's client at c = 1), and
/// the measured path needs no tick: a read bakeoff got to late is a spike of its own
/// (`wire::read_lag`). The ticker is the backstop for stalls no stamped read saw (one that
/// merged several chunks into one read): any longer than `LAG_SPIKE_MS` + 50 ms is seen, a
/// shorter one when it covers a tick. A longer period also widens a spike's interval back to
/// the last on-time tick, which `domain::self_check` counts against the figures inside it.
const LAG_TICK: std::time::Duration = std::time::Duration::from_millis(50);

impl LagProbe {
    fn start() -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut late = LogHistogram::default();
            let mut spikes: Vec<Spike> = Vec::new();
            let mut next = tokio::time::Instant::now() + LAG_TICK;
            let mut woke_us = crate::wire::client::wall_clock_us();
            // One timer, re-armed each tick (not a new one per tick).
            let sleep = tokio::time::sleep_until(next);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    biased;
                    _ = stopped.changed() => return (late, spikes),
                    () = &mut sleep => {}
                }
                let now = tokio::time::Instant::now();
                let late_ms = now.saturating_duration_since(next).as_secs_f64() * 1000.0;
                late.record(late_ms);
                let now_us = crate::wire::client::wall_clock_us();
                if late_ms > LAG_SPIKE_MS {
                    let full = spikes.len() >= MAX_LAG_SPIKES;
                    match spikes.last_mut() {
                        // Back to back with the last: one interval. A full list grows its last
                        // interval over this one (over-marks, never under).
                        Some(last) if full || last.1 >= woke_us => {
                            last.1 = last.1.max(now_us);
                            last.2 = last.2.max(late_ms);
                        }
                        _ => spikes.push((woke_us, now_us, late_ms)),
                    }
                }
                woke_us = now_us;
                next = (next + LAG_TICK).max(now + LAG_TICK / 5);
                sleep.as_mut().reset(next);
            }
        });
        LagProbe {
            stop,
            task,
            reads_mark: crate::wire::read_lag::mark(),
            started_us: crate::wire::client::wall_clock_us(),
        }
    }

    /// The ticker's lateness, and its spikes merged with the late reads of the same time.
    async fn finish(self) -> (Option<Distribution>, Vec<Spike>) {
        let _ = self.stop.send(true);
        let reads = crate::wire::read_lag::since(self.reads_mark, self.started_us);
        match self.task.await {
            Ok((late, ticks)) => (Distribution::from_histogram(&late), merge_spikes(ticks, reads)),
            Err(_) => (None, merge_spikes(Vec::new(), reads)),
        }
    }
}

/// The spikes of both sources as one list in time order, overlapping intervals merged (the worst
/// lateness kept), at most `MAX_LAG_SPIKES` (the last widened over the rest: over-marks, never
/// under).
fn merge_spikes(mut spikes: Vec<Spike>, more: Vec<Spike>) -> Vec<Spike> {
    spikes.extend(more);
    spikes.sort_by_key(|s| s.0);
    let mut out: Vec<Spike> = Vec::with_capacity(spikes.len().min(MAX_LAG_SPIKES));
    for (start, end, late) in spikes {
        let full = out.len() >= MAX_LAG_SPIKES;
        match out.last_mut() {
            Some(last) if full || last.1 >= start => {
                last.1 = last.1.max(end);
                last.2 = last.2.max(late);
            }
            _ => out.push((start, end, late)),
        }
    }
    out
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
    // A busy client is not flagged for being busy: if it timestamped late, its lag spikes say
    // so, and `self_check` says which figure that moved.
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
        figure_shifts: Vec::new(),
        process_cpu_s: None,
        peak_rss_bytes: None,
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
    async fn the_lag_probe_sees_a_blocked_runtime_which_alone_flags_nothing() {
        let clock = HarnessClock::start_ticker_only();
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // Block this (current-thread) runtime for a period and 30 ms: a tick falls due inside.
        std::thread::sleep(STALL);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let report = clock.finish(&RunConfig::default(), &[]).await;
        // The tick fell due at most one period after the block began: it is ≥ 30 ms late.
        let lag = report.runtime_lag_ms.clone().expect("the probe ticked");
        assert!(lag.max >= 29.0, "{lag:?}");
        assert!(!report.lag_spikes.spikes.is_empty(), "{report:?}");
        // No figure was measured, so none was moved: nothing to flag.
        assert!(!report.unreliable, "{:?}", report.reasons);
    }

    /// Longer than the probe's period, so a tick always falls due inside.
    const STALL: std::time::Duration = LAG_TICK.checked_add(std::time::Duration::from_millis(30)).unwrap();

    /// Blocks this (current-thread) runtime for `STALL` after 20 ms of ticks; returns the wall
    /// clock just before and after the stall.
    fn stall() -> (i64, i64) {
        let before = crate::wire::client::wall_clock_us();
        std::thread::sleep(STALL);
        (before, crate::wire::client::wall_clock_us())
    }

    fn request(sent_at_us: i64, end_offset_us: i64) -> RequestRecord {
        RequestRecord {
            sent_at_us,
            end_us: Some(end_offset_us).into(),
            ..RequestRecord::test_quality("c")
        }
    }

    #[tokio::test]
    async fn a_stall_over_the_requests_ends_flags_e2e_and_says_by_how_much() {
        let clock = HarnessClock::start_ticker_only();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let (before, _after) = stall();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // Sent 100 ms before the stall, ended inside it: each E2E may read up to the stall long.
        let sent = before - 100_000;
        let mut records: Vec<RequestRecord> = (0..3).map(|i| request(sent, 120_000 + i * 1_000)).collect();
        // A warm-up is neither checked nor counted.
        records.push(RequestRecord {
            is_warmup: true,
            ..request(sent, 120_000)
        });
        let report = clock.finish(&RunConfig::default(), &records).await;
        assert_eq!(
            (report.lag_spikes.marked_requests, report.lag_spikes.measured_requests),
            (3, 3)
        );
        assert!(report.unreliable, "{report:?}");
        let p50 = report
            .figure_shifts
            .iter()
            .find(|s| s.figure == "E2E p50")
            .expect("E2E p50 checked");
        assert!(p50.exceeds_bound() && p50.shift_ms >= 15.0, "{p50:?}");
        assert!(
            report.reasons.iter().any(|r| r.starts_with("E2E p50 ")),
            "{:?}",
            report.reasons
        );
    }

    #[tokio::test]
    async fn a_stall_no_timestamp_fell_in_marks_the_request_but_flags_nothing() {
        let clock = HarnessClock::start_ticker_only();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let (before, after) = stall();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // Three requests over long before the stall, and one whose send and end straddle it.
        let mut records: Vec<RequestRecord> = (0..3).map(|i| request(before - 900_000 - i, 1_000)).collect();
        records.push(request(before - 100_000, (after - before) + 150_000));
        let report = clock.finish(&RunConfig::default(), &records).await;
        assert_eq!(
            (report.lag_spikes.marked_requests, report.lag_spikes.measured_requests),
            (1, 4)
        );
        assert_eq!(
            report.lag_spikes.describe(),
            "1 of 4 requests overlapped a lag spike > 5 ms; their timings are marked"
        );
        assert!(!report.unreliable, "{:?}", report.reasons);
    }

    #[test]
    fn the_tickers_and_the_reads_spikes_merge_in_time_order() {
        let ticks = vec![(100, 200, 7.0), (500, 600, 9.0)];
        let reads = vec![(150, 260, 12.0), (300, 310, 6.0), (590, 700, 5.5)];
        assert_eq!(
            merge_spikes(ticks, reads),
            vec![(100, 260, 12.0), (300, 310, 6.0), (500, 700, 9.0)]
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
            // The whole process, by the kernel's exact counter, is never less than the client's.
            assert!(process_cpu_seconds().unwrap() + 0.011 >= cpu_seconds().unwrap());
            // 64 MiB touched raises the high-water mark by about that much.
            let before = peak_rss_bytes().unwrap();
            let block = vec![1u8; 64 << 20];
            std::hint::black_box(&block);
            assert!(peak_rss_bytes().unwrap() >= before.max(60 << 20), "{before}");
        }
        assert!(!host_name().is_empty());
    }
}
