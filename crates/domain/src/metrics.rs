//! Figures derived from raw request records. Definitions follow DESIGN.md "Measurement";
//! every figure here is computed only from records, so it can always be recomputed.
use super::calibers::{LevelFigures, RequestFigures, figures_at_concurrency};
use super::grading::case_passed;
use super::run::{RequestRecord, TokenSource};

/// Percentile by linear interpolation between closest ranks (type 7, as numpy's default).
/// `q` in [0, 1]; None for an empty sample.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

/// Spread of one sample.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Distribution {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    /// Coefficient of variation (sample std-dev / mean); None when n < 2 or mean is 0.
    pub cv: Option<f64>,
}

impl Distribution {
    /// From a log histogram: n, min, max, mean and CV exact; percentiles within the
    /// histogram's relative accuracy (0.5 % by default). None when empty.
    pub fn from_histogram(h: &super::histogram::LogHistogram) -> Option<Distribution> {
        let q = |p| h.quantile(p).unwrap_or(f64::NAN);
        let mean = h.mean()?;
        Some(Distribution {
            n: h.count() as usize,
            min: h.min()?,
            p50: q(0.5),
            p90: q(0.9),
            p95: q(0.95),
            p99: q(0.99),
            max: h.max()?,
            mean,
            cv: h.std_dev().filter(|_| mean != 0.0).map(|sd| sd / mean),
        })
    }

    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Distribution> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n as f64;
        let cv = if n >= 2 && mean != 0.0 {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            Some(var.sqrt() / mean)
        } else {
            None
        };
        let p = |q| percentile(&v, q).unwrap_or(f64::NAN);
        Some(Distribution {
            n,
            min: v[0],
            p50: p(0.5),
            p90: p(0.9),
            p95: p(0.95),
            p99: p(0.99),
            max: v[n - 1],
            mean,
            cv,
        })
    }
}

/// The first side-by-side figures for one candidate in one run (warm-ups excluded).
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateSummary {
    pub candidate_id: i64,
    /// Measured (non-warm-up) final attempts.
    pub requests: usize,
    pub failures: usize,
    /// failures / requests.
    pub failure_rate: Option<f64>,
    /// Weighted share of graded cases that passed.
    pub accuracy: Option<f64>,
    pub graded: usize,
    /// TTFT in milliseconds over successful streamed requests.
    pub ttft_ms: Option<Distribution>,
    /// E2E latency in milliseconds over successful requests.
    pub e2e_ms: Option<Distribution>,
    /// Decode tok/s per stream over successful requests with ≥ 2 output tokens.
    pub decode_tok_s_per_stream: Option<Distribution>,
    /// Steady-window aggregate tok/s (`calibers::figures_at_concurrency`); None when the
    /// requests were measured at several load levels (no pooled figure is a level's figure).
    pub aggregate_tok_s: Option<f64>,
    /// Whole-run aggregate tok/s (all output tokens / first send → last token), same rule.
    pub whole_run_tok_s: Option<f64>,
    /// Distinct concurrencies the measured requests were sent at.
    pub load_levels: usize,
    pub output_tokens: u64,
    /// Where output-token counts came from, as (source, requests).
    pub token_sources: Vec<(TokenSource, usize)>,
    /// Requests streamed in several chunks, by how their tokens were attributed to chunks.
    pub chunk_attribution: std::collections::BTreeMap<String, u64>,
    pub concurrency: Option<u32>,
    /// Segments the (one) load level was measured in: more than 1 when the run was resumed,
    /// its aggregates then taken per segment with the downtime between them left out.
    pub segments: u32,
    /// Seconds of downtime between segments, left out of every aggregate.
    pub downtime_s: f64,
    /// Which clock timed the measured requests: a figure of both says so.
    pub clocks: crate::run::ClockCounts,
}

/// Only each request's last attempt counts toward rates; retries are visible separately.
fn final_attempts<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Vec<&'a RequestRecord> {
    super::run::last_attempts(records, |r| (r.case_id.as_ref(), r.repetition, r.phase.as_str()))
}

/// Summarises one candidate's records (all records passed must belong to that candidate).
pub fn summarise_candidate(
    candidate_id: i64,
    records: &[RequestRecord],
    case_weight: impl Fn(&str) -> f64,
) -> CandidateSummary {
    summarise_candidate_resumed(candidate_id, records, case_weight, &[])
}

/// `summarise_candidate` of a run resumed at `resumes` (see `calibers::resumes_of`).
pub fn summarise_candidate_resumed(
    candidate_id: i64,
    records: &[RequestRecord],
    case_weight: impl Fn(&str) -> f64,
    resumes: &[i64],
) -> CandidateSummary {
    summarise_candidate_knowing(candidate_id, records, case_weight, resumes, None)
}

/// A candidate's level figures at a concurrency, computed already over its final attempts
/// (`scorecard::measurement::CandidateRecords::level_at`, resumed as the summary is).
pub type KnownLevel<'a> = &'a dyn Fn(u32) -> Option<LevelFigures>;

/// `summarise_candidate_resumed`, its level figures taken from `known` when given: each is a
/// pass over every final attempt's chunk times, which the run page, the archive's figures and
/// the scorecard would otherwise each take of the same records.
pub fn summarise_candidate_knowing(
    candidate_id: i64,
    records: &[RequestRecord],
    case_weight: impl Fn(&str) -> f64,
    resumes: &[i64],
    known: Option<KnownLevel<'_>>,
) -> CandidateSummary {
    // The measured attempts are not gathered apart: of a big run, only the final ones are held.
    let measured = records
        .iter()
        .filter(|r| r.candidate_id == candidate_id && !r.is_warmup);
    let finals = final_attempts(measured);
    let failures = finals.iter().filter(|r| !r.succeeded()).count();

    let (mut passed_w, mut graded_w, mut graded) = (0.0, 0.0, 0);
    for r in &finals {
        let verdict = if r.succeeded() {
            case_passed(&r.grades)
        } else {
            Some(false)
        };
        if let Some(pass) = verdict {
            let w = case_weight(&r.case_id);
            graded_w += w;
            graded += 1;
            if pass {
                passed_w += w;
            }
        }
    }

    // Per-request figures from the one definition (calibers), the aggregate from the one
    // level computation: a run measured at several concurrencies has no pooled aggregate.
    let output_tokens: u64 = finals.iter().filter_map(|r| r.output_tokens).map(u64::from).sum();
    let levels: std::collections::BTreeSet<u32> = finals.iter().map(|r| r.concurrency).collect();
    let level = match (levels.len(), levels.first()) {
        (1, Some(&c)) => match known {
            Some(level_at) => level_at(c),
            None => figures_at_concurrency(finals.iter().copied(), c, resumes),
        },
        _ => None,
    };
    // One level: its percentiles, as the per-level table and the scorecard show them; else the
    // requests' own (computed only then: each is a sort of every successful request's figure).
    let (ttft, e2e, decode) = match &level {
        Some(l) => (l.ttft_ms.clone(), l.e2e_ms.clone(), l.decode_tok_s_per_stream.clone()),
        None => {
            let per_request: Vec<RequestFigures> = finals
                .iter()
                .filter(|r| r.succeeded() && !r.in_ramp())
                .filter_map(|r| RequestFigures::of(r))
                .collect();
            (
                Distribution::of(per_request.iter().map(|f| f.ttft_ms)),
                Distribution::of(per_request.iter().map(|f| f.e2e_ms)),
                Distribution::of(per_request.iter().filter_map(|f| f.decode_tok_s)),
            )
        }
    };
    let aggregate = level.as_ref().and_then(|l| l.aggregate_tok_s);
    let whole_run = level.as_ref().and_then(|l| l.whole_run_tok_s);

    let mut sources: Vec<(TokenSource, usize)> = Vec::new();
    for src in finals.iter().filter_map(|r| r.output_tokens_source) {
        match sources.iter_mut().find(|(s, _)| *s == src) {
            Some((_, n)) => *n += 1,
            None => sources.push((src, 1)),
        }
    }

    let mut chunk_attribution = std::collections::BTreeMap::new();
    for how in finals
        .iter()
        .filter(|r| r.succeeded() && r.chunks.len() > 1)
        .filter_map(|r| r.chunk_attribution)
    {
        *chunk_attribution.entry(how.as_str().to_string()).or_default() += 1;
    }

    CandidateSummary {
        candidate_id,
        chunk_attribution,
        requests: finals.len(),
        failures,
        failure_rate: (!finals.is_empty()).then(|| failures as f64 / finals.len() as f64),
        accuracy: (graded_w > 0.0).then(|| passed_w / graded_w),
        graded,
        ttft_ms: ttft,
        e2e_ms: e2e,
        decode_tok_s_per_stream: decode,
        aggregate_tok_s: aggregate,
        whole_run_tok_s: whole_run,
        load_levels: levels.len(),
        output_tokens,
        token_sources: sources,
        concurrency: finals.first().map(|r| r.concurrency),
        segments: level.as_ref().map_or(1, |l| l.segments),
        downtime_s: level.as_ref().map_or(0.0, |l| l.downtime_s),
        clocks: crate::run::ClockCounts::of(finals.iter().copied()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{ErrorClass, Phase};

    #[test]
    fn requests_sent_in_one_microsecond_add_up_in_one_order_whatever_map_gathered_them() {
        // Sent at the same instant (a batch at once): the summary sums their figures in the
        // order of their keys, not of a hash map's, so two summaries of them agree to the bit.
        let records: Vec<RequestRecord> = (0..40u32)
            .map(|i| RequestRecord {
                concurrency: 40,
                sent_at_us: 1_000_000,
                first_chunk_us: Some(1_000 + i64::from(i) * 7_919).into(),
                first_content_us: Some(1_000 + i64::from(i) * 7_919).into(),
                last_token_us: Some(90_001 + i64::from(i * i) * 104_729).into(),
                end_us: Some(100_003 + i64::from(i * i) * 104_729).into(),
                output_tokens: Some(5 + i),
                chunks: vec![
                    (1_000 + i64::from(i) * 7_919, 1),
                    (90_001 + i64::from(i * i) * 104_729, 4 + i),
                ]
                .into(),
                ..RequestRecord::test_quality(&format!("c{i}"))
            })
            .collect();
        let once = format!("{:?}", summarise_candidate(1, &records, |_| 1.0));
        for _ in 0..20 {
            let mut shuffled = records.clone();
            shuffled.reverse();
            assert_eq!(format!("{:?}", summarise_candidate(1, &shuffled, |_| 1.0)), once);
        }
    }

    pub(crate) fn record(
        case: &str,
        sent_ms: i64,
        ttft_ms: i64,
        end_ms: i64,
        tokens: u32,
        pass: bool,
    ) -> RequestRecord {
        RequestRecord {
            candidate_id: 7,
            concurrency: 2,
            sent_at_us: sent_ms * 1000,
            headers_us: Some(ttft_ms * 1000).into(),
            first_chunk_us: Some(ttft_ms * 1000).into(),
            first_content_us: Some(ttft_ms * 1000).into(),
            last_token_us: Some(end_ms * 1000).into(),
            end_us: Some(end_ms * 1000).into(),
            input_tokens: Some(10),
            output_tokens: Some(tokens),
            output_tokens_source: Some(TokenSource::Usage),
            output_chars: tokens * 4,
            ..RequestRecord::test_quality(case).with_output("x").graded_exact(pass)
        }
    }

    #[test]
    fn percentile_interpolates_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), Some(2.5));
        assert!((percentile(&v, 0.95).unwrap() - 3.85).abs() < 1e-12);
        assert_eq!(percentile(&[], 0.5), None);
        let d = Distribution::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((d.min, d.p50, d.max, d.mean), (1.0, 2.0, 3.0, 2.0));
        assert!((d.cv.unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn summary_excludes_warmups_counts_final_attempts_and_weights() {
        let mut warm = record("w", 0, 500, 900, 100, true);
        warm.is_warmup = true;
        let a = record("a", 1000, 100, 1100, 101, true); // decode: 100 tok / 1.0 s
        let mut b_try = record("b", 1000, 0, 0, 0, false);
        b_try.error_class = Some(ErrorClass::HttpServerError);
        let mut b_retry = record("b", 1500, 200, 1500, 50, false);
        b_retry.attempt = 1;
        let (a_final, b_final) = (a.clone(), b_retry.clone());
        let s = summarise_candidate(7, &[warm, a, b_try, b_retry], |id| if id == "b" { 3.0 } else { 1.0 });
        assert_eq!((s.requests, s.failures), (2, 0));
        assert_eq!(s.accuracy, Some(0.25)); // a passes (w1), b fails (w3)
        assert_eq!(s.output_tokens, 151);
        // The aggregate is the level computation's, over the final attempts.
        let finals = [&a_final, &b_final];
        let level = crate::calibers::figures_at_concurrency(finals, 2, &[]).unwrap();
        assert_eq!(s.aggregate_tok_s, level.aggregate_tok_s);
        assert!(s.aggregate_tok_s.is_some());
        assert_eq!(s.load_levels, 1);
        assert_eq!(s.decode_tok_s_per_stream.as_ref().unwrap().max, 100.0);
        // So are the percentiles: the level's (nearest rank of 100 and 200 ms), not a pooled
        // interpolation (150 ms) that the per-level table would contradict.
        assert_eq!(s.ttft_ms.as_ref().map(|d| d.p50), level.ttft_ms.as_ref().map(|d| d.p50));
        assert_eq!(s.ttft_ms.unwrap().p50, 200.0);
    }

    /// What the store counts of `records` (see `Store::record_groups`).
    fn groups_of(records: &[RequestRecord]) -> Vec<crate::run::RecordGroup> {
        let mut counts: std::collections::HashMap<crate::run::GroupKey, u64> = Default::default();
        for r in records {
            *counts.entry(crate::run::RecordGroup::key_of(r)).or_default() += 1;
        }
        let group = |((phase, is_warmup, repetition, concurrency), records)| crate::run::RecordGroup {
            phase,
            is_warmup,
            repetition,
            concurrency,
            records,
        };
        counts.into_iter().map(group).collect()
    }

    /// Warm-up, retries, a final failure, chunk times, and sends sharing a microsecond (three at
    /// a time, keyed apart), in send order.
    fn retried_records_with_ties() -> Vec<RequestRecord> {
        let mut records = vec![{
            let mut warm = record("w", 0, 500, 900, 100, true);
            warm.is_warmup = true;
            warm
        }];
        for i in 0..30i64 {
            let mut r = record(
                &format!("c{}", i % 10),
                1000 + (i / 3) * 450,
                100 + i,
                1200 + i * 7,
                20,
                i % 3 > 0,
            );
            r.repetition = (i / 10) as u32;
            // Times off the millisecond, so sums in another order may differ in their last bit.
            let first = r.first_chunk_us.get().unwrap() + i * 37;
            r.first_chunk_us = Some(first).into();
            r.chunks = (0..20).map(|k| (first + k * (900 + i * 13), 1)).collect();
            r.last_token_us = r.chunks.iter().last().map(|(at, _)| at).into();
            if i % 7 == 0 {
                let mut retry = r.clone();
                r.error_class = Some(ErrorClass::HttpServerError);
                r.http_status = None;
                retry.attempt = 1;
                retry.sent_at_us += 50_000;
                records.extend([r, retry]);
            } else {
                if i == 11 {
                    r.error_class = Some(ErrorClass::StreamCut);
                }
                records.push(r);
            }
        }
        records.sort_by(crate::run::send_order);
        records
    }

    #[test]
    fn a_summary_given_its_prepared_records_level_figures_is_the_one_it_computes() {
        // The final attempts the prepared records keep (keyed with the level) are the ones the
        // summary keeps.
        let records = retried_records_with_ties();
        let resumes = [3_000_000];
        let weight = |case: &str| if case == "c1" { 2.0 } else { 1.0 };
        let alone = summarise_candidate_resumed(7, &records, weight, &resumes);
        let prepared = crate::scorecard::CandidateRecords::new(7, &records).with_resumes(&resumes);
        let level_at = |c: u32| prepared.level_at(c);
        let knowing = summarise_candidate_knowing(7, &records, weight, &resumes, Some(&level_at));
        assert!(alone.aggregate_tok_s.is_some());
        assert_eq!(format!("{knowing:?}"), format!("{alone:?}"));
    }

    #[test]
    fn level_figures_fed_as_records_are_read_are_those_of_the_records_held_whole() {
        use crate::scorecard::{CandidateRecords, LevelsFold, NotFinalAttempts};
        let whole = retried_records_with_ties();
        let resumes = [3_000_000];
        // The store reads in send time, then id: records sent in one microsecond may come in
        // another order than `send_order`'s.
        let mut read = whole.clone();
        read.sort_by(|a, b| a.sent_at_us.cmp(&b.sent_at_us).then(crate::run::send_order(b, a)));
        assert_ne!(read, whole, "some ties read in another order");
        let read_again = read.clone();
        let mut fold = LevelsFold::new(7, &resumes);
        for r in &mut read {
            fold.add(r);
            r.chunks.keep_first_only();
        }
        let held = CandidateRecords::new(7, &whole).with_resumes(&resumes);
        let unsealed_bins = fold.bins_held();
        let fed = CandidateRecords::new(7, &read)
            .with_resumes(&resumes)
            .with_levels(fold.finish().unwrap())
            .unwrap();
        assert_eq!(held.concurrencies(), vec![2]);
        // To the last bit (`{:?}` writes every f64 so that it reads back the same).
        assert!(held.level_at(2).is_some());
        assert_eq!(format!("{:?}", fed.level_at(2)), format!("{:?}", held.level_at(2)));

        // Told how many records each group holds, the fold seals each repetition once its last
        // record was read (all but the last: sealed as the read ends) and comes to the same.
        let groups = groups_of(&read_again);
        let mut fold = LevelsFold::new(7, &resumes).sealing(&groups);
        read_again.iter().for_each(|r| fold.add(r));
        assert!(
            fold.bins_held() < unsealed_bins / 2,
            "{} of {unsealed_bins}",
            fold.bins_held()
        );
        let sealed = CandidateRecords::new(7, &read)
            .with_resumes(&resumes)
            .with_levels(fold.finish().unwrap())
            .unwrap();
        assert_eq!(format!("{:?}", sealed.level_at(2)), format!("{:?}", held.level_at(2)));
        // Counted one record short, a repetition is sealed before its last success is fed: refused.
        let mut short = groups.clone();
        let first_repetition = short
            .iter_mut()
            .find(|g| g.phase == Phase::Quality && !g.is_warmup && g.repetition == 0)
            .unwrap();
        first_repetition.records -= 1;
        let mut fold = LevelsFold::new(7, &resumes).sealing(&short);
        read_again.iter().for_each(|r| fold.add(r));
        assert_eq!(fold.finish().err(), Some(crate::calibers::ReadAfterSealing));

        // Attempts fed that are not the final ones are refused: a success followed by another
        // attempt of its request, and a retry read before the failure it followed.
        let success = whole.iter().position(|r| r.succeeded() && !r.is_warmup).unwrap();
        let failure = whole
            .iter()
            .position(|r| r.error_class == Some(ErrorClass::StreamCut))
            .unwrap();
        for (i, later) in [(success, 1), (failure, -1)] {
            let mut read = whole.clone();
            let mut again = read[i].clone();
            again.attempt += 1;
            again.error_class = None;
            again.sent_at_us = read[i].sent_at_us + later;
            read.push(again);
            read.sort_by(crate::run::send_order);
            let mut fold = LevelsFold::new(7, &resumes);
            read.iter().for_each(|r| fold.add(r));
            let prepared = CandidateRecords::new(7, &read).with_levels(fold.finish().unwrap());
            assert_eq!(prepared.err(), Some(NotFinalAttempts), "{}", read[i].case_id);
        }
    }
}
