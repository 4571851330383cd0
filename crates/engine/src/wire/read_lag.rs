//! Lag seen where it matters, for free: a kernel-stamped read tells how long its bytes waited in
//! the socket before bakeoff got to them. A read that waited longer than the spike threshold
//! is logged as a lag spike — from its bytes' arrival to the read — for the harness (`run::harness`), which merges these with its ticker's.
//! Unlike a ticker this costs no wake-up: it is one subtraction per read, and a lock only for a
//! read that was late.
use std::collections::VecDeque;
use std::sync::Mutex;

/// A read whose bytes waited longer than this, ms, is a lag spike; so is a tick of the
/// harness's ticker later than this.
pub const LAG_SPIKE_MS: f64 = 5.0;
/// Spikes kept for the probes to collect (oldest dropped first); a probe that finds some of
/// its own dropped widens its interval over them (`since`).
const KEPT: usize = 4096;

/// The spikes with their sequence numbers, and the next number.
struct Log {
    spikes: VecDeque<(u64, (i64, i64, f64))>,
    next: u64,
}

static LOG: Mutex<Log> = Mutex::new(Log {
    spikes: VecDeque::new(),
    next: 0,
});

fn log() -> std::sync::MutexGuard<'static, Log> {
    LOG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Called by a measured read: its bytes arrived at `stamped_us` (the kernel's receive time) and
/// bakeoff read them at `now_us`; the spike is that wait, when bakeoff was demonstrably late.
pub fn note(stamped_us: i64, now_us: i64) {
    let late_ms = (now_us - stamped_us) as f64 / 1000.0;
    if late_ms <= LAG_SPIKE_MS {
        return;
    }
    let mut log = log();
    if log.spikes.len() >= KEPT {
        log.spikes.pop_front();
    }
    let seq = log.next;
    log.spikes.push_back((seq, (stamped_us, now_us, late_ms)));
    log.next += 1;
}

/// Where the log is now: a probe starting remembers it, and `since` gives what came after.
pub fn mark() -> u64 {
    log().next
}

/// The spikes logged since `mark`, in time order of their end. When some were dropped before
/// being collected, the first one kept is widened back to `from_us` (over-marks, never under).
pub fn since(mark: u64, from_us: i64) -> Vec<(i64, i64, f64)> {
    let log = log();
    let mut out: Vec<(i64, i64, f64)> = log.spikes.iter().filter(|(s, _)| *s >= mark).map(|(_, s)| *s).collect();
    let dropped = log.spikes.front().is_some_and(|(first, _)| *first > mark);
    if dropped && let Some(first) = out.first_mut() {
        first.0 = first.0.min(from_us);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_late_reads_are_logged_and_a_probe_sees_those_after_its_mark() {
        let start = mark();
        note(2_000, 4_000); // waited 2 ms: not a spike
        note(20_000, 31_000); // waited 11 ms since its stamp
        let spikes = since(start, 0);
        // Other tests of this process may log too: find ours.
        assert!(spikes.contains(&(20_000, 31_000, 11.0)), "{spikes:?}");
        assert!(!spikes.iter().any(|s| s.0 == 2_000), "{spikes:?}");
        assert!(since(mark(), 0).iter().all(|s| s.0 != 20_000));
    }
}
