//! A run over time: per candidate and time bucket, the output tokens that arrived (tok/s), the
//! median TTFT of the requests whose first token arrived, and the failed attempts that ended.
//! The one computation behind the run page's "over time" charts and their table, live or ended.
use serde::{Deserialize, Serialize};

use super::metrics::Distribution;
use super::run::RequestRecord;

/// At most this many buckets across the run: enough to see a trend, few enough to read.
pub const MAX_BUCKETS: usize = 30;
/// No bucket is narrower than this: a rate over a few milliseconds is one chunk's arrival, not a
/// throughput (a 0.02 s bucket read as ~19,000 tok/s).
pub const MIN_BUCKET_S: f64 = 0.5;
/// Fewer buckets than this draw no trend: the chart is replaced by a sentence.
pub const MIN_CHART_BUCKETS: usize = 3;

/// One candidate's figures over one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Seconds since the run's first measured send.
    pub start_s: f64,
    pub end_s: f64,
    /// Output tokens of successful requests arriving in the interval / its length (a
    /// non-streamed answer arrives whole at its end); None outside the candidate's own span
    /// (first send → last end): candidates measured one after another do not read as idle.
    pub tok_s: Option<f64>,
    /// Median TTFT of successful requests whose first token arrived in the interval.
    pub ttft_p50_ms: Option<f64>,
    /// Failed attempts (retried or final) that ended in the interval.
    pub errors: u32,
}

/// Every candidate's buckets on one shared time axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub bucket_s: f64,
    /// (candidate id, its buckets), in the order asked for.
    pub candidates: Vec<(i64, Vec<Bucket>)>,
}

/// 1, 2 or 5 × a power of ten, at least `raw`: bucket widths a reader can add up.
fn round_width(raw: f64) -> f64 {
    let raw = raw.max(1e-3);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|w| *w >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

/// The measured records (warm-ups left out) of `candidate_ids` in buckets; None before any
/// measured request ended.
pub fn over_time<'a>(records: impl IntoIterator<Item = &'a RequestRecord>, candidate_ids: &[i64]) -> Option<Timeline> {
    let measured: Vec<&RequestRecord> = records
        .into_iter()
        .filter(|r| !r.is_warmup && candidate_ids.contains(&r.candidate_id))
        .collect();
    let grid = Grid::of(span(measured.iter().copied())?);
    let candidates = candidate_ids
        .iter()
        .map(|&id| {
            (
                id,
                grid.buckets(measured.iter().copied().filter(|r| r.candidate_id == id)),
            )
        })
        .collect();
    Some(grid.timeline(candidates))
}

/// A record's end on the wall clock (its send when it has none).
fn end_of(r: &RequestRecord) -> i64 {
    r.sent_at_us + r.end_us.get().unwrap_or(0)
}

/// (first send, last end) of `records`, wall clock µs; None for none. Records of the same run
/// read apart (a candidate at a time) give the run's span as the min and max of theirs.
pub fn span<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Option<(i64, i64)> {
    records
        .into_iter()
        .map(|r| (r.sent_at_us, end_of(r)))
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// The buckets of a run whose measured records span `(first send, last end)`: every
/// candidate's on one axis, so they can be computed one candidate at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grid {
    start: i64,
    span_s: f64,
    width: f64,
    count: usize,
}

impl Grid {
    pub fn of((start, end): (i64, i64)) -> Grid {
        let span_s = ((end - start) as f64 / 1e6).max(1e-3);
        let width = round_width((span_s / MAX_BUCKETS as f64).max(MIN_BUCKET_S));
        // Whole buckets only: the last one takes the remainder (so it is never narrower than
        // the others; a run shorter than one bucket is one bucket over its whole span).
        let count = ((span_s / width * (1.0 + 1e-9)).floor() as usize).clamp(1, MAX_BUCKETS);
        Grid {
            start,
            span_s,
            width,
            count,
        }
    }

    fn index(&self, at_us: i64) -> usize {
        (((at_us - self.start) as f64 / 1e6 / self.width) as usize).min(self.count - 1)
    }

    /// One candidate's buckets from its measured records (warm-ups already left out).
    pub fn buckets<'a>(&self, mine: impl IntoIterator<Item = &'a RequestRecord>) -> Vec<Bucket> {
        let mut buckets = self.fill();
        mine.into_iter().for_each(|r| buckets.add(r));
        buckets.finish()
    }

    /// [`Grid::buckets`] fed a record at a time, in any order.
    pub fn fill(&self) -> Buckets {
        Buckets {
            grid: *self,
            tokens: vec![0; self.count],
            ttfts: vec![Vec::new(); self.count],
            errors: vec![0; self.count],
            first: None,
            last: None,
        }
    }

    /// The timeline of every candidate's buckets, in the order given.
    pub fn timeline(&self, candidates: Vec<(i64, Vec<Bucket>)>) -> Timeline {
        Timeline {
            bucket_s: self.width,
            candidates,
        }
    }
}

/// One candidate's buckets being filled ([`Grid::fill`]).
pub struct Buckets {
    grid: Grid,
    tokens: Vec<u64>,
    ttfts: Vec<Vec<f64>>,
    errors: Vec<u32>,
    first: Option<usize>,
    last: Option<usize>,
}

impl Buckets {
    /// Adds one measured record of the candidate (warm-ups must be left out).
    pub fn add(&mut self, r: &RequestRecord) {
        let grid = &self.grid;
        let (sent, end) = (grid.index(r.sent_at_us), grid.index(end_of(r)));
        self.first = Some(self.first.map_or(sent, |f| f.min(sent)));
        self.last = Some(self.last.map_or(end, |l| l.max(end)));
        if !r.succeeded() {
            self.errors[end] += 1;
            return;
        }
        if r.chunks.is_empty() {
            self.tokens[end] += u64::from(r.output_tokens.unwrap_or(0));
        } else {
            for (offset, n) in &r.chunks {
                self.tokens[grid.index(r.sent_at_us + offset)] += u64::from(n);
            }
        }
        if let Some(ttft) = r.ttft_us() {
            self.ttfts[grid.index(r.sent_at_us + ttft)].push(ttft as f64 / 1000.0);
        }
    }

    pub fn finish(self) -> Vec<Bucket> {
        let Buckets {
            grid,
            tokens,
            ttfts,
            errors,
            first,
            last,
        } = self;
        (0..grid.count)
            .map(|i| {
                let start_s = i as f64 * grid.width;
                // The last bucket ends with the run: its rate is over the time it covers.
                let end_s = if i + 1 == grid.count {
                    grid.span_s
                } else {
                    (i + 1) as f64 * grid.width
                };
                Bucket {
                    start_s,
                    end_s,
                    tok_s: (first <= Some(i) && Some(i) <= last)
                        .then(|| tokens[i] as f64 / (end_s - start_s).max(1e-6)),
                    ttft_p50_ms: Distribution::of(ttfts[i].iter().copied()).map(|d| d.p50),
                    errors: errors[i],
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::ErrorClass;

    fn streamed(candidate_id: i64, sent_s: f64, ttft_ms: i64, chunks: &[(i64, u32)]) -> RequestRecord {
        let last = chunks.last().map(|c| c.0).unwrap_or(ttft_ms * 1000);
        RequestRecord {
            candidate_id,
            sent_at_us: (sent_s * 1e6) as i64,
            first_chunk_us: Some(ttft_ms * 1000).into(),
            first_content_us: Some(ttft_ms * 1000).into(),
            last_token_us: Some(last).into(),
            end_us: Some(last).into(),
            chunks: chunks.into(),
            output_tokens: Some(chunks.iter().map(|c| c.1).sum()),
            ..RequestRecord::test_quality("c")
        }
    }

    #[test]
    fn widths_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(round_width(0.3), 0.5);
        assert_eq!(round_width(1.0), 1.0);
        assert_eq!(round_width(1.2), 2.0);
        assert_eq!(round_width(7.0), 10.0);
        assert_eq!(round_width(40.0), 50.0);
    }

    #[test]
    fn tokens_ttft_and_errors_land_in_the_bucket_they_happened_in_by_hand() {
        // 60 s of run: 2-second buckets (60 / 30).
        let a = streamed(1, 0.0, 500, &[(500_000, 10), (2_500_000, 30)]);
        let b = streamed(1, 10.0, 300, &[(300_000, 4)]);
        let mut failed = streamed(1, 20.0, 100, &[]);
        failed.error_class = Some(ErrorClass::HttpServerError);
        failed.end_us = Some(1_000_000).into();
        let mut warmup = streamed(1, 0.0, 100, &[(100_000, 1000)]);
        warmup.is_warmup = true;
        let other = streamed(2, 59.0, 200, &[(1_000_000, 6)]);
        let t = over_time([&a, &b, &failed, &warmup, &other], &[1, 2]).unwrap();
        assert_eq!(t.bucket_s, 2.0);
        let one = &t.candidates[0].1;
        assert_eq!(one.len(), 30);
        assert_eq!(
            (one[0].tok_s, one[1].tok_s),
            (Some(5.0), Some(15.0)),
            "10 then 30 tokens over 2 s"
        );
        assert_eq!(one[0].ttft_p50_ms, Some(500.0));
        assert_eq!((one[5].tok_s, one[5].ttft_p50_ms), (Some(2.0), Some(300.0)));
        assert_eq!(
            (one[10].errors, one[10].tok_s),
            (1, Some(0.0)),
            "the failure ended at 21 s"
        );
        assert_eq!(one[11].tok_s, None, "after its last request ended");
        assert_eq!(one.iter().map(|b| b.errors).sum::<u32>(), 1);
        let two = &t.candidates[1].1;
        assert_eq!(two[29].tok_s, Some(3.0), "6 tokens at 60 s");
        assert_eq!(two[28].tok_s, None, "before its first send");
        assert_eq!(two[29].end_s, 60.0);
    }

    #[test]
    fn a_non_streamed_answer_arrives_whole_at_its_end_and_nothing_measured_is_none() {
        let mut whole = streamed(1, 0.0, 800, &[]);
        whole.end_us = Some(800_000).into();
        whole.output_tokens = Some(40);
        let t = over_time([&whole], &[1]).unwrap();
        let total: f64 = t.candidates[0]
            .1
            .iter()
            .filter_map(|b| Some(b.tok_s? * (b.end_s - b.start_s)))
            .sum();
        assert!((total - 40.0).abs() < 1e-6, "{t:?}");
        assert_eq!(over_time([], &[1]), None);
    }

    #[test]
    fn no_bucket_is_narrower_than_the_floor_and_the_last_takes_the_remainder() {
        // 3.02 s of run: 0.5 s buckets (3.02 / 30 is below the floor), six of them, the last
        // 0.52 s long — no 0.02 s sliver whose few tokens would read as a huge rate.
        let a = streamed(1, 0.0, 100, &[(100_000, 10), (3_000_000, 40)]);
        let mut b = streamed(1, 0.0, 100, &[]);
        b.end_us = Some(3_020_000).into();
        let t = over_time([&a, &b], &[1]).unwrap();
        assert_eq!(t.bucket_s, MIN_BUCKET_S);
        let one = &t.candidates[0].1;
        assert_eq!(one.len(), 6, "{one:?}");
        for bucket in one {
            assert!(bucket.end_s - bucket.start_s >= MIN_BUCKET_S - 1e-9, "{bucket:?}");
        }
        assert!((one[5].end_s - 3.02).abs() < 1e-9);
        // The 40 tokens at 3.0 s land in the last bucket, over its 0.52 s: about 77 tok/s.
        assert!((one[5].tok_s.unwrap() - 40.0 / 0.52).abs() < 1e-6, "{:?}", one[5]);
    }
}
