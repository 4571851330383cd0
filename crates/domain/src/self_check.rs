//! The harness's self-check: how far bakeoff's own lateness could have moved each reported
//! percentile, so a run is flagged only when that is more than the figure's bound.
//!
//! The event loop's lag spikes (`LagSpikes`) are intervals in which bakeoff may have stalled:
//! from its last on-time wake-up to the late one. A timestamp taken inside such an interval may
//! be late by up to the time since the interval's start — a read the kernel stamped is late only
//! when the stall merged several packets into one read, an unstamped one whenever bakeoff took
//! it — and a timestamp outside every interval is not moved by the harness at all. So each
//! request's TTFT, E2E and ITL have a range they truly lie in; each percentile is computed once
//! from the reported values and once from each end of those ranges, and the largest difference
//! is how far the harness could have moved it. Overlapping a spike is not enough: the flag fires
//! when that difference is above `max(SHIFT_BOUND_MS, SHIFT_BOUND_SHARE × the figure)`.
use serde::{Deserialize, Serialize};

use crate::calibers::LagSpikes;
use crate::histogram::LogHistogram;
use crate::run::RequestRecord;

/// A percentile moved by less than this (ms) is within bound whatever its size: the timer
/// resolution of the lag probe and the TTFT error bakeoff holds when calibrated.
pub const SHIFT_BOUND_MS: f64 = 1.0;
/// …or by less than this share of itself.
pub const SHIFT_BOUND_SHARE: f64 = 0.01;
/// A timestamp taken this long (µs) after a spike ended is still counted inside it: an unstamped
/// read is timed when bakeoff gets to it, just after the stall.
const AFTER_SPIKE_US: i64 = 1_000;
/// The percentiles a run reports and the check covers.
const PERCENTILES: [(&str, f64); 3] = [("p50", 0.50), ("p90", 0.90), ("p99", 0.99)];

/// How far the harness's own delay could have moved one reported percentile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FigureShift {
    /// e.g. `TTFT p99`.
    pub figure: String,
    /// The percentile as reported, ms.
    pub reported_ms: f64,
    /// The most the harness's lateness could have moved it, ms (either way).
    pub shift_ms: f64,
    /// Its bound: `max(SHIFT_BOUND_MS, SHIFT_BOUND_SHARE × reported_ms)`.
    pub bound_ms: f64,
}

impl FigureShift {
    pub fn exceeds_bound(&self) -> bool {
        self.shift_ms > self.bound_ms
    }

    /// "TTFT p99 61.2 ms: bakeoff's own lag could have moved it by 9.8 ms (bound 1 ms)".
    pub fn describe(&self) -> String {
        format!(
            "{} {} ms: bakeoff's own lag could have moved it by {} ms (bound {} ms)",
            self.figure,
            crate::format::significant_trimmed(self.reported_ms),
            crate::format::significant_trimmed(self.shift_ms),
            crate::format::significant_trimmed(self.bound_ms)
        )
    }
}

/// One figure's values as reported and at both ends of the range the harness's lateness leaves
/// them in. Values no spike touched are kept once (`unmoved`), so a long run with a few spikes
/// costs one histogram entry per value, not three.
#[derive(Default)]
struct Ranges {
    unmoved: LogHistogram,
    reported: LogHistogram,
    low: LogHistogram,
    high: LogHistogram,
}

impl Ranges {
    fn add(&mut self, value: f64, low: f64, high: f64, n: u64) {
        // No interval is shorter than nothing, however late its end's stamp was.
        let low = low.max(0.0).min(value);
        if low == value && high == value {
            self.unmoved.record_n(value, n);
            return;
        }
        self.reported.record_n(value, n);
        self.low.record_n(low, n);
        self.high.record_n(high, n);
    }

    fn shifts(&self, name: &str, out: &mut Vec<FigureShift>) {
        if self.reported.is_empty() {
            return;
        }
        let with_unmoved = |moved: &LogHistogram| {
            let mut all = self.unmoved.clone();
            all.merge(moved);
            all
        };
        let (reported, low, high) = (
            with_unmoved(&self.reported),
            with_unmoved(&self.low),
            with_unmoved(&self.high),
        );
        for (label, q) in PERCENTILES {
            let (Some(reported), Some(low), Some(high)) = (reported.quantile(q), low.quantile(q), high.quantile(q))
            else {
                continue;
            };
            let shift_ms = (reported - low).max(high - reported).max(0.0);
            out.push(FigureShift {
                figure: format!("{name} {label}"),
                reported_ms: reported,
                shift_ms,
                bound_ms: SHIFT_BOUND_MS.max(SHIFT_BOUND_SHARE * reported.abs()),
            });
        }
    }
}

/// How late a timestamp taken at `at_us` (wall clock) may be because of bakeoff's own lag, ms:
/// the time since the start of the spike it fell in (0 outside every spike).
pub fn lateness_ms_at(spikes: &LagSpikes, at_us: i64) -> f64 {
    let i = spikes.spikes.partition_point(|s| s.1 + AFTER_SPIKE_US < at_us);
    match spikes.spikes.get(i) {
        Some(&(start, _, _)) if start <= at_us => (at_us - start) as f64 / 1000.0,
        _ => 0.0,
    }
}

/// The measured records of a run, added one at a time, against its lag spikes.
#[derive(Default)]
pub struct ShiftTally {
    ttft: Ranges,
    e2e: Ranges,
    itl: Ranges,
}

impl ShiftTally {
    /// Adds one record's TTFT, E2E and ITL (warm-ups are left out).
    pub fn add(&mut self, spikes: &LagSpikes, r: &RequestRecord) {
        // Without a spike no figure moved, whatever the values: nothing to keep.
        if r.is_warmup || spikes.spikes.is_empty() {
            return;
        }
        let late_ms = |offset_us: i64| lateness_ms_at(spikes, r.sent_at_us + offset_us);
        // A late send stamp or a late arrival both make an interval read longer than it was.
        let sent = late_ms(0);
        if let Some(ttft) = r.ttft_us() {
            let v = ttft as f64 / 1000.0;
            self.ttft.add(v, v - sent - late_ms(ttft), v, 1);
        }
        if let Some(end) = r.end_us.get() {
            let v = end as f64 / 1000.0;
            self.e2e.add(v, v - sent - late_ms(end), v, 1);
        }
        // ITL as `calibers::itl_ms` counts it: a chunk's gap split over its k tokens. A late
        // chunk lengthens its own gap and shortens the next.
        let mut prev: Option<(i64, f64)> = None;
        for (at, k) in &r.chunks {
            let late = late_ms(at);
            match prev {
                None => prev = Some((at, late)),
                Some((p, p_late)) if k > 0 => {
                    let k_f = f64::from(k);
                    let gap = (at - p) as f64 / 1000.0 / k_f;
                    self.itl.add(gap, gap - late / k_f, gap + p_late / k_f, u64::from(k));
                    prev = Some((at, late));
                }
                Some(_) => {}
            }
        }
    }

    /// Every reported percentile the harness's lateness could have moved at all, with how far.
    pub fn shifts(&self) -> Vec<FigureShift> {
        let mut out = Vec::new();
        self.ttft.shifts("TTFT", &mut out);
        self.e2e.shifts("E2E", &mut out);
        self.itl.shifts("ITL", &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request sent at `sent_ms` (wall ms) with its first token `ttft_ms` later and 10 more
    /// tokens 10 ms apart.
    fn request(sent_ms: i64, ttft_ms: i64) -> RequestRecord {
        let chunks: Vec<(i64, u32)> = (0..11).map(|i| ((ttft_ms + 10 * i) * 1000, 1)).collect();
        RequestRecord {
            sent_at_us: sent_ms * 1000,
            first_content_us: Some(ttft_ms * 1000).into(),
            end_us: Some((ttft_ms + 100) * 1000).into(),
            chunks: chunks.into(),
            ..RequestRecord::test_quality("c")
        }
    }

    fn spikes(intervals: &[(i64, i64)]) -> LagSpikes {
        LagSpikes {
            threshold_ms: 5.0,
            spikes: intervals
                .iter()
                .map(|&(s, e)| (s * 1000, e * 1000, (e - s) as f64))
                .collect(),
            ..LagSpikes::default()
        }
    }

    /// 50 requests one after another (c = 1), TTFT 50 ms ± a little.
    fn quiet_run() -> Vec<RequestRecord> {
        (0..50).map(|i| request(i * 200, 50 + i % 3)).collect()
    }

    fn flagged(spikes: &LagSpikes, records: &[RequestRecord]) -> Vec<FigureShift> {
        let mut tally = ShiftTally::default();
        records.iter().for_each(|r| tally.add(spikes, r));
        tally.shifts().into_iter().filter(FigureShift::exceeds_bound).collect()
    }

    #[test]
    fn a_short_spike_over_one_first_token_of_fifty_moves_no_percentile_beyond_its_bound() {
        // The case that used to flag: one request in 50 overlapping one 5.4 ms spike, here right
        // on its first token (sent at 2000 ms, first token at 2051 ms).
        let records = quiet_run();
        let one = spikes(&[(2048, 2054)]);
        let mut tally = ShiftTally::default();
        records.iter().for_each(|r| tally.add(&one, r));
        let shifts = tally.shifts();
        assert!(
            shifts.iter().any(|s| s.figure == "TTFT p50"),
            "TTFT was exposed: {shifts:?}"
        );
        assert!(shifts.iter().all(|s| !s.exceeds_bound()), "{shifts:?}");
    }

    #[test]
    fn a_spike_no_timestamp_fell_in_moves_nothing() {
        // Between two chunks of one stream (tokens at 2051, 2061 … ms): no timestamp inside.
        let records = quiet_run();
        let mut tally = ShiftTally::default();
        records.iter().for_each(|r| tally.add(&spikes(&[(2052, 2058)]), r));
        assert!(tally.shifts().is_empty());
    }

    #[test]
    fn a_stall_over_many_first_tokens_flags_the_tail_and_says_by_how_much() {
        // c = 10: ten requests sent together each second; a 60 ms stall covers the first tokens
        // of one batch of ten (of 100), whose TTFT then read up to 60 ms long.
        let mut records: Vec<RequestRecord> = (0..100).map(|i| request((i / 10) * 1000, 50 + i % 3)).collect();
        for r in records.iter_mut().skip(50).take(10) {
            let late = 60;
            *r = request(r.sent_at_us / 1000, 50 + late);
        }
        let stall = spikes(&[(5040, 5112)]);
        let bad = flagged(&stall, &records);
        let p99 = bad.iter().find(|s| s.figure == "TTFT p99").expect("TTFT p99 flagged");
        assert!(p99.shift_ms > 50.0, "{p99:?}");
        assert!(p99.describe().starts_with("TTFT p99 "), "{}", p99.describe());
        // The median is not moved past its bound by 10 of 100.
        assert!(bad.iter().all(|s| s.figure != "TTFT p50"), "{bad:?}");
    }

    #[test]
    fn a_stall_merging_chunks_flags_itl() {
        // Every stream of a c = 10 level stalls for 80 ms in the middle of its tokens.
        let records: Vec<RequestRecord> = (0..10).map(|i| request(0, 50 + i % 2)).collect();
        let bad = flagged(&spikes(&[(90, 170)]), &records);
        assert!(bad.iter().any(|s| s.figure.starts_with("ITL")), "{bad:?}");
    }

    #[test]
    fn warm_ups_are_not_checked() {
        let mut r = request(0, 50);
        r.is_warmup = true;
        let mut tally = ShiftTally::default();
        tally.add(&spikes(&[(0, 200)]), &r);
        assert!(tally.shifts().is_empty());
    }
}
