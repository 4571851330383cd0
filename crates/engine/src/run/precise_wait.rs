//! Waiting until an instant to within a fraction of a millisecond, without spinning: what a
//! conversation's think time needs (issue 46: the wait kept within 1 ms of the schedule at p99).
//!
//! tokio's timer wheel ticks in whole milliseconds and rounds a deadline up to the next tick,
//! so `sleep_until` wakes up to a millisecond late, plus the runtime's own latency. Spinning (or
//! yielding in a loop) through the last millisecond is precise on an idle machine but burns a
//! worker thread per waiting user; under load those spins take the very CPU the replies, the
//! record writer and the server need, and every wait ends later. Here the coarse part of a wait
//! is still tokio's sleep (to [`COARSE_UNTIL`] before the instant), and the rest is handed to
//! one OS thread (`bakeoff-timer`) that sleeps on a condition variable until the earliest
//! instant asked for — the kernel's high-resolution timer, whose slack is tens of microseconds —
//! and wakes each waiter at its instant (its timer slack set to 1 µs on Linux). A waiter woken a
//! hair early yields for the microseconds left. The thread's CPU is a few wake-ups per wait,
//! counted as bakeoff's own.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long before its instant a wait leaves tokio's millisecond timer for the precise one.
pub const COARSE_UNTIL: Duration = Duration::from_millis(2);

/// Waits until `deadline`: tokio's timer for most of it, the precise timer for the last
/// [`COARSE_UNTIL`]. Cancel-safe (dropped, it just stops waiting).
pub async fn wait_until(deadline: Instant) {
    if let Some(early) = deadline.checked_sub(COARSE_UNTIL)
        && Instant::now() < early
    {
        tokio::time::sleep_until(early).await;
    }
    if Instant::now() < deadline {
        let woken = timer().wake_at(deadline.into_std());
        // The timer thread never drops a waiter unwoken; if it is gone, the loop below waits.
        let _ = woken.await;
    }
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
}

/// One waiter: its instant, an order among equal instants, and whom to tell.
struct Waiter {
    at: std::time::Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Waiter {}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
struct Queue {
    waiters: BinaryHeap<Reverse<Waiter>>,
    next_seq: u64,
}

/// The process's precise timer: its queue and the thread that serves it.
struct Timer {
    queue: Mutex<Queue>,
    changed: Condvar,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        }));
        // Without its thread every wait still ends (by yielding), only less precisely.
        let _ = std::thread::Builder::new()
            .name("bakeoff-timer".into())
            .spawn(move || timer.serve());
        timer
    })
}

impl Timer {
    /// A receiver told at `at` (or at once when the thread is gone).
    fn wake_at(&self, at: std::time::Instant) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let seq = q.next_seq;
        q.next_seq += 1;
        let earliest = q.waiters.peek().is_none_or(|Reverse(w)| at < w.at);
        q.waiters.push(Reverse(Waiter { at, seq, tx }));
        drop(q);
        if earliest {
            self.changed.notify_one();
        }
        rx
    }

    /// Wakes every waiter whose instant has come, then sleeps until the next one's (or a new
    /// earlier one's) — forever.
    fn serve(&self) {
        // Linux lets a sleeping thread's timer fire up to its "slack" late (50 µs by default) to
        // batch wake-ups; this thread's whole point is the instant, so it asks for 1 µs.
        #[cfg(target_os = "linux")]
        // SAFETY: PR_SET_TIMERSLACK only sets the calling thread's timer slack; a refusal leaves it.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = std::time::Instant::now();
            while q.waiters.peek().is_some_and(|Reverse(w)| w.at <= now) {
                if let Some(Reverse(w)) = q.waiters.pop() {
                    // A waiter that stopped waiting (cancelled) has dropped its receiver.
                    let _ = w.tx.send(());
                }
            }
            q = match q.waiters.peek().map(|Reverse(w)| w.at - now) {
                None => self.changed.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(left) => self.changed.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_never_end_early_and_many_can_wait_at_once() {
        let start = Instant::now();
        let waits: Vec<_> = (0..40u64)
            .map(|i| {
                // Some shorter than the coarse part, some longer; out of order.
                let at = start + Duration::from_micros((i * 7919) % 6000 + 100);
                tokio::spawn(async move {
                    wait_until(at).await;
                    Instant::now() >= at
                })
            })
            .collect();
        for w in waits {
            assert!(w.await.unwrap(), "a wait ended before its instant");
        }
        // A cancelled wait leaves nothing behind that stops the next one.
        let dropped = tokio::time::timeout(Duration::from_micros(50), wait_until(Instant::now() + COARSE_UNTIL));
        let _ = dropped.await;
        let at = Instant::now() + Duration::from_millis(1);
        wait_until(at).await;
        assert!(Instant::now() >= at);
    }
}
