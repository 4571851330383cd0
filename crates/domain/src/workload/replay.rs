//! Replay: a workload sent with its recorded arrivals (scaled by a speed-up) and lengths, its
//! prompts synthetic text whose prefix blocks are the same text wherever the block ids repeat,
//! so a prefix cache sees the reuse production saw. The schedule depends only on the workload
//! and the speed, so every candidate gets the identical one; the text only on the seed.
use serde::{Deserialize, Serialize};

use super::{WorkloadFile, WorkloadRequest};
use crate::metrics::Distribution;

/// Fastest speed-up accepted.
pub const MAX_SPEED: f64 = 1000.0;

/// A piece of a replayed prompt: `tokens` tokens of text derived from `seed` alone, so equal
/// seeds give equal text (a shorter piece is a prefix of a longer one of the same seed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub seed: u64,
    pub tokens: u32,
}

/// When request `i` is due, in milliseconds after the replay's start, at `speed`×.
pub fn due_ms(request: &WorkloadRequest, speed: f64) -> f64 {
    request.at_ms / speed.max(f64::MIN_POSITIVE)
}

/// The pieces of request `index`'s prompt: one per block (seeded by the block id and the
/// replay's `seed`), then the tokens no block covers (seeded by the request, so unique).
pub fn pieces(w: &WorkloadFile, index: usize, seed: u64) -> Vec<Piece> {
    let r = &w.requests[index];
    let block = w.header.block_tokens;
    let mut left = r.input_tokens;
    let mut out = Vec::with_capacity(r.blocks.len() + 1);
    for &b in &r.blocks {
        let tokens = left.min(block);
        out.push(Piece {
            seed: mix(seed, b),
            tokens,
        });
        left -= tokens;
    }
    if left > 0 {
        // The high bit keeps a request's own text apart from every block's.
        out.push(Piece {
            seed: mix(seed ^ (1 << 63), index as u64),
            tokens: left,
        });
    }
    out
}

fn mix(seed: u64, x: u64) -> u64 {
    let mut r = crate::stats::SplitMix64::new(seed ^ x.wrapping_mul(0xD1B5_4A32_D192_ED03));
    r.next_u64()
}

/// How closely a replay followed its workload, measured and shown on the run page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fidelity {
    pub requests: usize,
    pub sent: usize,
    /// Send lag (sent − due), milliseconds.
    pub lag_ms: Option<Distribution>,
    /// Requests whose prompt was exactly the recorded input length (counted with o200k).
    pub input_exact: usize,
    /// Requests asked for exactly the recorded output length (`max_tokens`).
    pub output_exact: usize,
    /// Requests whose answer had exactly the recorded length (server's count).
    pub output_received_exact: usize,
}

/// One request as sent: offsets in milliseconds from the replay's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sent {
    pub index: usize,
    pub sent_ms: f64,
    pub input_tokens: u32,
    pub max_tokens: u32,
    pub output_tokens: Option<u32>,
}

impl Fidelity {
    pub fn of(w: &WorkloadFile, speed: f64, sent: &[Sent]) -> Fidelity {
        let recorded = |s: &Sent| &w.requests[s.index];
        Fidelity {
            requests: w.requests.len(),
            sent: sent.len(),
            lag_ms: Distribution::of(sent.iter().map(|s| s.sent_ms - due_ms(recorded(s), speed))),
            input_exact: sent
                .iter()
                .filter(|s| s.input_tokens == recorded(s).input_tokens)
                .count(),
            output_exact: sent
                .iter()
                .filter(|s| s.max_tokens == recorded(s).output_tokens)
                .count(),
            output_received_exact: sent
                .iter()
                .filter(|s| s.output_tokens == Some(recorded(s).output_tokens))
                .count(),
        }
    }
}

/// Send lag (p99, milliseconds) above which a replay level's speed figures are marked "replay
/// fell behind": the same bound the harness holds an open loop's schedule to.
pub const REPLAY_LAG_BOUND_MS: f64 = 10.0;

/// The case id of workload request `index` in a replay level's records (`replay-000042`).
pub fn replay_case_id(index: usize) -> String {
    format!("replay-{index:06}")
}

/// The workload request a replay record's case id names, if it is one.
pub fn replay_index(case_id: &str) -> Option<usize> {
    case_id.strip_prefix("replay-")?.parse().ok()
}

/// One workload request as a replay run level sent it to one candidate (stored per request,
/// beside its ordinary request record): what the schedule asked and what was done.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReplaySend {
    pub candidate_id: i64,
    pub request_index: u32,
    /// 0: sent on the replay's first schedule; n: after the n-th restart, on a schedule
    /// re-anchored at the resume (its lag is against that).
    pub segment: u32,
    /// When it was due and when it was written, microseconds after the replay's start.
    pub due_offset_us: i64,
    pub sent_offset_us: i64,
    pub input_tokens_recorded: u32,
    /// The prompt's o200k length as sent.
    pub input_tokens_sent: u32,
    pub output_tokens_recorded: u32,
    /// `max_tokens` as sent.
    pub max_tokens_sent: u32,
}

impl ReplaySend {
    /// Sent − due, milliseconds.
    pub fn lag_ms(&self) -> f64 {
        (self.sent_offset_us - self.due_offset_us) as f64 / 1000.0
    }

    /// Sent with exactly the recorded input length and `max_tokens` the recorded output.
    pub fn lengths_exact(&self) -> bool {
        self.input_tokens_sent == self.input_tokens_recorded && self.max_tokens_sent == self.output_tokens_recorded
    }
}

/// One candidate's replay level as the run page and scorecard show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySummary {
    pub candidate_id: i64,
    /// Requests in the workload, and those sent.
    pub requests: usize,
    pub sent: usize,
    pub lag_ms: Option<Distribution>,
    /// Requests sent with exactly the recorded input length and output `max_tokens`.
    pub lengths_exact: usize,
    /// Requests sent after a restart (on a re-anchored schedule).
    pub after_restart: usize,
}

impl ReplaySummary {
    /// `sends` of one candidate (any order) out of a workload of `requests`.
    pub fn of(candidate_id: i64, requests: usize, sends: &[ReplaySend]) -> ReplaySummary {
        let mine = || sends.iter().filter(|s| s.candidate_id == candidate_id);
        ReplaySummary {
            candidate_id,
            requests,
            sent: mine().count(),
            lag_ms: Distribution::of(mine().map(ReplaySend::lag_ms)),
            lengths_exact: mine().filter(|s| s.lengths_exact()).count(),
            after_restart: mine().filter(|s| s.segment > 0).count(),
        }
    }

    /// Why the replay level's speed figures are marked, if they are: the send lag's p99 above
    /// [`REPLAY_LAG_BOUND_MS`] ("replay fell behind"), or lengths not sent as recorded.
    pub fn marks(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(lag) = self.lag_ms.as_ref().filter(|l| l.p99 > REPLAY_LAG_BOUND_MS) {
            out.push(format!(
                "replay fell behind: send lag p99 {:.2} ms is above {REPLAY_LAG_BOUND_MS} ms, so requests arrived \
                 later and more bunched than recorded",
                lag.p99
            ));
        }
        if self.lengths_exact < self.sent {
            out.push(format!(
                "{} of {} requests were not sent with their recorded lengths",
                self.sent - self.lengths_exact,
                self.sent
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_follow_the_blocks_and_repeat_where_they_do() {
        let w = WorkloadFile::parse(
            "w.jsonl",
            r#"{"bakeoff_workload":1,"name":"w","source":"mooncake","block_tokens":4}
{"at_ms":0,"input_tokens":10,"output_tokens":3,"blocks":[0,1]}
{"at_ms":10,"input_tokens":7,"output_tokens":5,"blocks":[0,2]}
"#,
        )
        .unwrap();
        let a = pieces(&w, 0, 1);
        let b = pieces(&w, 1, 1);
        assert_eq!(a.iter().map(|p| p.tokens).collect::<Vec<_>>(), [4, 4, 2]);
        assert_eq!(b.iter().map(|p| p.tokens).collect::<Vec<_>>(), [4, 3]);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1].seed, b[1].seed);
        assert_ne!(pieces(&w, 0, 2)[0].seed, a[0].seed, "the seed changes the text");
        assert_eq!(due_ms(&w.requests[1], 2.0), 5.0);
        let f = Fidelity::of(
            &w,
            2.0,
            &[
                Sent {
                    index: 0,
                    sent_ms: 0.5,
                    input_tokens: 10,
                    max_tokens: 3,
                    output_tokens: Some(3),
                },
                Sent {
                    index: 1,
                    sent_ms: 5.5,
                    input_tokens: 7,
                    max_tokens: 5,
                    output_tokens: Some(4),
                },
            ],
        );
        assert_eq!((f.input_exact, f.output_exact, f.output_received_exact), (2, 2, 1));
        assert_eq!(f.lag_ms.unwrap().p50, 0.5);
    }

    #[test]
    fn a_replay_summary_counts_lag_and_lengths_and_marks_a_late_replay() {
        let send = |i: u32, lag_us: i64, input_sent: u32, segment: u32| ReplaySend {
            candidate_id: 7,
            request_index: i,
            segment,
            due_offset_us: i64::from(i) * 1000,
            sent_offset_us: i64::from(i) * 1000 + lag_us,
            input_tokens_recorded: 10,
            input_tokens_sent: input_sent,
            output_tokens_recorded: 5,
            max_tokens_sent: 5,
        };
        let mut other = send(0, 0, 10, 0);
        other.candidate_id = 8;
        let sends = [send(0, 200, 10, 0), send(1, 400, 10, 0), send(2, 300, 9, 1), other];
        let s = ReplaySummary::of(7, 4, &sends);
        assert_eq!((s.requests, s.sent, s.lengths_exact, s.after_restart), (4, 3, 2, 1));
        let lag = s.lag_ms.clone().unwrap();
        assert_eq!((lag.p50, lag.max), (0.3, 0.4));
        assert_eq!(s.marks(), ["1 of 3 requests were not sent with their recorded lengths"]);
        let late = ReplaySummary::of(7, 1, &[send(0, 50_000, 10, 0)]);
        assert!(late.marks()[0].starts_with("replay fell behind"), "{:?}", late.marks());
        assert_eq!(replay_index(&replay_case_id(42)), Some(42));
        assert_eq!(replay_index("q-1"), None);
    }
}
