//! Verdict logic with hand-computed expectations (intervals at z = 1.645, see `intervals`).
use std::collections::HashMap;

use super::*;
use crate::Timestamp;
use crate::candidate::{CandidateSpec, ClaimedFigure, Pricing};
use crate::grading::Grade;
use crate::pipeline::Stage;
use crate::run::{ErrorClass, Phase, TokenSource};

fn rule(metric: &str, comparator: Comparator, value: f64) -> ThresholdRule {
    ThresholdRule {
        metric: metric.into(),
        comparator,
        value,
        unit: String::new(),
        rationale: String::new(),
    }
}

fn key(metric: &str) -> MetricKey {
    MetricKey::parse(metric).unwrap()
}

fn proportion(k: f64, n: f64) -> Measurement {
    Measurement {
        value: Some(k / n),
        interval: intervals::wilson(k / n, n),
        uncertainty: Uncertainty::Proportion,
        n,
        unit: SampleUnit::Cases,
        concurrency: None,
        missing: None,
    }
}

fn sampled(value: f64, interval: Option<(f64, f64)>, n: f64) -> Measurement {
    Measurement {
        value: Some(value),
        interval,
        uncertainty: Uncertainty::Bootstrap,
        n,
        unit: SampleUnit::Requests,
        concurrency: Some(8),
        missing: None,
    }
}

#[test]
fn every_rule_state_for_a_proportion() {
    let r = rule("accuracy", Comparator::AtLeast, 0.80);
    let k = key("accuracy");
    // 19/20: Wilson [0.8040, 0.9888] lies above 80 %.
    let pass = assess(&r, &k, &proportion(19.0, 20.0));
    assert_eq!(pass.state, RuleState::Pass);
    assert!((pass.margin.unwrap() - 0.15).abs() < 1e-12);
    // 12/20: Wilson [0.4186, 0.7576] lies below.
    let fail = assess(&r, &k, &proportion(12.0, 20.0));
    assert_eq!(fail.state, RuleState::Fail);
    assert_eq!(
        fail.reason,
        "accuracy 60 % < 80 % (interval 41.9 % to 75.8 %, n=20 cases)"
    );
    // 18/20: Wilson [0.7383, 0.9663] straddles 80 %. Holding 90 % (successes rounded down),
    // the smallest n whose interval clears 80 % is 48 (43/48: lower bound 0.8011), so 28 more.
    let unsure = assess(&r, &k, &proportion(18.0, 20.0));
    assert_eq!(unsure.state, RuleState::Inconclusive);
    assert_eq!(
        unsure.settle,
        Some(Settle::More {
            more: 28,
            total: 48,
            unit: SampleUnit::Cases
        })
    );
    assert!(
        unsure
            .reason
            .starts_with("accuracy 90 % vs ≥ 80 %: the interval 73.8 % to 96.6 % (n=20 cases) straddles"),
        "{}",
        unsure.reason
    );
    assert!(
        unsure
            .reason
            .ends_with("about 28 more cases (48 in all) would likely settle it, if the value holds")
    );
    // No value at all.
    let none = Measurement {
        value: None,
        missing: Some("not measured at c=8".into()),
        ..sampled(0.0, None, 0.0)
    };
    let nm = assess(
        &rule("ttft_p95_ms@c=8", Comparator::AtMost, 1000.0),
        &key("ttft_p95_ms@c=8"),
        &none,
    );
    assert_eq!(nm.state, RuleState::NotMeasured);
    assert_eq!(nm.reason, "TTFT p95 @c=8 not measured at c=8");
}

#[test]
fn failure_rate_below_two_percent_cannot_pass_on_twenty_requests() {
    // 0/20 failures: Wilson upper bound z² / (n + z²) = 0.1192 > 2 %: inconclusive, and it takes
    // n with z² / (n + z²) < 0.02, i.e. n > 49 · 2.7055 = 132.6 → 133 requests.
    let r = rule("failure_rate", Comparator::Below, 0.02);
    let m = Measurement {
        unit: SampleUnit::Requests,
        ..proportion(0.0, 20.0)
    };
    let j = assess(&r, &key("failure_rate"), &m);
    assert_eq!(j.state, RuleState::Inconclusive);
    assert_eq!(
        j.settle,
        Some(Settle::More {
            more: 113,
            total: 133,
            unit: SampleUnit::Requests
        })
    );
    // The same 0/20 passes a 15 % limit.
    let j = assess(&rule("failure_rate", Comparator::Below, 0.15), &key("failure_rate"), &m);
    assert_eq!(j.state, RuleState::Pass);
}

#[test]
fn interval_edges_follow_the_comparator() {
    let k = key("ttft_p95_ms");
    // Upper end exactly on the limit: "≤" holds there, "<" does not.
    let m = sampled(900.0, Some((800.0, 1000.0)), 50.0);
    assert_eq!(
        assess(&rule("ttft_p95_ms", Comparator::AtMost, 1000.0), &k, &m).state,
        RuleState::Pass
    );
    assert_eq!(
        assess(&rule("ttft_p95_ms", Comparator::Below, 1000.0), &k, &m).state,
        RuleState::Inconclusive
    );
    // Lower end exactly on the limit of a "≤" rule: still partly passing → inconclusive.
    assert_eq!(
        assess(&rule("ttft_p95_ms", Comparator::AtMost, 800.0), &k, &m).state,
        RuleState::Inconclusive
    );
    // Wholly above.
    let j = assess(&rule("ttft_p95_ms", Comparator::AtMost, 700.0), &k, &m);
    assert_eq!(j.state, RuleState::Fail);
    assert_eq!(j.margin, Some(-200.0));
    assert!(j.reason.starts_with("TTFT p95 900 ms > 700 ms"), "{}", j.reason);
    // Zero-width interval (constant sample) decides like a point.
    let flat = sampled(500.0, Some((500.0, 500.0)), 20.0);
    assert_eq!(
        assess(&rule("ttft_p95_ms", Comparator::AtMost, 500.0), &k, &flat).state,
        RuleState::Pass
    );
    // Too few requests for an interval: inconclusive, never a pass on a point value.
    let few = sampled(100.0, None, 3.0);
    let j = assess(&rule("ttft_p95_ms", Comparator::AtMost, 1000.0), &k, &few);
    assert_eq!(j.state, RuleState::Inconclusive);
    assert!(j.reason.contains("too few for an interval"), "{}", j.reason);
}

#[test]
fn bootstrap_settle_scales_with_the_square_of_half_width_over_distance() {
    // Half-width 100 ms, 50 ms from the limit: n · (100 / 50)² = 20 · 4 = 80 → 60 more.
    let m = sampled(1000.0, Some((900.0, 1100.0)), 20.0);
    assert_eq!(
        settle_estimate(&m, 1000.0, 950.0),
        Settle::More {
            more: 60,
            total: 80,
            unit: SampleUnit::Requests
        }
    );
    assert_eq!(settle_estimate(&m, 1000.0, 1000.0), Settle::OnTheThreshold);
    // A proportion exactly on the threshold never settles.
    assert_eq!(
        settle_estimate(&proportion(16.0, 20.0), 0.8, 0.8),
        Settle::OnTheThreshold
    );
}

#[test]
fn exact_figures_compare_point_values() {
    let k = key("cost_per_1k_cases");
    let cost = |v: f64| Measurement {
        value: Some(v),
        interval: None,
        uncertainty: Uncertainty::Exact,
        n: 100.0,
        unit: SampleUnit::Requests,
        concurrency: None,
        missing: None,
    };
    let r = rule("cost_per_1k_cases", Comparator::AtMost, 1.0);
    assert_eq!(assess(&r, &k, &cost(1.0)).state, RuleState::Pass);
    let j = assess(&r, &k, &cost(1.2));
    assert_eq!(j.state, RuleState::Fail);
    assert_eq!(j.reason, "cost per 1,000 cases $1.20 > $1.00");
}

#[test]
fn verdicts_need_every_rule_to_pass() {
    use RuleState::*;
    assert_eq!(Verdict::of(&[Pass, Pass]), Verdict::Go);
    assert_eq!(Verdict::of(&[Pass, Fail, NotMeasured]), Verdict::NoGo);
    assert_eq!(Verdict::of(&[Pass, Inconclusive]), Verdict::Inconclusive);
    assert_eq!(Verdict::of(&[Pass, NotMeasured]), Verdict::Inconclusive);
    assert_eq!(Verdict::of(&[]), Verdict::Inconclusive);
}

// ---------------------------------------------------------------- a whole scorecard

fn candidate(id: i64, name: &str, claim: Option<ClaimedFigure>) -> Candidate {
    Candidate {
        id,
        spec: CandidateSpec {
            // $1 / M input, $2 / M output: 100 in + 50 out = $0.0002 per request.
            pricing: Pricing {
                input_per_mtok: Some(1.0),
                output_per_mtok: Some(2.0),
                ..Default::default()
            },
            claimed: claim,
            ..CandidateSpec::openai_chat(name, "http://127.0.0.1:9/v1", name)
        },
        created_at: Timestamp(0),
        updated_at: Timestamp(0),
    }
}

/// Built from JSON so optional fields added to `Grade` later keep their defaults.
fn exact_grade(passed: bool) -> Grade {
    serde_json::from_value(serde_json::json!({
        "grader": "exact",
        "score": if passed { 1.0 } else { 0.0 },
        "passed": passed,
        "reason": "",
    }))
    .expect("a grade parses")
}

/// Ten cases at c=2, two at a time, each taking `e2e_ms`: waves of two, so the window is
/// 5 · e2e. TTFT 100 ms; the last of 50 tokens at e2e.
fn records(candidate_id: i64, e2e_ms: i64, right: &[bool]) -> Vec<RequestRecord> {
    (0..10)
        .map(|i| RequestRecord {
            candidate_id,
            concurrency: 2,
            sent_at_us: (i as i64 / 2) * e2e_ms * 1000,
            headers_us: Some(50_000).into(),
            first_chunk_us: Some(100_000).into(),
            first_content_us: Some(100_000).into(),
            last_token_us: Some(e2e_ms * 1000).into(),
            end_us: Some(e2e_ms * 1000).into(),
            input_tokens: Some(100),
            output_tokens: Some(50),
            output_tokens_source: Some(TokenSource::Usage),
            output_chars: 200,
            grades: vec![exact_grade(right[i])],
            ..RequestRecord::test_quality(&format!("c{i}")).with_output("x")
        })
        .collect()
}

#[test]
fn a_two_candidate_scorecard_by_hand() {
    let claim = ClaimedFigure {
        tokens_per_second: 200.0,
        caliber: "per-stream decode".into(),
        conditions: Some("batch 1, H100".into()),
    };
    let candidates = vec![candidate(1, "A", Some(claim)), candidate(2, "B", None)];
    // A right on c0..c8 (9/10); B right on c0..c4 (5/10).
    let a_right: Vec<bool> = (0..10).map(|i| i < 9).collect();
    let b_right: Vec<bool> = (0..10).map(|i| i < 5).collect();
    let mut all = records(1, 350, &a_right);
    all.extend(records(2, 250, &b_right));
    let rules = vec![
        rule("accuracy", Comparator::AtLeast, 0.80),
        rule("e2e_p50_ms", Comparator::AtMost, 400.0),
        rule("cost_per_1k_cases", Comparator::AtMost, 1.0),
        rule("vibes", Comparator::AtLeast, 1.0),
    ];
    let pipeline = PipelineSpec {
        stages: vec![Stage {
            name: "prep".into(),
            seconds_per_item: 0.65,
        }],
        model_share: None,
    };
    let weights = HashMap::new();
    let card = build(&ScorecardInput {
        run_concurrency: 2,
        candidates: &candidates,
        records: &all,
        weights: &weights,
        rules: &rules,
        incumbent: Some(1),
        pipeline: &pipeline,
        operability: &[],
        judge: None,
        resumes: &[],
        preferences: &[],
    });

    // Accuracy: A 9/10 → Wilson [0.6523, 0.9774] straddles 80 %; B 5/10 → [0.2693, 0.7307] fails.
    // E2E p50: A 350 ms, B 250 ms, both constant → pass. Cost: $0.0002 · 1000 = $0.20 → pass.
    // The unknown metric is not measured for both.
    // Rows come grouped by dimension: throughput, quality, operability, then unknown metrics.
    let order: Vec<&str> = card.rows.iter().map(|r| r.rule.metric.as_str()).collect();
    assert_eq!(order, ["e2e_p50_ms", "accuracy", "cost_per_1k_cases", "vibes"]);
    let states = |i: usize| {
        card.rows
            .iter()
            .map(|r| r.cells[i].assessment.state)
            .collect::<Vec<_>>()
    };
    use RuleState::*;
    assert_eq!(states(0), [Pass, Inconclusive, Pass, NotMeasured]);
    assert_eq!(states(1), [Pass, Fail, Pass, NotMeasured]);
    assert_eq!(card.columns[0].verdict, Verdict::Inconclusive);
    assert_eq!(card.columns[1].verdict, Verdict::NoGo);
    assert_eq!(
        card.columns[1].reasons[0],
        "accuracy 50 % < 80 % (interval 26.9 % to 73.1 %, n=10 cases)"
    );
    assert_eq!(
        card.columns[1].reasons[1],
        "vibes not measured: \"vibes\" is not a metric in the catalog"
    );
    assert!(card.columns[0].incumbent && !card.columns[1].incumbent);

    // Incumbent deltas (B − A) and best values.
    let accuracy = &card.rows[1];
    assert!((accuracy.cells[1].delta.unwrap() - (-0.4)).abs() < 1e-12);
    assert_eq!(accuracy.cells[0].delta, None);
    assert!(accuracy.cells[0].best && !accuracy.cells[1].best);
    let e2e = &card.rows[0];
    assert_eq!(e2e.cells[1].delta, Some(-100.0));
    assert!(e2e.cells[1].best && !e2e.cells[0].best, "lower latency is better");
    let cost_row = &card.rows[2];
    assert!(cost_row.cells[0].best && cost_row.cells[1].best, "a tie marks both");

    // Cost: 10 × $0.0002 = $0.002; per correct: A $0.002 / 9, B $0.002 / 5.
    let a_cost = card.costs[0].as_ref().unwrap();
    assert!((a_cost.total_usd - 0.002).abs() < 1e-12);
    assert!((a_cost.per_1k_cases.unwrap() - 0.2).abs() < 1e-12);
    assert!((a_cost.per_correct.unwrap() - 0.002 / 9.0).abs() < 1e-12);
    assert!((card.costs[1].as_ref().unwrap().per_correct.unwrap() - 0.0004).abs() < 1e-12);

    // Paired: A alone right on c5..c8 (4), B alone on none → p = 2 · (1/2)⁴ = 0.125.
    assert_eq!(card.paired.len(), 1);
    let p = &card.paired[0].outcome;
    assert_eq!((p.only_a, p.only_b, p.both_right, p.both_wrong), (4, 0, 5, 1));
    assert!((p.p_value - 0.125).abs() < 1e-12);

    // Pipeline against the incumbent A: (0.65 + 0.35) / (0.65 + 0.25) = 1.111; model 1.4×.
    assert_eq!(card.pipeline_baseline, Some(0));
    let b = card.pipeline[1].as_ref().unwrap();
    assert!((b.model_factor - 1.4).abs() < 1e-9);
    assert!((b.pipeline_factor - 1.0 / 0.9).abs() < 1e-9);

    // Claim: decode = 49 tokens / (350 − 100) ms = 196 tok/s → 98 % of 200; batch 1 vs c=2 and
    // the H100 are listed as differences.
    let claim = card.claims[0].as_ref().unwrap();
    assert!((claim.measured_tok_s.unwrap() - 196.0).abs() < 1e-9);
    assert_eq!(claim.summary(), "measured 98 % of claim");
    assert!(
        claim
            .differences
            .iter()
            .any(|d| d.contains("batch/concurrency 1; measured at c=2"))
    );
    assert!(claim.differences.iter().any(|d| d.contains("\"H100\"")));
    assert!(card.claims[1].is_none());

    // Pareto: A more accurate, B faster (10 / 1.25 s = 8 req/s vs 10 / 1.75 s = 5.71), same
    // cost: neither dominates.
    assert!((card.pareto[1].speed.unwrap() - 8.0).abs() < 1e-9);
    assert!(card.pareto.iter().all(|p| !p.dominated()));
}

#[test]
fn filters_by_load_and_counts_failures_by_class() {
    let right = [true; 10];
    let mut all = records(1, 300, &right);
    all[0].error_class = Some(ErrorClass::RateLimited);
    all[0].http_status = Some(429);
    all[1].error_class = Some(ErrorClass::HttpServerError);
    let candidates = vec![candidate(1, "A", None)];
    let rules = vec![
        rule("failure_rate", Comparator::Below, 0.5),
        rule("failure_rate:rate_limited", Comparator::Below, 0.5),
        rule("ttft_p95_ms@c=8", Comparator::AtMost, 1000.0),
        rule("soak_tok_s_loss", Comparator::Below, 0.1),
        rule("cold_start_ms", Comparator::AtMost, 5000.0),
    ];
    let weights = HashMap::new();
    let card = build(&ScorecardInput {
        run_concurrency: 2,
        candidates: &candidates,
        records: &all,
        weights: &weights,
        rules: &rules,
        incumbent: None,
        pipeline: &PipelineSpec::default(),
        operability: &[],
        judge: None,
        resumes: &[],
        preferences: &[],
    });
    let by_metric = |m: &str| card.rows.iter().find(|r| r.rule.metric == m).unwrap();
    assert_eq!(by_metric("failure_rate").cells[0].measurement.value, Some(0.2));
    assert_eq!(
        by_metric("failure_rate:rate_limited").cells[0].measurement.value,
        Some(0.1)
    );
    let at8 = &by_metric("ttft_p95_ms@c=8").cells[0].assessment;
    assert_eq!(at8.state, RuleState::NotMeasured);
    assert_eq!(at8.reason, "TTFT p95 @c=8 not measured at c=8");
    let soak = &by_metric("soak_tok_s_loss").cells[0].assessment;
    assert_eq!(
        soak.reason,
        "throughput loss over a soak not measured: this run has no soak phase (start one with the soak preset)"
    );
    let cold = &by_metric("cold_start_ms").cells[0].assessment;
    assert!(cold.reason.contains("not measured yet"), "{}", cold.reason);
    // Failed requests count as wrong answers: 8/10 accuracy.
    let outcomes = CandidateRecords::new(1, &all).case_outcomes();
    assert_eq!(outcomes.values().filter(|v| **v == 1.0).count(), 8);
    assert!(card.pipeline.iter().all(Option::is_none), "no pipeline stated");
}

#[test]
fn soak_throughput_loss_from_the_window_trend() {
    // 60 soak requests completing every 10 s: the 10 windows of 59 s hold 6 each; window w's
    // requests carry 100 − 5w tokens, so window tok/s falls on a straight line from 6·100/59
    // to 6·55/59: a loss of (100 − 55) / 100 = 45 %, with a zero-width interval (exact fit).
    let soak = |tokens_of: &dyn Fn(usize) -> u32| {
        let mut all = Vec::new();
        for k in 0..60usize {
            let mut r = records(1, 300, &[true; 10]).remove(0);
            r.phase = Phase::Soak;
            r.case_id = format!("s{k}").into();
            r.sent_at_us = k as i64 * 10_000_000 - 300_000;
            r.output_tokens = Some(tokens_of(k / 6));
            all.push(r);
        }
        all
    };
    let falling = soak(&|w| 100 - 5 * w as u32);
    let data = CandidateRecords::new(1, &falling);
    let m = measurement::measure(&key("soak_tok_s_loss"), &data, 2, &HashMap::new(), &Extras::default());
    assert!((m.value.unwrap() - 0.45).abs() < 1e-9, "{m:?}");
    let (lo, hi) = m.interval.unwrap();
    assert!((lo - 0.45).abs() < 1e-9 && (hi - 0.45).abs() < 1e-9, "{m:?}");
    let r = rule("soak_tok_s_loss", Comparator::Below, 0.10);
    assert_eq!(assess(&r, &key("soak_tok_s_loss"), &m).state, RuleState::Fail);
    // A flat soak loses nothing and passes.
    let flat = soak(&|_| 80);
    let m = measurement::measure(
        &key("soak_tok_s_loss"),
        &CandidateRecords::new(1, &flat),
        2,
        &HashMap::new(),
        &Extras::default(),
    );
    assert!(m.value.unwrap().abs() < 1e-9, "{m:?}");
    assert_eq!(assess(&r, &key("soak_tok_s_loss"), &m).state, RuleState::Pass);
}

#[test]
fn operability_rules_read_the_candidates_checklist_and_probes() {
    use crate::operability::{Answer, ChecklistAnswers, ChecklistItem, ItemAnswer};
    let mut answers = ChecklistAnswers::default();
    let mut set = |item, answer| {
        answers.0.insert(
            item,
            ItemAnswer {
                answer,
                notes: String::new(),
            },
        );
    };
    set(ChecklistItem::Monitoring, Answer::Yes);
    set(ChecklistItem::Logging, Answer::No);
    set(ChecklistItem::AccessControl, Answer::NotApplicable);
    let ops = [CandidateOperability {
        probes: None,
        checklist: Some(answers),
        ..Default::default()
    }];
    let candidates = vec![candidate(1, "A", None)];
    let all = records(1, 300, &[true; 10]);
    let rules = vec![
        rule("checklist:monitoring", Comparator::AtLeast, 1.0),
        rule("checklist:logging", Comparator::AtLeast, 1.0),
        rule("checklist:access_control", Comparator::AtLeast, 1.0),
        // 1 yes of the 7 items that apply (one is n/a).
        rule("checklist_share", Comparator::AtLeast, 0.5),
        rule("probe:usage_in_stream", Comparator::AtLeast, 1.0),
    ];
    let weights = HashMap::new();
    let card = build(&ScorecardInput {
        run_concurrency: 2,
        candidates: &candidates,
        records: &all,
        weights: &weights,
        rules: &rules,
        incumbent: None,
        pipeline: &PipelineSpec::default(),
        operability: &ops,
        judge: None,
        resumes: &[],
        preferences: &[],
    });
    let j = |m: &str| card.rows.iter().find(|r| r.rule.metric == m).unwrap().cells[0].clone();
    assert_eq!(j("checklist:monitoring").assessment.state, RuleState::Pass);
    assert_eq!(
        j("checklist:logging").assessment.reason,
        "checklist item (logging) 0 % < 100 %"
    );
    assert_eq!(
        j("checklist:access_control").assessment.reason,
        "checklist item (access_control) not measured: the item is marked not applicable"
    );
    assert!((j("checklist_share").measurement.value.unwrap() - 1.0 / 7.0).abs() < 1e-12);
    assert_eq!(j("checklist_share").assessment.state, RuleState::Fail);
    assert!(
        j("probe:usage_in_stream")
            .assessment
            .reason
            .contains("no probe run yet")
    );
    assert_eq!(card.columns[0].verdict, Verdict::NoGo);
}

/// Humans preferring candidate 2 (the challenger) over 1 in `wins` comparisons and 1 in
/// `losses`, plus `ties`; sides alternate.
fn human_comparisons(wins: usize, losses: usize, ties: usize) -> Vec<Preference> {
    use crate::review::pairwise::Choice;
    let mut prefs = Vec::new();
    let outcomes = std::iter::repeat_n(Some(2), wins)
        .chain(std::iter::repeat_n(Some(1), losses))
        .chain(std::iter::repeat_n(None, ties));
    for (i, winner) in outcomes.enumerate() {
        let (left, right) = if i % 2 == 0 { (1, 2) } else { (2, 1) };
        let choice = match winner {
            None => Choice::Tie,
            Some(w) if w == left => Choice::Left,
            Some(_) => Choice::Right,
        };
        prefs.push(super::preference::comparison(
            &format!("case-{i}"),
            left,
            right,
            choice,
            "ana",
        ));
    }
    prefs
}

fn win_rate_card(rules: &[ThresholdRule], incumbent: Option<i64>, prefs: &[Preference]) -> Scorecard {
    let candidates = vec![candidate(1, "incumbent-x", None), candidate(2, "challenger-y", None)];
    build(&ScorecardInput {
        run_concurrency: 1,
        candidates: &candidates,
        records: &[],
        weights: &HashMap::new(),
        rules,
        incumbent,
        pipeline: &PipelineSpec::default(),
        operability: &[],
        judge: None,
        resumes: &[],
        preferences: prefs,
    })
}

#[test]
fn not_worse_than_the_incumbent_passes_fails_or_says_how_many_more_comparisons_would_settle_it() {
    let not_worse = [rule("blind_win_rate", Comparator::AtLeast, 0.40)];
    // 60 wins of 100 decided: exact 90 % interval [0.5130, 0.6825] clears 40 % → PASS; the
    // incumbent is the reference and passes too.
    let card = win_rate_card(&not_worse, Some(1), &human_comparisons(60, 40, 7));
    let row = &card.rows[0];
    assert_eq!(row.label, "blind win rate vs incumbent (humans)");
    let cell = &row.cells[1];
    assert_eq!(cell.assessment.state, RuleState::Pass, "{}", cell.assessment.reason);
    let (lo, hi) = cell.measurement.interval.unwrap();
    assert!((lo - 0.5130).abs() < 1e-3 && (hi - 0.6825).abs() < 1e-3, "{lo} {hi}");
    assert_eq!(cell.measurement.n, 100.0);
    assert!(
        cell.assessment
            .reason
            .ends_with("60 wins, 40 losses, 7 ties against incumbent-x (people's blind comparisons)"),
        "{}",
        cell.assessment.reason
    );
    assert_eq!(row.cells[0].assessment.state, RuleState::Pass);
    assert!(row.cells[0].assessment.reason.contains("incumbent-x is the incumbent"));
    assert_eq!(card.columns[1].verdict, Verdict::Go);

    // 20 wins of 100: upper bound 0.2772 < 40 % → FAIL, NO-GO.
    let card = win_rate_card(&not_worse, Some(1), &human_comparisons(20, 80, 0));
    assert_eq!(card.rows[0].cells[1].assessment.state, RuleState::Fail);
    assert_eq!(card.columns[1].verdict, Verdict::NoGo);

    // 6 wins of 10: [0.3035, 0.8500] straddles 40 % → INCONCLUSIVE, with the comparisons
    // that would settle it: where the exact lower bound at 60 % clears 40 % (about 25 in all).
    let card = win_rate_card(&not_worse, Some(1), &human_comparisons(6, 4, 0));
    let cell = &card.rows[0].cells[1];
    assert_eq!(cell.assessment.state, RuleState::Inconclusive);
    let Some(Settle::More { more, total, unit }) = &cell.assessment.settle else {
        panic!("{:?}", cell.assessment.settle)
    };
    assert_eq!(*unit, SampleUnit::Comparisons);
    assert_eq!(*total - *more, 10);
    assert!((20..=40).contains(total), "{total}");
    let (k, n) = ((*total as f64 * 0.6).floor() as u64, *total);
    let at = crate::review::pairwise::clopper_pearson(k, n, 0.90).unwrap();
    assert!(at.lo > 0.40, "at {n}: {at:?}");
    assert!(
        cell.assessment.reason.contains("decided comparisons"),
        "{}",
        cell.assessment.reason
    );

    // The judge's comparisons are not people's: the human rule has nothing decided.
    let mut judged = human_comparisons(60, 40, 0);
    for p in &mut judged {
        p.picker = "judge:grader".into();
    }
    let card = win_rate_card(&not_worse, Some(1), &judged);
    assert_eq!(card.rows[0].cells[1].assessment.state, RuleState::NotMeasured);
}

#[test]
fn the_rule_names_its_incumbent_or_takes_the_scorecards_and_says_when_there_is_none() {
    let prefs = human_comparisons(60, 40, 0);
    // Named in the rule: no scorecard incumbent needed.
    let named = [rule("blind_win_rate:incumbent-x", Comparator::AtLeast, 0.40)];
    let card = win_rate_card(&named, None, &prefs);
    assert_eq!(card.rows[0].label, "blind win rate vs incumbent-x (humans)");
    assert_eq!(card.rows[0].cells[1].assessment.state, RuleState::Pass);
    assert_eq!(card.rows[0].cells[0].assessment.state, RuleState::Pass);
    // Neither named nor chosen: not measured, saying what to do.
    let unnamed = [rule("blind_win_rate", Comparator::AtLeast, 0.40)];
    let card = win_rate_card(&unnamed, None, &prefs);
    let cell = &card.rows[0].cells[1];
    assert_eq!(cell.assessment.state, RuleState::NotMeasured);
    assert!(
        cell.assessment.reason.contains("choose one on the scorecard"),
        "{}",
        cell.assessment.reason
    );
    // A name that is not in the run.
    let stranger = [rule("blind_win_rate:gpt-9", Comparator::AtLeast, 0.40)];
    let card = win_rate_card(&stranger, None, &prefs);
    assert!(
        card.rows[0].cells[1]
            .assessment
            .reason
            .contains("\"gpt-9\" the rule names is not a candidate")
    );
}

#[test]
fn the_judge_win_rate_reads_cases_judged_in_both_orders() {
    use crate::review::pairwise::Choice;
    let j = "judge:grader";
    let mut prefs = Vec::new();
    // 30 cases the judge prefers the challenger (2) in both orders, 10 where it always picks the
    // left side (ties on balance), 2 where it prefers the incumbent both ways.
    for i in 0..42 {
        let case = format!("case-{i}");
        let (first, second) = match i {
            0..30 => (Choice::Right, Choice::Left),
            30..40 => (Choice::Left, Choice::Left),
            _ => (Choice::Left, Choice::Right),
        };
        prefs.push(super::preference::comparison(&case, 1, 2, first, j));
        prefs.push(super::preference::comparison(&case, 2, 1, second, j));
    }
    let card = win_rate_card(&[rule("judge_win_rate", Comparator::AtLeast, 0.40)], Some(1), &prefs);
    let cell = &card.rows[0].cells[1];
    assert_eq!(cell.measurement.n, 32.0);
    assert_eq!(cell.measurement.unit, SampleUnit::JudgedCases);
    assert_eq!(cell.assessment.state, RuleState::Pass, "{}", cell.assessment.reason);
    assert!(
        cell.assessment.reason.contains("30 wins, 2 losses, 10 ties"),
        "{}",
        cell.assessment.reason
    );
}

#[test]
fn sample_sizes_read_as_english_one_request_and_an_effective_weighted_n() {
    let one = Settle::More {
        more: 1,
        total: 21,
        unit: measurement::SampleUnit::Requests,
    };
    assert!(
        one.describe().starts_with("about 1 more request (21 in all)"),
        "{}",
        one.describe()
    );
    let many = Settle::More {
        more: 12,
        total: 32,
        unit: measurement::SampleUnit::Cases,
    };
    assert!(
        many.describe().starts_with("about 12 more cases"),
        "{}",
        many.describe()
    );
    let mut m = measurement::Measurement {
        value: Some(0.9),
        interval: None,
        uncertainty: Uncertainty::Proportion,
        n: 4.5,
        unit: measurement::SampleUnit::Cases,
        concurrency: None,
        missing: None,
    };
    assert_eq!(m.conditions(), "n≈4.5 cases (effective, weighted)");
    m.n = 20.0;
    assert_eq!(m.conditions(), "n=20 cases");
}

/// An endpoint that was never reached (every request refused or its host unknown) says nothing
/// of its model: INCONCLUSIVE, saying why, not a NO-GO for a 100 % failure rate. One answered
/// request — or one failure of another kind — and the rules judge as usual.
#[test]
fn an_endpoint_never_reached_is_not_measured_rather_than_no_go() {
    let fail_to_connect = |mut r: RequestRecord, class: ErrorClass| {
        r.error_class = Some(class);
        r.end_us = None.into();
        r.first_chunk_us = None.into();
        r
    };
    let right = [true; 10];
    let down: Vec<RequestRecord> = records(1, 300, &right)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let class = if i < 7 {
                ErrorClass::ConnectRefused
            } else {
                ErrorClass::Dns
            };
            fail_to_connect(r, class)
        })
        .collect();
    let mut half = records(2, 300, &right);
    for r in half.iter_mut().take(9) {
        *r = fail_to_connect(r.clone(), ErrorClass::ConnectRefused);
    }
    let mut server_errors = records(3, 300, &right);
    for r in server_errors.iter_mut() {
        r.error_class = Some(ErrorClass::HttpServerError);
    }
    let mut all = down;
    all.extend(half);
    all.extend(server_errors);
    let candidates = vec![
        candidate(1, "A", None),
        candidate(2, "B", None),
        candidate(3, "C", None),
    ];
    let rules = vec![rule("failure_rate", Comparator::Below, 0.15)];
    let card = build(&ScorecardInput {
        run_concurrency: 2,
        candidates: &candidates,
        records: &all,
        weights: &HashMap::new(),
        rules: &rules,
        incumbent: None,
        pipeline: &PipelineSpec::default(),
        operability: &[],
        judge: None,
        resumes: &[],
        preferences: &[],
    });
    assert_eq!(card.columns[0].verdict, Verdict::Inconclusive);
    assert_eq!(
        card.columns[0].reasons,
        [
            "not measured: the endpoint could not be reached — all 10 requests failed to connect (connect_refused, dns); check its URL and that it is up, then run again"
        ]
    );
    assert_eq!(card.columns[1].verdict, Verdict::NoGo, "one answer reached it: judged");
    assert_eq!(
        card.columns[2].verdict,
        Verdict::NoGo,
        "a server that answers 5xx is judged"
    );
}

#[test]
fn prefix_cache_rules_read_the_token_hit_rate_and_warm_ttft() {
    use crate::conversation::PromptCache;
    // Ten requests of a 100-token prompt: the first writes the prefix (Anthropic shape: 80
    // written, none read), nine read 80 of it; warm ones get their first token at 40 ms.
    let mut all = records(1, 300, &[true; 10]);
    for (i, r) in all.iter_mut().enumerate() {
        r.prompt_cache = Some(PromptCache {
            read_tokens: if i == 0 { 0 } else { 80 },
            creation_tokens: Some(if i == 0 { 80 } else { 0 }),
        });
        if i > 0 {
            r.first_chunk_us = Some(40_000).into();
            r.first_content_us = Some(40_000).into();
        }
    }
    let data = CandidateRecords::new(1, &all);
    let m = measurement::measure(
        &key("prefix_cache_hit_rate"),
        &data,
        2,
        &HashMap::new(),
        &Extras::default(),
    );
    // 720 read / 1000 whole: creation tokens stay in the denominator.
    assert!((m.value.unwrap() - 0.72).abs() < 1e-12, "{m:?}");
    let r = rule("prefix_cache_hit_rate", Comparator::AtLeast, 0.5);
    assert_ne!(assess(&r, &key("prefix_cache_hit_rate"), &m).state, RuleState::Fail);
    let m = measurement::measure(&key("warm_ttft_p95_ms"), &data, 2, &HashMap::new(), &Extras::default());
    assert!((m.value.unwrap() - 40.0).abs() < 0.5, "{m:?}");
    // A server whose usage has no cache field: not measured, never 0 %.
    let bare = records(1, 300, &[true; 10]);
    let m = measurement::measure(
        &key("prefix_cache_hit_rate"),
        &CandidateRecords::new(1, &bare),
        2,
        &HashMap::new(),
        &Extras::default(),
    );
    assert_eq!(m.value, None);
    assert_eq!(m.missing.as_deref(), Some(crate::prompt_cache::NOT_REPORTED));
}
