//! The measurement runtime, the "embedded worker" of DESIGN.md ("Measurement is isolated"): a
//! multi-thread tokio runtime of its own, on OS threads named `bakeoff-engine…`, that runs
//! every run the `Runner` executes — load generation, every request's clock, the record writer
//! and the harness's lag probe. Page rendering, grading for pages, exports and the web server
//! run on the caller's runtime (`bakeoff serve`'s), so no page ever holds a thread a stream's
//! timestamps depend on. The two sides talk only through handles and channels (the runner's
//! state, `watch`/`oneshot` channels, the store).
//!
//! One runtime per process, built on first use and kept for the process's life: connections a
//! run opens (to candidates, to the database) stay bound to a reactor that never goes away, so
//! a runner dropped by its owner never strands them.
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::runtime::{Builder, Handle, Runtime};

/// The name of every thread of the measurement runtime (workers and its blocking pool).
pub const THREAD_NAME: &str = "bakeoff-engine";

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Worker threads: one per core, at least two, so one slow task (a large batch handed to the
/// writer, a long grading step awaiting the blocking pool) never leaves the streams without a
/// thread to timestamp on.
pub fn worker_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).max(2)
}

/// The measurement runtime's handle (built on first call).
pub fn handle() -> Handle {
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .worker_threads(worker_threads())
                .thread_name(THREAD_NAME)
                .enable_all()
                .build()
                // Only fails when the OS refuses threads: nothing can be measured then.
                .expect("starting the measurement runtime (bakeoff-engine threads)")
        })
        .handle()
        .clone()
}

/// How far below the measurement runtime the threads serving pages run (a nice increment):
/// with both wanting a core, a waking `bakeoff-engine` thread takes it at once instead of
/// waiting out a page's time slice, and the page gets about a tenth of a contended core's time.
pub const PAGE_THREAD_NICE: i32 = 10;

/// The lowest priority (highest nice value) Linux has.
pub const MAX_NICE: i32 = 19;

/// Sets the calling thread [`PAGE_THREAD_NICE`] below the process's main thread (`bakeoff
/// serve` calls it on each thread of the runtime serving pages, as it starts: one started by
/// another such thread inherits the lowered value, so it is set, not added to). On Linux a
/// thread's nice value is its own and a thread it starts inherits it, so the measurement
/// runtime is built first (from the main thread); an unprivileged thread can lower its priority
/// but never raise it again.
pub fn lower_this_thread_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: getpid, gettid, getpriority and setpriority only read the main thread's nice value
    // and read or set the calling thread's; a refusal (errno) leaves it as it was, harmlessly.
    unsafe {
        let main = libc::getpriority(libc::PRIO_PROCESS, libc::getpid() as libc::id_t);
        let lowered = main.saturating_add(PAGE_THREAD_NICE).min(MAX_NICE);
        let tid = libc::gettid() as libc::id_t;
        if libc::getpriority(libc::PRIO_PROCESS, tid) < lowered {
            libc::setpriority(libc::PRIO_PROCESS, tid, lowered);
        }
    }
}

/// The name of every thread of the runtime serving pages in `bakeoff serve` and `bakeoff
/// worker` (its workers and its blocking pool): the harness does not count their CPU time as
/// the client's (`harness::cpu_seconds`).
pub const PAGE_THREAD_NAME: &str = "bakeoff-pages";

/// CPU time (ns) of the page threads that have ended: a thread's time stays in the process's
/// total when it ends, but no longer under its name.
static ENDED_PAGE_THREADS_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// CPU seconds of the page threads that have ended (see [`page_thread_ending`]).
pub fn ended_page_threads_cpu_seconds() -> f64 {
    ENDED_PAGE_THREADS_CPU_NS.load(Ordering::Relaxed) as f64 / 1e9
}

/// Called by each page thread as it ends (the runtime's `on_thread_stop`): its CPU time moves
/// from its name to [`ended_page_threads_cpu_seconds`]. It is renamed first, so its time is
/// never subtracted twice; for the instant between, the harness is charged with it (never the
/// other way).
pub fn page_thread_ending() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_NAME) renames the calling thread from a NUL-terminated string of at
    // most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"bakeoff-ended".as_ptr());
    }
    if let Some(ns) = this_thread_cpu_ns() {
        ENDED_PAGE_THREADS_CPU_NS.fetch_add(ns, Ordering::Relaxed);
    }
}

/// CPU time (ns) the calling thread has used.
pub fn this_thread_cpu_ns() -> Option<u64> {
    let mut cpu = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut cpu) };
    (read == 0).then(|| (cpu.tv_sec as u64).saturating_mul(1_000_000_000) + cpu.tv_nsec as u64)
}

/// Whether the calling thread is one of the measurement runtime's.
pub fn on_measurement_thread() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with(THREAD_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_spawned_there_runs_on_its_own_named_threads() {
        assert!(
            !on_measurement_thread(),
            "a test's runtime is not the measurement runtime"
        );
        let (on_engine, nested) = handle()
            .spawn(async {
                // What a run spawns from inside stays on the measurement runtime.
                let nested = tokio::spawn(async { on_measurement_thread() }).await.unwrap();
                (on_measurement_thread(), nested)
            })
            .await
            .unwrap();
        assert!(on_engine && nested);
        assert!(worker_threads() >= 2);
    }
}
