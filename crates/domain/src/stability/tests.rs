use super::consistency::*;
use super::failures::*;
use super::trend::*;
use super::*;
use crate::run::{ErrorClass, TokenSource, join_repetition};

/// A successful record sent at `sent_s`, taking `e2e_ms`, with `tokens` out.
fn rec(case: &str, repetition: u32, sent_s: f64, e2e_ms: f64, tokens: u32) -> RequestRecord {
    let end = (e2e_ms * 1000.0) as i64;
    RequestRecord {
        candidate_id: 7,
        repetition,
        sent_at_us: (sent_s * 1e6) as i64,
        connection_reused: Some(true),
        headers_us: Some(end / 10).into(),
        first_chunk_us: Some(end / 5).into(),
        first_content_us: Some(end / 5).into(),
        last_token_us: Some(end).into(),
        end_us: Some(end).into(),
        input_tokens: Some(10),
        output_tokens: Some(tokens),
        output_tokens_source: Some(TokenSource::Usage),
        ..RequestRecord::test_quality(case).with_output("answer")
    }
}

fn failed(mut r: RequestRecord, class: ErrorClass) -> RequestRecord {
    r.error_class = Some(class);
    r.output_tokens = None;
    r
}

fn graded(r: RequestRecord, passed: bool, output: &str) -> RequestRecord {
    r.with_output(output).graded_exact(passed)
}

#[test]
fn failure_rates_by_class_and_group_with_wilson_intervals() {
    let mut records: Vec<RequestRecord> = (0..16).map(|i| rec(&format!("c{i}"), 0, i as f64, 100.0, 10)).collect();
    records.push(failed(rec("t1", 0, 20.0, 100.0, 0), ErrorClass::FirstTokenTimeout));
    records.push(failed(rec("t2", 0, 21.0, 100.0, 0), ErrorClass::TotalTimeout));
    records.push(failed(rec("s1", 0, 22.0, 100.0, 0), ErrorClass::HttpServerError));
    let mut cut = rec("len", 0, 23.0, 100.0, 16);
    cut.finish_reason = Some("length".into());
    records.push(cut);
    // A retried request counts once, by its final attempt.
    let mut first_try = failed(rec("c0", 0, 0.0, 50.0, 0), ErrorClass::RateLimited);
    first_try.attempt = 0;
    records[0].attempt = 1;
    records.push(first_try);
    let report = stability_report(&records, 7, &StabilityOptions::default());
    let f = &report.failures;
    assert_eq!((f.overall.count, f.overall.n), (3, 20));
    assert!((f.overall.rate - 0.15).abs() < 1e-12);
    // Wilson 90 % for 3/20 (z = 1.6449, z² = 2.7057): centre (0.15 + z²/40) / (1 + z²/20)
    // = 0.1917, half-width z·sqrt(0.15·0.85/20 + z²/1600) / (1 + z²/20) = 0.1301.
    let ci = f.overall.interval.unwrap();
    assert!((ci.lo - 0.0616).abs() < 1e-3 && (ci.hi - 0.3218).abs() < 1e-3, "{ci:?}");
    assert_eq!(f.with_truncation.count, 4);
    let group = |k: &str| f.by_group.iter().find(|r| r.key == k).unwrap().count;
    assert_eq!((group("timeout"), group("server_error"), group(TRUNCATED)), (2, 1, 1));
    assert_eq!(group("rate_limited"), 0, "the retried 429 was not the final attempt");
    assert_eq!(f.by_group.len(), GROUPS.len(), "every group is listed, zero or not");
    assert_eq!(report.metric("failure_rate:first_token_timeout"), Some(0.05));
    assert_eq!(report.metric("failure_rate:timeout"), Some(0.1));
    assert_eq!(report.metric("failure_rate:truncated"), Some(0.05));
    assert_eq!(report.metric("failure_rate:stream_cut"), Some(0.0));
    assert!(
        stability_report(&[], 7, &StabilityOptions::default())
            .metric("failure_rate")
            .is_none()
    );
}

#[test]
fn cv_of_throughput_and_p95_across_repetitions() {
    // Two repetitions of two requests each, one after the other.
    // Rep 0: sent 0 s and 0 s, 1 s each, 100 tokens each → 200 tok/s; p95 of [1000, 1000] = 1000.
    // Rep 1: sent 10 s, both 2 s, 100 tokens each → 100 tok/s; p95 = 2000.
    let records = vec![
        rec("a", 0, 0.0, 1000.0, 100),
        rec("b", 0, 0.0, 1000.0, 100),
        rec("a", 1, 10.0, 2000.0, 100),
        rec("b", 1, 10.0, 2000.0, 100),
    ];
    let report = stability_report(&records, 7, &StabilityOptions::default());
    let spread = report.main_spread().unwrap();
    assert_eq!(spread.repetitions.len(), 2);
    assert!((spread.repetitions[0].tok_s.unwrap() - 200.0).abs() < 1e-9);
    assert!((spread.repetitions[1].tok_s.unwrap() - 100.0).abs() < 1e-9);
    // mean 150, sample sd sqrt(2 × 50²) = 70.71 → CV 0.4714; p95: mean 1500, sd 707.1 → 0.4714.
    assert!((spread.tok_s_cv.unwrap() - 0.471_404_5).abs() < 1e-6);
    assert!((report.metric("p95_latency_cv").unwrap() - 0.471_404_5).abs() < 1e-6);
    // Cycles of one repetition (load-level runs) stay in that repetition.
    let cycled = vec![
        rec("a", join_repetition(0, 0, 0), 0.0, 1000.0, 10),
        rec("a", join_repetition(0, 0, 1), 1.0, 1000.0, 10),
    ];
    let r = stability_report(&cycled, 7, &StabilityOptions::default());
    assert_eq!(r.main_spread().unwrap().repetitions.len(), 1);
    assert_eq!(r.metric("tok_s_cv"), None, "one repetition has no spread");
}

#[test]
fn self_consistency_flip_rate_and_pass_hat_k() {
    // Three cases, three repetitions each.
    // a: pass pass pass, same output.  b: pass fail pass (flips), outputs differ.
    // c: fail, fail, and a failed request (a fail), outputs "x","x".
    let mut records = Vec::new();
    for (rep, (a, b, c)) in [(true, true, false), (true, false, false), (true, true, false)]
        .into_iter()
        .enumerate()
    {
        let rep = rep as u32;
        records.push(graded(rec("a", rep, rep as f64, 100.0, 5), a, "yes"));
        records.push(graded(rec("b", rep, rep as f64, 100.0, 5), b, &format!("b{rep}")));
        if rep == 2 {
            records.push(failed(rec("c", rep, rep as f64, 100.0, 5), ErrorClass::StreamCut));
        } else {
            records.push(graded(rec("c", rep, rep as f64, 100.0, 5), c, "x"));
        }
    }
    let c = stability_report(&records, 7, &StabilityOptions::default())
        .consistency
        .unwrap();
    assert_eq!((c.cases, c.k), (3, 3));
    // Identical: a (yes×3) and c (x×2 successful) are identical; b is not → 2/3.
    let identical = c.identical_output.unwrap();
    assert_eq!((identical.count, identical.n), (2, 3));
    // Flip: only b → 1/3.
    let flips = c.flip_rate.unwrap();
    assert_eq!((flips.count, flips.n), (1, 3));
    assert_eq!(c.flipping_cases, vec!["b".to_string()]);
    // Pairs: a 3/3 agree, b (2 pass, 1 fail) 1/3 agree, c 3/3 → 7/9.
    assert!((c.grade_agreement.unwrap() - 7.0 / 9.0).abs() < 1e-12);
    // pass@1 = (1 + 2/3 + 0) / 3 = 5/9; pass^3 = (1 + 0 + 0) / 3.
    assert!((c.pass_at_1.unwrap() - 5.0 / 9.0).abs() < 1e-12);
    assert!((c.pass_hat_k.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    // Unbiased pass^k: 3 passes of 4 with k = 2 → C(3,2)/C(4,2) = 3/6.
    assert!((binomial_ratio(3, 4, 2) - 0.5).abs() < 1e-12);
    assert!(consistency(&[], 0.9).is_none());
}

#[test]
fn consistency_reads_answers_cut_for_summaries_as_whole_ones() {
    // Long answers that differ only at their end, and ones that are the same but for the
    // whitespace around them: cut (no text kept) or whole, the same case counts as identical.
    let long = "word ".repeat(400);
    let mut records = Vec::new();
    for rep in 0..3u32 {
        let differs_late = format!("{long}{rep}");
        let padded = if rep == 1 { format!("  {long}\n") } else { long.clone() };
        records.push(graded(rec("late", rep, f64::from(rep), 100.0, 5), true, &differs_late));
        records.push(graded(rec("same", rep, f64::from(rep), 100.0, 5), true, &padded));
    }
    let finals = |records: &[RequestRecord]| consistency(&records.iter().collect::<Vec<_>>(), 0.9).unwrap();
    let whole = finals(&records);
    let identical = whole.identical_output.as_ref().unwrap();
    assert_eq!((identical.count, identical.n), (1, 2));
    let mut cut = records.clone();
    cut.iter_mut().for_each(RequestRecord::cut_for_summaries);
    assert!(cut.iter().all(|r| r.output().is_empty()));
    assert_eq!(finals(&cut), whole);
    // One cut and one whole of the same answers compare alike too.
    let mut mixed = records;
    mixed.iter_mut().step_by(2).for_each(RequestRecord::cut_for_summaries);
    assert_eq!(finals(&mixed), whole);
}

#[test]
fn student_t_quantiles_match_tables() {
    for (p, df, want) in [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 3, 3.182),
        (0.975, 10, 2.228),
        (0.95, 8, 1.860),
        (0.95, 30, 1.697),
    ] {
        let got = t_quantile(p, df);
        assert!((got - want).abs() / want < 2e-3, "t({p}, {df}) = {got}, want {want}");
    }
}

#[test]
fn least_squares_slope_and_interval() {
    // y = 2x + 1 exactly: slope 2, zero-width interval.
    let exact: Vec<(f64, f64)> = (0..5).map(|x| (x as f64, 2.0 * x as f64 + 1.0)).collect();
    let f = linear_fit(&exact, 0.9).unwrap();
    assert!((f.slope - 2.0).abs() < 1e-12 && (f.intercept - 1.0).abs() < 1e-12);
    let ci = f.slope_interval.unwrap();
    assert!(ci.width() < 1e-9);
    // (0,0) (1,1) (2,1) (3,3): mx 1.5, my 1.25, sxx 5, sxy 4.5 → slope 0.9, intercept −0.1;
    // residuals 0.1, 0.2, −0.7, 0.4 → SSR 0.7, s² 0.35, se sqrt(0.35/5) = 0.2646;
    // t(0.95, 2) = 2.92 → half-width 0.7725.
    let f = linear_fit(&[(0.0, 0.0), (1.0, 1.0), (2.0, 1.0), (3.0, 3.0)], 0.9).unwrap();
    assert!((f.slope - 0.9).abs() < 1e-12);
    let ci = f.slope_interval.unwrap();
    assert!((ci.hi - ci.lo - 2.0 * 0.7725).abs() < 2e-3, "{ci:?}");
    assert!(linear_fit(&[(1.0, 1.0), (1.0, 2.0)], 0.9).is_none());
}

/// A soak at concurrency 1 lasting `n` requests back to back, request i taking `e2e(i)` ms.
fn soak(n: usize, e2e: impl Fn(usize) -> f64) -> Vec<RequestRecord> {
    let mut t = 0.0;
    (0..n)
        .map(|i| {
            let ms = e2e(i);
            let mut r = rec(&format!("c{}", i % 5), i as u32, t, ms, 20);
            r.phase = Phase::Soak;
            t += ms / 1000.0;
            r
        })
        .collect()
}

#[test]
fn a_stable_soak_is_not_flagged() {
    // ±5 % deterministic wobble around 200 ms, no trend.
    let wobble = [1.0, 1.05, 0.95, 1.02, 0.98, 1.04, 0.96, 1.01, 0.99, 1.03];
    let records = soak(200, |i| {
        200.0 * wobble[i % wobble.len()] * wobble[(i / 7) % wobble.len()]
    });
    let s = stability_report(&records, 7, &StabilityOptions::default())
        .soak
        .unwrap();
    assert_eq!(s.windows.len(), 10);
    assert!(!s.degrading, "{}", s.verdict);
    assert!(s.p95_latency.drift.unwrap().abs() < 0.10);
    assert_eq!(s.error_bursts, 0);
}

#[test]
fn a_restart_pause_is_left_out_of_the_soak_windows() {
    // The same stable soak, its second half sent after 10 minutes with nothing in flight.
    let wobble = [1.0, 1.05, 0.95, 1.02, 0.98];
    let mut records = soak(200, |i| 200.0 * wobble[i % wobble.len()]);
    let unbroken = stability_report(&records, 7, &StabilityOptions::default())
        .soak
        .unwrap();
    for r in &mut records[100..] {
        r.sent_at_us += 600_000_000;
    }
    let s = stability_report(&records, 7, &StabilityOptions::default())
        .soak
        .unwrap();
    assert!((s.paused_s - 600.0).abs() < 1.0, "{}", s.paused_s);
    assert!((s.duration_s - unbroken.duration_s).abs() < 1e-6, "load time only");
    assert!(
        s.windows.iter().all(|w| w.requests > 0),
        "no empty window for the pause"
    );
    assert!(!s.degrading, "{}", s.verdict);
    assert!(s.verdict.contains("600 s with nothing in flight"), "{}", s.verdict);
    assert_eq!(unbroken.paused_s, 0.0);
    assert!(!unbroken.verdict.contains("in flight"));
}

#[test]
fn a_soak_whose_latency_climbs_is_flagged() {
    // Latency grows linearly from 200 ms to 400 ms over the soak (with the same wobble).
    let wobble = [1.0, 1.05, 0.95, 1.02, 0.98];
    let records = soak(200, |i| (200.0 + i as f64) * wobble[i % wobble.len()]);
    let report = stability_report(&records, 7, &StabilityOptions::default());
    let s = report.soak.as_ref().unwrap();
    assert!(s.degrading, "{}", s.verdict);
    assert!(s.verdict.starts_with("steadily degrading"));
    assert!(s.p95_latency.drift.unwrap() > 0.5, "{:?}", s.p95_latency.drift);
    assert!(s.tok_s.drift.unwrap() < -0.3, "{:?}", s.tok_s.drift);
    assert!(s.p95_latency.fit.as_ref().unwrap().slope_interval.unwrap().lo > 0.0);
    assert_eq!(report.metric("soak_degrading"), Some(1.0));
    assert!(report.metric("soak_tok_s_drift").unwrap() < 0.0);
}

#[test]
fn a_small_clean_trend_is_not_degradation() {
    // +5 % over the soak with no noise: the slope is "significant" but below the 10 % floor.
    let records = soak(200, |i| 200.0 + i as f64 * 0.05);
    let s = stability_report(&records, 7, &StabilityOptions::default())
        .soak
        .unwrap();
    assert!(!s.degrading, "{}", s.verdict);
}

#[test]
fn error_bursts_are_windows_far_above_the_overall_rate() {
    let mut records = soak(200, |_| 100.0);
    // Errors: 10 in a row (inside one window of 20 requests) and 2 scattered.
    for r in records.iter_mut().skip(100).take(10) {
        r.error_class = Some(ErrorClass::HttpServerError);
    }
    records[10].error_class = Some(ErrorClass::HttpServerError);
    records[180].error_class = Some(ErrorClass::HttpServerError);
    let s = stability_report(&records, 7, &StabilityOptions::default())
        .soak
        .unwrap();
    assert_eq!(
        s.error_bursts,
        1,
        "{:?}",
        s.windows.iter().map(|w| w.failed).collect::<Vec<_>>()
    );
    assert!(s.windows.iter().find(|w| w.burst).unwrap().failed >= 9);
}

#[test]
fn too_short_a_soak_is_not_analysed() {
    let records = soak(5, |_| 100.0);
    assert!(
        stability_report(&records, 7, &StabilityOptions::default())
            .soak
            .is_none()
    );
}
