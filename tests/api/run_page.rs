//! The run page shows everything the engine and the graders measured, on SQLite and PostgreSQL:
//! the harness report (with an UNRELIABLE badge and its reasons, also on the scorecard), per-level
//! figures of load-shape runs with the knee and goodput, quality reports per candidate
//! (classification with its confusion matrix, field extraction with missing / wrong / extra
//! counts, pass rates with reasons), the staged rollout honoured from the form, and the harness
//! report carried through export and import.
use std::collections::BTreeMap;

use bakeoff::domain::calibers::{HarnessReport, run_figures};
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::grading::{GraderSpec, grade};
use bakeoff::domain::load::LoadShape;
use bakeoff::domain::run::{ErrorClass, NewRun, Phase, RunConfig, RunStatus};
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};

use crate::support::app::{TestApp, harness_report, record, spawn_app_on};
use crate::support::cli;
use crate::support::db::{TestStore, each_backend, each_backend_pair};
use crate::support::runs::RUN_DEADLINE;

/// What these tests do over `TestApp` beyond the shared helpers.
impl TestApp {
    async fn candidate(&self, name: &str, base_url: &str, model: &str) -> i64 {
        let spec = CandidateDraft {
            name: name.into(),
            provider: "openai-chat".into(),
            base_url: base_url.into(),
            model: model.into(),
            ..Default::default()
        }
        .validate(None)
        .expect("a valid candidate");
        self.store
            .create_candidate(&crate::support::checked::admin_new(&spec))
            .await
            .expect("storing a candidate")
    }

    async fn run(&self, version: i64, candidates: &[i64], config: RunConfig) -> i64 {
        self.store
            .create_run(&NewRun {
                name: "run page test".into(),
                evalset_version_id: version,
                candidate_ids: candidates.to_vec(),
                config,
            })
            .await
            .expect("storing a run")
    }

    /// Starts a stored run (or waits for one the form started) until it ends.
    async fn run_to_end(&self, run: i64, start: bool) -> RunStatus {
        if start {
            self.state.runner.start(run);
        }
        tokio::time::timeout(RUN_DEADLINE, self.state.runner.wait(run))
            .await
            .expect("the run ended in time");
        self.store.get_run(run).await.unwrap().expect("the run").status
    }
}

async fn start_mock(profiles: Vec<ModelProfile>, keys: Vec<EvalSetFile>) -> MockServer {
    crate::support::runs::start_mock(MockConfig {
        profiles,
        answer_keys: keys,
        seed: 5,
    })
    .await
}

fn fast(name: &str) -> ModelProfile {
    ModelProfile {
        ttft_ms: 3.0,
        inter_token_ms: Some(1.0),
        ..ModelProfile::named(name)
    }
}

fn harness(unreliable: bool) -> HarnessReport {
    harness_report(unreliable, 25.0)
}

// ------------------------------------------------------------------ harness report

each_backend!(the_harness_report_labels_every_figure_and_flags_unreliable_speed_on_page_and_scorecard);
async fn the_harness_report_labels_every_figure_and_flags_unreliable_speed_on_page_and_scorecard(db: TestStore) {
    let app = spawn_app_on(db).await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None)
        .await
        .expect("profiles");
    let b = app.backend;

    let flagged = app.finished_run("flagged", Some(&harness(true))).await;
    let (page, _) = app.page(&format!("/runs/{flagged}")).await;
    let warning = page.text(".unreliable-warning");
    assert!(warning.contains("UNRELIABLE"), "{b}: {warning}");
    assert!(
        warning.contains("p99 client queue wait 25.0 ms exceeds 10 ms"),
        "{b}: {warning}"
    );
    let flag = page.text(".speed-flag");
    assert!(
        flag.contains("UNRELIABLE") && flag.contains("client queue wait"),
        "{b}: by the results: {flag}"
    );
    let fact = |key: &str| page.text(&format!("[data-harness={key}]"));
    assert!(fact("verdict").contains("UNRELIABLE"), "{b}");
    assert!(
        fact("cpu_s").contains("1.50 CPU-s over 12.0 s wall"),
        "{b}: {}",
        fact("cpu_s")
    );
    assert!(fact("cpu_s").contains("user + system"), "{b}: the caliber is shown");
    assert!(
        fact("cpu_per_mtok").contains("25.0 CPU-s per million output tokens"),
        "{b}"
    );
    assert!(fact("cpu_per_mtok").contains("60000 tokens"), "{b}");
    assert!(
        fact("cpu_share").contains("1.6 % of 8 cores"),
        "{b}: {}",
        fact("cpu_share")
    );
    let queue = fact("client_queue");
    assert!(
        queue.contains("p50 3.00 ms") && queue.contains("p99 25.0 ms"),
        "{b}: {queue}"
    );
    assert!(queue.contains("closed loop"), "{b}: {queue}");
    assert_eq!(
        page.count("[data-harness=schedule_lag]"),
        0,
        "{b}: closed loop has no schedule"
    );
    assert!(fact("event_loop_lag").contains("p99 1.20 ms"), "{b}");
    // The whole process, every thread: CPU and peak memory.
    assert!(
        fact("process").contains("1.60 CPU-s") && fact("process").contains("peak memory 40.0 MB"),
        "{b}: {}",
        fact("process")
    );
    assert!(fact("host").contains("bakeoff 9.9.9-test on bench-host"), "{b}");
    // The scorecard's speed rules carry the flag too.
    let (card, _) = app.page(&format!("/runs/{flagged}/scorecard")).await;
    let w = card.text(".section-throughput .section-warning");
    assert!(
        w.contains("UNRELIABLE") && w.contains("client queue wait 25.0 ms"),
        "{b}: {w}"
    );
    assert_eq!(
        card.count(".section-quality .section-warning"),
        0,
        "{b}: quality is not flagged"
    );

    let fine = app.finished_run("fine", Some(&harness(false))).await;
    let (page, _) = app.page(&format!("/runs/{fine}")).await;
    assert_eq!(page.count(".unreliable-warning") + page.count(".speed-flag"), 0, "{b}");
    assert_eq!(page.count("[data-speed-reliable=true]"), 1, "{b}");
    assert!(page.text("[data-harness=verdict]").contains("reliable"), "{b}");
    let (card, _) = app.page(&format!("/runs/{fine}/scorecard")).await;
    assert_eq!(card.count(".section-warning"), 0, "{b}");

    let none = app.finished_run("none", None).await;
    let (page, _) = app.page(&format!("/runs/{none}")).await;
    assert!(page.text(".harness .empty").contains("no harness report"), "{b}");
}

// ------------------------------------------------------------ classification, rollout

fn label_evalset() -> EvalSetFile {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"labels","task":"classification","prompt":"Ticket {{n}}: label it","graders":[{"kind":"label","labels":["positive","negative","neutral"]}],"max_tokens":8}"#,
    );
    let labels = ["positive", "negative", "neutral"];
    for i in 0..12 {
        text.push_str(&format!(
            "\n{{\"id\":\"t{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"{}\"}}",
            labels[i % 3]
        ));
    }
    EvalSetFile::parse("labels.jsonl", &text).expect("the label eval set parses")
}

each_backend!(a_label_run_started_from_the_form_shows_the_confusion_matrix_of_its_answers);
async fn a_label_run_started_from_the_form_shows_the_confusion_matrix_of_its_answers(db: TestStore) {
    let file = label_evalset();
    let expected: BTreeMap<String, String> = file
        .cases
        .iter()
        .map(|c| (c.id.clone(), c.expected.as_ref().unwrap().as_str().unwrap().to_string()))
        .collect();
    let sloppy = ModelProfile {
        accuracy: 0.5,
        ..fast("sloppy")
    };
    let mock = start_mock(vec![sloppy, fast("exact")], vec![file.clone()]).await;
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let sloppy = app.candidate("sloppy", &mock.base_url(), "sloppy").await;
    let exact = app.candidate("exact", &mock.base_url(), "exact").await;

    // The form offers the staged rollout ticked by default.
    let (form, _) = app.page("/runs/new").await;
    assert!(
        form.attr("#f-staged_rollout", "checked").is_some(),
        "{b}: rollout on by default"
    );
    assert!(
        form.text("label[for=f-staged_rollout]").contains("Staged rollout"),
        "{b}"
    );

    let version_s = version.to_string();
    let (sloppy_s, exact_s) = (sloppy.to_string(), exact.to_string());
    let mut fields = vec![
        ("name", "labels"),
        ("evalset_version", version_s.as_str()),
        ("candidate", sloppy_s.as_str()),
        ("candidate", exact_s.as_str()),
        ("concurrency", "3"),
        ("repetitions", "2"),
        ("warmup_requests", "1"),
        ("max_tokens", ""),
        ("temperature", "0"),
        ("timeout_secs", "20"),
        ("retries", "0"),
        ("case_limit", ""),
        ("stream", "on"),
        ("load_shape", "fixed"),
    ];
    fields.push(("staged_rollout", "on"));
    let r = app.post_form("/runs", &fields).await;
    assert_eq!(r.status().as_u16(), 303, "{b}");
    let run: i64 = r.headers()["location"]
        .to_str()
        .unwrap()
        .trim_start_matches("/runs/")
        .parse()
        .unwrap();
    assert_eq!(app.run_to_end(run, false).await, RunStatus::Finished, "{b}");
    assert!(app.store.get_run(run).await.unwrap().unwrap().config.staged_rollout);

    let records = app.store.list_request_records(run).await.unwrap();
    assert!(
        records.iter().any(|r| r.phase == Phase::Smoke),
        "{b}: the staged rollout ran (phase smoke)"
    );
    let (page, body) = app.page(&format!("/runs/{run}")).await;
    assert!(page.text(".conditions").contains("staged rollout on"), "{b}");

    for (id, name) in [(sloppy, "sloppy"), (exact, "exact")] {
        // The matrix by hand: measured answers (not warm-ups, not rollout) of this candidate.
        let mut want: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut n = 0;
        for r in records
            .iter()
            .filter(|r| r.candidate_id == id && !r.is_warmup && r.phase == Phase::Quality)
        {
            n += 1;
            *want
                .entry((expected[&*r.case_id].clone(), r.output().trim().to_string()))
                .or_default() += 1;
        }
        assert_eq!(n, 24, "{b}: 12 cases × 2 repetitions");
        let right: u64 = want.iter().filter(|((e, p), _)| e == p).map(|(_, n)| n).sum();
        if name == "sloppy" {
            assert!(
                right > 0 && right < 24,
                "{b}: the sloppy model is right sometimes: {want:?}"
            );
        } else {
            assert_eq!(right, 24, "{b}");
        }
        let scope = format!(".quality-candidate[data-candidate={name}]");
        for e in ["positive", "negative", "neutral"] {
            for p in ["positive", "negative", "neutral"] {
                let cell = page.text(&format!(
                    "{scope} table.confusion tr[data-expected={e}] td[data-predicted={p}]"
                ));
                let n = want.get(&(e.to_string(), p.to_string())).copied().unwrap_or(0);
                assert_eq!(cell, n.to_string(), "{b} {name}: expected {e}, predicted {p}");
            }
        }
        let accuracy = page.text(&format!("{scope} [data-figure=accuracy] dd"));
        let pct = format!("{:.1} % (n=24)", right as f64 / 24.0 * 100.0);
        assert!(accuracy.starts_with(&pct), "{b} {name}: {accuracy} vs {pct}");
        let rate = page.text(&format!("{scope} tr[data-grader=label] .pass-rate"));
        assert_eq!(rate, format!("{:.1} %", right as f64 / 24.0 * 100.0), "{b} {name}");
        // Per-label recall by hand for one label.
        let support = want
            .iter()
            .filter(|((e, _), _)| e == "negative")
            .map(|(_, n)| n)
            .sum::<u64>();
        let tp = want.get(&("negative".into(), "negative".into())).copied().unwrap_or(0);
        let recall = page.text(&format!("{scope} tr[data-label=negative] [data-figure=recall]"));
        assert_eq!(recall, format!("{:.3}", tp as f64 / support as f64), "{b} {name}");
    }
    let sloppy_reasons = page.texts(".quality-candidate[data-candidate=sloppy] tr[data-grader=label] .reasons li");
    assert!(
        !sloppy_reasons.is_empty() && sloppy_reasons[0].contains("predicted"),
        "{b}: {sloppy_reasons:?}"
    );
    assert_eq!(
        page.count(".levels"),
        0,
        "{b}: a plain eval run has no per-level section"
    );
    assert!(!body.contains("<script>alert"), "{b}");
}

each_backend!(an_unticked_staged_rollout_sends_no_rollout_requests);
async fn an_unticked_staged_rollout_sends_no_rollout_requests(db: TestStore) {
    let file = label_evalset();
    let mock = start_mock(vec![fast("exact")], vec![file.clone()]).await;
    let app = spawn_app_on(db).await;
    let version = app.store.save_evalset_version(&file).await.unwrap().to_string();
    let exact = app.candidate("exact", &mock.base_url(), "exact").await.to_string();
    let fields = [
        ("evalset_version", version.as_str()),
        ("candidate", exact.as_str()),
        ("concurrency", "4"),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("timeout_secs", "20"),
        ("retries", "0"),
        ("stream", "on"),
        ("load_shape", "fixed"),
    ];
    let r = app.post_form("/runs", &fields).await;
    assert_eq!(r.status().as_u16(), 303, "{}", app.backend);
    let run: i64 = r.headers()["location"]
        .to_str()
        .unwrap()
        .trim_start_matches("/runs/")
        .parse()
        .unwrap();
    assert_eq!(app.run_to_end(run, false).await, RunStatus::Finished);
    assert!(!app.store.get_run(run).await.unwrap().unwrap().config.staged_rollout);
    let records = app.store.list_request_records(run).await.unwrap();
    assert_eq!(records.len(), 12, "{}", app.backend);
    assert!(records.iter().all(|r| r.phase == Phase::Quality), "{}", app.backend);
    let (page, _) = app.page(&format!("/runs/{run}")).await;
    assert!(page.text(".conditions").contains("staged rollout off"));
}

each_backend!(an_ended_run_has_its_page_summaries_stored_before_any_page_is_viewed);
async fn an_ended_run_has_its_page_summaries_stored_before_any_page_is_viewed(db: TestStore) {
    let file = label_evalset();
    let mock = start_mock(vec![fast("exact")], vec![file.clone()]).await;
    let app = spawn_app_on(db).await;
    // As serve does: the runner stores a run's summaries when its execution ends.
    bakeoff::app::pages::summaries::install(&app.state);
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let exact = app.candidate("exact", &mock.base_url(), "exact").await;
    let config = RunConfig {
        concurrency: 2,
        warmup_requests: 0,
        ..RunConfig::default()
    };
    let run = app.run(version, &[exact], config).await;
    assert_eq!(app.run_to_end(run, true).await, RunStatus::Finished);
    let kinds = bakeoff::app::pages::summaries::KINDS;
    for kind in kinds {
        assert!(
            app.store.get_run_summary(run, kind).await.unwrap().is_some(),
            "{}: {kind} stored when the run ended",
            app.backend
        );
    }
    // The first view reads them (and shows the candidate's measured row).
    let stored = app.store.get_run_summary(run, kinds[0]).await.unwrap();
    let (first, _) = app.page(&format!("/runs/{run}")).await;
    assert!(first.text("main").contains("exact"), "{}", app.backend);
    assert_eq!(app.store.get_run_summary(run, kinds[0]).await.unwrap(), stored);
}

each_backend!(what_a_run_stores_when_it_ends_is_what_its_pages_compute_from_its_records_whole);
/// The end step feeds the figures that read chunk times (each level's, the per-level table, the
/// buckets over time) as it reads a candidate's records, and lets those times go: what it stores
/// is what the pages compute on first view from the records held whole, to the last bit. Two
/// runs of the same records (two load levels, retries, a final failure, sends sharing a
/// microsecond); the first ended by the end step, the second's summaries computed by its pages.
async fn what_a_run_stores_when_it_ends_is_what_its_pages_compute_from_its_records_whole(db: TestStore) {
    use bakeoff::domain::run::join_repetition;
    let app = spawn_app_on(db).await;
    let (first, ids) = two_candidate_run(&app, 3).await;
    let config = RunConfig {
        repetitions: 3,
        load: LoadShape::Levels { levels: vec![4, 8] },
        ..RunConfig::default()
    };
    let template = app.store.get_run(first).await.unwrap().unwrap();
    let mut runs = Vec::new();
    for name in ["ended", "viewed"] {
        let run = app
            .store
            .create_run(&NewRun {
                name: name.into(),
                evalset_version_id: template.evalset_version_id,
                candidate_ids: ids.clone(),
                config: config.clone(),
            })
            .await
            .unwrap();
        let mut records = Vec::new();
        for (c, &candidate) in ids.iter().enumerate() {
            for (level, concurrency) in [(0u32, 4u32), (1, 8)] {
                for repetition in 0..3u32 {
                    for (k, case) in ["c3", "c1", "c2"].into_iter().enumerate() {
                        let i = records.len() as i64;
                        let mut r = record(run, candidate, case, "positive", case != "c2");
                        r.concurrency = concurrency;
                        r.repetition = join_repetition(level, repetition, 0);
                        // Quality at the first level; the per-level table reads the other's.
                        r.phase = if level == 0 { Phase::Quality } else { Phase::Throughput };
                        // Three sends a microsecond, keyed apart from the order they are stored in.
                        r.sent_at_us = 1_000_000_000 + (i / 3) * 180_000 + c as i64 * 7;
                        let first_chunk = 40_000 + i * 37;
                        r.first_chunk_us = Some(first_chunk).into();
                        r.first_content_us = Some(first_chunk).into();
                        r.chunks = (0..20)
                            .map(|n| (first_chunk + n * (9_000 + (i * 131 + n * 17) % 2_000), 1))
                            .collect();
                        r.last_token_us = r.chunks.iter().last().map(|(at, _)| at).into();
                        r.end_us = r.last_token_us.get().map(|at| at + 1_000 + k as i64).into();
                        if case == "c2" && repetition == 1 {
                            // Failed, then retried: the retry is final.
                            let mut retry = r.clone();
                            r.error_class = Some(ErrorClass::StreamCut);
                            retry.attempt = 1;
                            retry.sent_at_us += 90_000;
                            records.push(retry);
                        }
                        if case == "c3" && repetition == 2 && level == 1 {
                            r.error_class = Some(ErrorClass::HttpServerError);
                            r.http_status = Some(503);
                        }
                        records.push(r);
                    }
                }
            }
        }
        app.store.append_request_records(&records).await.unwrap();
        app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
        runs.push(run);
    }
    let (ended, viewed) = (runs[0], runs[1]);
    bakeoff::app::pages::summaries::store_when_ended(&app.state, ended)
        .await
        .unwrap();
    // The scorecard page asks for a threshold profile; its summaries do not depend on it.
    app.store
        .save_threshold_profile("gate", "", &[], "test", "test")
        .await
        .unwrap();
    for path in [
        format!("/runs/{viewed}"),
        format!("/runs/{viewed}/cases"),
        format!("/runs/{viewed}/scorecard"),
        format!("/archive/compare?runs={ended},{viewed}"),
    ] {
        app.page(&path).await;
    }
    // What was compared holds the figures that read chunk times: the per-level table's ITL.
    let (page, _) = app.page(&format!("/runs/{ended}")).await;
    assert!(page.text("main").contains("ITL p99"), "{}", app.backend);
    for kind in bakeoff::app::pages::summaries::KINDS {
        let mut stored = Vec::new();
        for run in [ended, viewed] {
            let body = app.store.get_run_summary(run, kind).await.unwrap();
            stored.push(body.unwrap_or_else(|| panic!("{}: {kind} of run {run} stored", app.backend)));
        }
        let (at_end, on_view) = (&stored[0], &stored[1]);
        assert_eq!(
            at_end.replace(&format!("/runs/{ended}"), "/runs/N"),
            on_view.replace(&format!("/runs/{viewed}"), "/runs/N"),
            "{}: {kind}",
            app.backend
        );
    }
}

each_backend!(an_ended_runs_case_rows_follow_the_file_then_the_candidates_whatever_the_send_order);
/// The end step computes the run page a candidate at a time: the rows each candidate gives are
/// merged into one order (eval-set order, then candidate order, then repetition), not the order
/// they were sent in, and the note counts every candidate's measured requests.
async fn an_ended_runs_case_rows_follow_the_file_then_the_candidates_whatever_the_send_order(db: TestStore) {
    let app = spawn_app_on(db).await;
    let (run, ids) = two_candidate_run(&app, 40).await;
    // Sent in reverse: beta before alpha, the file's last case first, 40 repetitions each.
    let mut records = Vec::new();
    for &candidate in ids.iter().rev() {
        for case in ["c3", "c2", "c1"] {
            for repetition in 0..40 {
                let mut r = record(run, candidate, case, "positive", case == "c1");
                r.repetition = repetition;
                r.sent_at_us = 1_000_000_000 + records.len() as i64 * 1_000;
                records.push(r);
            }
        }
    }
    app.store.append_request_records(&records).await.unwrap();
    app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    bakeoff::app::pages::summaries::store_when_ended(&app.state, run)
        .await
        .unwrap();

    let (page, _) = app.page(&format!("/runs/{run}")).await;
    assert!(
        page.text("main")
            .contains("Showing the first 100 of 240 measured requests."),
        "{}",
        app.backend
    );
    let rows: Vec<String> = page.texts("table.cases tbody tr");
    assert_eq!(rows.len(), 100, "{}", app.backend);
    let key = |row: &str| {
        let cells: Vec<&str> = row.split_whitespace().collect();
        (
            cells[0].to_string(),
            cells[1].to_string(),
            cells[2].parse::<u32>().unwrap(),
        )
    };
    let mut expected = Vec::new();
    for (case, candidate, repetitions) in [("c1", "alpha", 40), ("c1", "beta", 40), ("c2", "alpha", 20)] {
        for repetition in 0..repetitions {
            expected.push((case.to_string(), candidate.to_string(), repetition));
        }
    }
    assert_eq!(
        rows.iter().map(|r| key(r)).collect::<Vec<_>>(),
        expected,
        "{}",
        app.backend
    );
    // Both candidates' progress and columns, each from its own records.
    let main = page.text("main");
    assert_eq!(
        main.matches("120 of 120 requests").count(),
        2,
        "{}: {main}",
        app.backend
    );
}

each_backend!(each_case_row_shows_its_own_requests_answer_before_and_after_the_run_ends);
/// The records the run page's parts are computed from hold no answers (a million of them would
/// hold gigabytes): each case row's answer is read by its record once the rows are chosen, on
/// a live run's page and on the page stored when it ends; a retry's row shows that attempt's
/// answer and error, every answer cut at 160 characters (an error at 120) with its control
/// characters made visible and its markup escaped.
async fn each_case_row_shows_its_own_requests_answer_before_and_after_the_run_ends(db: TestStore) {
    let app = spawn_app_on(db).await;
    let (run, ids) = two_candidate_run(&app, 2).await;
    let mut records = Vec::new();
    for &candidate in &ids {
        for case in ["c1", "c2", "c3"] {
            for repetition in 0..2u32 {
                let answer = format!("<b>{case} {candidate} {repetition}</b>\u{7} {}", "and more ".repeat(30));
                let mut r = record(run, candidate, case, &answer, true);
                r.repetition = repetition;
                r.sent_at_us = 1_000_000_000 + records.len() as i64 * 1_000;
                records.push(r);
            }
        }
    }
    // The first try of (c2, alpha, repetition 1) broke off mid-answer; its retry answered whole.
    let mut broken = record(run, ids[0], "c2", "<i>half an answer", false);
    broken.repetition = 1;
    broken.error_class = Some(ErrorClass::StreamCut);
    broken.texts.get_mut().error_detail = Some(format!(
        "<u>stream ended</u>\u{1b} after 3 chunks {}",
        "then nothing ".repeat(20)
    ));
    broken.sent_at_us = 999_000_000;
    records.push(broken);
    let retry = records
        .iter_mut()
        .find(|r| r.candidate_id == ids[0] && &*r.case_id == "c2" && r.repetition == 1)
        .unwrap();
    retry.attempt = 1;
    app.store.append_request_records(&records).await.unwrap();
    app.store.set_run_status(run, RunStatus::Running, None).await.unwrap();

    let names = ["alpha", "beta"];
    // What a row shows of a record's answer: 160 characters and an ellipsis, controls visible.
    let shown = |text: &str, max: usize| {
        let visible = text.replace('\u{7}', "\u{2407}").replace('\u{1b}', "\u{241b}");
        let cut: String = visible.chars().take(max).collect();
        let cut = if visible.chars().count() > max {
            cut + "…"
        } else {
            cut
        };
        cut.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    for when in ["live", "ended"] {
        if when == "ended" {
            app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();
            bakeoff::app::pages::summaries::store_when_ended(&app.state, run)
                .await
                .unwrap();
        }
        let (page, body) = app.page(&format!("/runs/{run}")).await;
        let rows = page.select("table.cases tbody tr");
        assert_eq!(rows.len(), records.len(), "{} {when}", app.backend);
        for row in rows {
            let cells: Vec<String> = row
                .select(&scraper::Selector::parse("td").unwrap())
                .map(|td| {
                    td.text()
                        .collect::<String>()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            let (case, candidate) = (cells[0].as_str(), cells[1].as_str());
            let (repetition, attempt): (u32, u32) = (cells[2].parse().unwrap(), cells[3].parse().unwrap());
            let record = records
                .iter()
                .find(|r| {
                    &*r.case_id == case
                        && names[ids.iter().position(|&id| id == r.candidate_id).unwrap()] == candidate
                        && (r.repetition, r.attempt) == (repetition, attempt)
                })
                .unwrap_or_else(|| panic!("{} {when}: a row of no record: {cells:?}", app.backend));
            assert_eq!(
                cells[7],
                shown(record.output(), 160),
                "{} {when}: {cells:?}",
                app.backend
            );
            let status = match &record.error_detail() {
                Some(detail) => format!("stream_cut {}", shown(detail, 120)),
                None => "ok".to_string(),
            };
            assert_eq!(cells[4], status, "{} {when}: {cells:?}", app.backend);
        }
        assert!(
            body.contains("&lt;i&gt;half an answer") || body.contains("&#60;i&#62;half an answer"),
            "{} {when}",
            app.backend
        );
        assert!(
            !body.contains("<b>c1") && !body.contains("<i>half") && !body.contains("<u>stream"),
            "{} {when}: answers and errors are escaped",
            app.backend
        );
    }
}

// ------------------------------------------------------------------- field extraction

each_backend!(field_extraction_reports_per_field_figures_and_missing_wrong_extra_unusable_counts_escaped);
async fn field_extraction_reports_per_field_figures_and_missing_wrong_extra_unusable_counts_escaped(db: TestStore) {
    let spec: GraderSpec = serde_json::from_str(r#"{"kind":"json-fields"}"#).unwrap();
    let expected = serde_json::json!({"name": "Ada", "year": 1815, "city": "London"});
    let outputs = [
        // every field right
        r#"{"name": "Ada", "year": 1815, "city": "London"}"#,
        // year wrong, city missing
        r#"{"name": "Ada", "year": 1816}"#,
        // everything right plus an extra field
        r#"{"name": "Ada", "year": 1815, "city": "London", "extra": "x"}"#,
        // no JSON at all (and markup that must be escaped)
        "<script>alert(1)</script>",
    ];
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let file = EvalSetFile::parse("tiny.jsonl", crate::support::app::TINY_EVALSET).unwrap();
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let alpha = app.candidate("extractor", "http://127.0.0.1:1/v1", "m").await;
    let run = app.run(version, &[alpha], RunConfig::default()).await;
    let mut records = Vec::new();
    for (i, out) in outputs.iter().enumerate() {
        let mut r = record(run, alpha, &format!("c{}", i + 1), out, false);
        r.repetition = i as u32; // four answers, distinct keys
        r.case_id = "c1".into();
        r.grades = vec![grade(&spec, out, Some(&expected))];
        records.push(r);
    }
    let passed = records.iter().filter(|r| r.grades[0].passed).count();
    app.store.append_request_records(&records).await.unwrap();
    app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();

    let (page, body) = app.page(&format!("/runs/{run}")).await;
    let scope = ".quality-candidate[data-candidate=extractor]";
    let cell = |field: &str, figure: &str| {
        page.text(&format!(
            "{scope} table.per-field tr[data-field={field}] [data-figure={figure}]"
        ))
    };
    // By hand: the answer without JSON is attempted but unusable, so its three fields are wrong
    // (never missing, which would leave precision untouched). name right 3, wrong 1; year right
    // 2, wrong 2 (a wrong value, the unusable answer); city right 2, missing 1, wrong 1; extra
    // given once and never expected.
    for (field, figure, want) in [
        ("name", "precision", "0.750"),
        ("name", "recall", "0.750"),
        ("name", "f1", "0.750"),
        ("year", "precision", "0.500"),
        ("year", "recall", "0.500"),
        ("year", "f1", "0.500"),
        ("city", "precision", "0.667"),
        ("city", "recall", "0.500"),
        ("city", "f1", "0.571"),
        ("year", "correct", "2"),
        ("year", "wrong", "2"),
        ("year", "missing", "0"),
        ("extra", "extra", "1"),
        ("extra", "precision", "0.000"),
    ] {
        assert_eq!(cell(field, figure), want, "{b}: {field} {figure}");
    }
    let fact = |key: &str| page.text(&format!("{scope} [data-figure={key}] dd"));
    assert!(fact("exact").starts_with("25.0 % (1 of 4)"), "{b}: {}", fact("exact"));
    assert!(fact("missing").starts_with('1'), "{b}: {}", fact("missing"));
    assert!(fact("wrong").starts_with('4'), "{b}");
    assert!(fact("unusable").starts_with('1'), "{b}: {}", fact("unusable"));
    assert_eq!(page.count(&format!("{scope} [data-figure=repaired]")), 0, "{b}");
    assert!(fact("extra").starts_with('1'), "{b}");
    assert_eq!(
        page.text(&format!("{scope} tr[data-grader=json-fields] [data-figure=passed]")),
        format!("{passed} / 4"),
        "{b}"
    );
    let reasons = page.texts(&format!("{scope} tr[data-grader=json-fields] .reasons li"));
    assert!(
        reasons.iter().any(|r| r.contains("<script>alert(1)</script>")),
        "{b}: {reasons:?}"
    );
    assert!(
        !body.contains("<script>alert(1)</script>"),
        "{b}: model text is escaped"
    );
    assert!(
        body.contains("&lt;script&gt;alert(1)") || body.contains("&#60;script&#62;alert(1)"),
        "{b}: shown as text"
    );
    assert_eq!(
        page.count(&format!("{scope} table.confusion")),
        0,
        "{b}: no label grader"
    );
}

// --------------------------------------------------------------------- load shapes

each_backend!(a_sweep_over_prompt_bins_shows_a_row_per_level_and_bin_with_the_knee);
async fn a_sweep_over_prompt_bins_shows_a_row_per_level_and_bin_with_the_knee(db: TestStore) {
    let two_slots = ModelProfile {
        ttft_ms: 20.0,
        inter_token_ms: Some(4.0),
        slots: Some(2),
        ..ModelProfile::named("two-slots")
    };
    let mock = start_mock(vec![two_slots], Vec::new()).await;
    let file = bakeoff::engine::endpoint_measure::synthetic_evalset(&[16, 64], 8, 16).unwrap();
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let c = app.candidate("two-slots", &mock.base_url(), "two-slots").await;
    let config = RunConfig {
        concurrency: 1,
        warmup_requests: 2,
        max_tokens: Some(16),
        retries: 0,
        staged_rollout: false,
        load: LoadShape::Sweep {
            max_concurrency: 4,
            ttft_factor: 2.0,
            min_gain: 0.05,
        },
        ..RunConfig::default()
    };
    let run = app.run(version, &[c], config.clone()).await;
    assert_eq!(app.run_to_end(run, true).await, RunStatus::Finished, "{b}");
    let (page, _) = app.page(&format!("/runs/{run}")).await;

    let rows = page.select(".levels-latency tbody tr");
    let keys: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            let cells: Vec<String> = r
                .children()
                .filter_map(scraper::ElementRef::wrap)
                .map(|e| crate::support::app::text_of(&e))
                .collect();
            // A level past saturation carries its badge in the load cell (issue 47).
            (
                cells[1].trim_end_matches(" past saturation").to_string(),
                cells[2].clone(),
            )
        })
        .collect();
    // Two slots are full at c=2: c=4 only queues (throughput flat while load doubled).
    assert!(
        page.select(".levels-latency tbody tr[data-load=\"c=4\"] [data-past-saturation]")
            .len()
            == 2,
        "{b}: c=4 labelled past saturation in both bins"
    );
    let want: Vec<(String, String)> = ["c=1", "c=2", "c=4"]
        .iter()
        .flat_map(|l| ["16 tokens", "64 tokens"].map(|p| (l.to_string(), p.to_string())))
        .collect();
    assert_eq!(keys, want, "{b}: one row per level and prompt bin");
    // Warm-ups excluded: each level sends every case once, 8 per bin.
    for r in &rows {
        let ok = crate::support::app::text_of(&r.children().filter_map(scraper::ElementRef::wrap).nth(3).unwrap());
        assert_eq!(ok, "8/8", "{b}");
    }
    assert_eq!(page.count(".levels-speed tbody tr"), 6, "{b}");
    let heads = page.texts(".levels-speed thead th");
    assert!(
        heads
            .iter()
            .any(|h| h.contains("aggregate tok/s") && h.contains("measured window")),
        "{b}"
    );
    assert!(heads.iter().any(|h| h.contains("decode tok/s/stream p50")), "{b}");
    assert!(!heads.iter().any(|h| h.contains("goodput")), "{b}: no SLO, no goodput");
    let latency_heads = page.texts(".levels-latency thead th");
    assert!(
        latency_heads
            .iter()
            .any(|h| h.contains("TTFT p95") && h.contains("first non-empty token")),
        "{b}"
    );
    assert!(page.text(".knee-rule").contains("within 2× the p95 TTFT at c=1"), "{b}");
    assert!(page.text(".knee-rule").contains("at least 5 %"), "{b}");

    // The knees shown are the figures' knees, one per prompt bin.
    let records = app.store.list_request_records(run).await.unwrap();
    let bins: BTreeMap<&str, Option<u32>> = file
        .cases
        .iter()
        .map(|c| (c.id.as_str(), bakeoff::domain::evalset::prompt_bin(&c.tags)))
        .collect();
    let figures = run_figures(&records, &config, c, |case| bins.get(case).copied().flatten());
    assert_eq!(figures.knees.len(), 2, "{b}");
    let shown = page.select(".knees li");
    assert_eq!(shown.len(), 2, "{b}");
    for ((bin, knee), li) in figures.knees.iter().zip(&shown) {
        let text = crate::support::app::text_of(li);
        assert!(
            text.contains(&format!("({} tokens prompts)", bin.unwrap())),
            "{b}: {text}"
        );
        assert!(text.contains(&format!("knee at c={}", knee.concurrency)), "{b}: {text}");
        assert_eq!(li.value().attr("data-rule"), Some(knee.rule.as_str()), "{b}");
    }
    assert!(page.text(".conditions").contains("concurrency sweep c=1 → 4"), "{b}");
    assert!(
        page.text("table.results caption").contains("every level pooled"),
        "{b}: the first table says it pools levels"
    );

    // One candidate, two prompt sizes: two curves in the candidate's hue, told apart by shade
    // and dash (the second a darker, dashed line) on the run page's charts.
    use bakeoff::domain::palette;
    let own = palette::CandidateColours::of([c]).rgb(c);
    let second = palette::shade(own, 1);
    assert_ne!(second, own);
    let strokes = |svg: &str| -> std::collections::BTreeSet<String> {
        svg.split("stroke=\"")
            .skip(1)
            .filter_map(|s| s.split('"').next())
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let svg = page.select("#chart-throughput .chart-svg")[0].html();
    let drawn = strokes(&svg);
    // The second size's line is dashed: drawn as many short segments of its shade.
    let segments = svg
        .matches(&format!("stroke=\"{}\"", palette::hex_of(second).to_ascii_uppercase()))
        .count()
        + svg.matches(&format!("stroke=\"{}\"", palette::hex_of(second))).count();
    assert!(
        segments > 4,
        "{b}: the 64-token curve is not dashed ({segments} strokes)"
    );
    for colour in [palette::hex_of(own), palette::hex_of(second)] {
        assert!(drawn.contains(&colour), "{b}: {colour} not drawn in {drawn:?}");
    }
    for name in ["two-slots · 16-token prompts", "two-slots · 64-token prompts"] {
        assert!(page.text("#chart-throughput .chart-svg").contains(name), "{b}: {name}");
    }
    // The latency chart too: its p95 lines are dashed already, so the shade tells the sizes
    // apart there.
    let drawn = strokes(&page.select("#chart-latency .chart-svg")[0].html());
    for colour in [palette::hex_of(own), palette::hex_of(second)] {
        assert!(drawn.contains(&colour), "{b}: {colour} not drawn in {drawn:?}");
    }
    let dh = (palette::hue(second) - palette::hue(own)).abs();
    assert!(dh.min(360.0 - dh) < 4.0, "{b}: the shade keeps the candidate's hue");
}

each_backend!(a_poisson_rate_run_shows_goodput_under_its_slos_and_schedule_lag);
async fn a_poisson_rate_run_shows_goodput_under_its_slos_and_schedule_lag(db: TestStore) {
    let mock = start_mock(vec![fast("steady")], Vec::new()).await;
    let file = bakeoff::engine::endpoint_measure::synthetic_evalset(&[16], 10, 8).unwrap();
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let c = app.candidate("steady", &mock.base_url(), "steady").await;
    let config = RunConfig {
        warmup_requests: 1,
        max_tokens: Some(8),
        retries: 0,
        staged_rollout: false,
        load: LoadShape::Rate {
            per_second: 40.0,
            poisson: true,
        },
        slo: bakeoff::domain::run::Slo {
            ttft_ms: Some(30_000.0),
            e2e_ms: Some(60_000.0),
            ..Default::default()
        },
        ..RunConfig::default()
    };
    let run = app.run(version, &[c], config).await;
    assert_eq!(app.run_to_end(run, true).await, RunStatus::Finished, "{b}");
    let (page, _) = app.page(&format!("/runs/{run}")).await;
    assert_eq!(page.count(".levels-speed tbody tr"), 1, "{b}");
    assert_eq!(
        page.attr(".levels-speed tbody tr", "data-load").as_deref(),
        Some("40 req/s Poisson"),
        "{b}"
    );
    assert!(
        page.text(".levels .slo").contains("TTFT ≤ 30000 ms, E2E ≤ 60000 ms"),
        "{b}"
    );
    let heads = page.texts(".levels-speed thead th");
    let goodput = heads
        .iter()
        .position(|h| h.starts_with("goodput req/s"))
        .expect("a goodput column");
    let attainment = heads
        .iter()
        .position(|h| h.starts_with("SLO attainment"))
        .expect("attainment");
    let cells = page.texts(".levels-speed tbody tr td");
    // Cells after the row header: load, prompt, then the columns.
    assert!(cells[goodput - 1].ends_with("req/s"), "{b}: {:?}", cells);
    assert_eq!(
        cells[attainment - 1],
        "100.0 % [72.2–100.0] (10 of 10)",
        "{b}: every request met the generous SLOs (Wilson 95 % interval)"
    );
    // Open loop: the harness reports schedule lag, not client queue.
    assert_eq!(page.count("[data-harness=schedule_lag]"), 1, "{b}");
    assert!(
        page.text("[data-harness=schedule_lag]")
            .contains("actual − planned send time"),
        "{b}"
    );
    assert_eq!(page.count("[data-harness=client_queue]"), 0, "{b}");
    assert!(page.text(".conditions").contains("Poisson rate of 40 req/s"), "{b}");
}

// ------------------------------------------------------------------ export and import

each_backend_pair!(the_harness_report_travels_with_an_exported_run_over_http);
async fn the_harness_report_travels_with_an_exported_run_over_http(from: TestStore, to: TestStore) {
    let from = spawn_app_on(from).await;
    let to = spawn_app_on(to).await;
    let report = harness(true);
    let run = from.finished_run("exported", Some(&report)).await;
    let body = from
        .get(&format!("/runs/{run}/export.json"))
        .await
        .text()
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["harness"]["unreliable"], true, "{}", from.backend);
    assert_eq!(json["harness"]["cpu_s_per_million_tokens"], 25.0);

    let export = bakeoff::app::transfer::parse_export(&body).unwrap();
    let imported = bakeoff::app::transfer::import_run(to.store.as_ref(), &export)
        .await
        .unwrap()
        .run_id();
    assert_eq!(
        to.store.get_run_harness(imported).await.unwrap(),
        Some(report.clone()),
        "{} → {}",
        from.backend,
        to.backend
    );
    let (page, _) = to.page(&format!("/runs/{imported}")).await;
    assert!(page.text(".unreliable-warning").contains("client queue wait 25.0 ms"));

    // An export written before the field existed still imports, without a report.
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("harness");
    let export = bakeoff::app::transfer::parse_export(&old.to_string()).unwrap();
    let imported = bakeoff::app::transfer::import_run(to.store.as_ref(), &export)
        .await
        .unwrap()
        .run_id();
    assert_eq!(to.store.get_run_harness(imported).await.unwrap(), None);
}

#[tokio::test]
async fn the_harness_report_travels_with_an_exported_run_through_the_cli() {
    // The CLI writes and reads the same field as HTTP.
    let (from_url, _a) = crate::support::db::sqlite_url();
    let (to_url, _b) = crate::support::db::sqlite_url();
    let from = crate::support::db::open(&from_url).await;
    let file = EvalSetFile::parse("tiny.jsonl", crate::support::app::TINY_EVALSET).unwrap();
    let version = from.save_evalset_version(&file).await.unwrap();
    let spec = CandidateDraft {
        name: "cli".into(),
        provider: "openai-chat".into(),
        base_url: "http://127.0.0.1:1/v1".into(),
        model: "m".into(),
        ..Default::default()
    }
    .validate(None)
    .unwrap();
    let cand = from
        .create_candidate(&crate::support::checked::admin_new(&spec))
        .await
        .unwrap();
    let run = from
        .create_run(&NewRun {
            name: "cli".into(),
            evalset_version_id: version,
            candidate_ids: vec![cand],
            config: RunConfig::default(),
        })
        .await
        .unwrap();
    from.append_request_records(&[record(run, cand, "c1", "positive", true)])
        .await
        .unwrap();
    from.set_run_harness(run, &harness(false)).await.unwrap();
    from.set_run_status(run, RunStatus::Finished, None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.json");
    assert!(cli::export_run(&from_url, run, &path).contains("harness report"));
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(written["harness"]["host"], "bench-host");
    let id = cli::import_run(&to_url, &path);
    let to = crate::support::db::open(&to_url).await;
    assert_eq!(to.get_run_harness(id).await.unwrap(), Some(harness(false)));
}

// ------------------------------------------------------------- drill-down grid, charts

/// The texts of a chart's hover marks (`<title>` of each focusable point).
fn chart_titles(page: &crate::support::app::Page, chart: &str) -> Vec<String> {
    page.texts(&format!("#{chart} .point-title title"))
}

/// Case ids of the drill-down's grid rows, in order.
fn grid_cases(page: &crate::support::app::Page) -> Vec<String> {
    page.select("table.case-grid tbody tr")
        .iter()
        .map(|r| r.value().attr("data-grid-case").unwrap_or_default().to_string())
        .collect()
}

each_backend!(the_drill_down_grid_shows_each_final_outcome_and_its_filters_narrow_cases_and_attempts);
async fn the_drill_down_grid_shows_each_final_outcome_and_its_filters_narrow_cases_and_attempts(db: TestStore) {
    let file = label_evalset();
    // Slow enough that the run spans several of the over-time charts' intervals (at least
    // 0.5 s each): six rounds of at least 300 ms per candidate.
    let slow = |name: &str| ModelProfile {
        ttft_ms: 300.0,
        ..fast(name)
    };
    let sloppy = ModelProfile {
        accuracy: 0.5,
        ..slow("sloppy")
    };
    let mock = start_mock(vec![sloppy, slow("exact")], vec![file.clone()]).await;
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let sloppy = app.candidate("sloppy", &mock.base_url(), "sloppy").await;
    let exact = app.candidate("exact", &mock.base_url(), "exact").await;
    let config = RunConfig {
        concurrency: 2,
        warmup_requests: 0,
        retries: 0,
        staged_rollout: false,
        ..RunConfig::default()
    };
    let run = app.run(version, &[sloppy, exact], config).await;
    assert_eq!(app.run_to_end(run, true).await, RunStatus::Finished, "{b}");
    let records = app.store.list_request_records(run).await.unwrap();
    let passed = |candidate: i64, case: &str| {
        let r = records
            .iter()
            .find(|r| r.candidate_id == candidate && &*r.case_id == case)
            .expect("a record per case and candidate");
        r.grades.iter().all(|g| g.passed)
    };
    let wrong: Vec<String> = file
        .cases
        .iter()
        .map(|c| c.id.clone())
        .filter(|c| !passed(sloppy, c))
        .collect();
    assert!(
        !wrong.is_empty() && wrong.len() < 12,
        "{b}: the sloppy model is wrong sometimes"
    );
    assert!(file.cases.iter().all(|c| passed(exact, &c.id)), "{b}");

    // The grid: a row per case of the page, a cell per candidate with the final outcome in
    // words (and the score), linking to its attempts.
    let (page, _) = app.page(&format!("/runs/{run}/cases")).await;
    assert_eq!(
        page.texts("table.case-grid thead th"),
        ["Case", "Expected", "sloppy", "exact"],
        "{b}"
    );
    let shown = grid_cases(&page);
    assert_eq!(shown.len(), 10, "{b}: ten cases a page");
    for case in &shown {
        for (id, name) in [(sloppy, "sloppy"), (exact, "exact")] {
            let cell = format!("tr[data-grid-case={case}] td[data-grid-candidate={name}]");
            let (outcome, text) = if passed(id, case) {
                ("pass", "✓ pass score 1.00")
            } else {
                ("fail", "✗ fail score 0.00")
            };
            assert_eq!(
                page.attr(&cell, "data-outcome").as_deref(),
                Some(outcome),
                "{b} {case} {name}"
            );
            // The outcome, then the answer itself (issue 54: expected vs got in the grid).
            assert!(
                page.text(&cell).starts_with(text),
                "{b} {case} {name}: {}",
                page.text(&cell)
            );
            let href = page.attr(&format!("{cell} a"), "href").expect("a link to the attempts");
            let target = href.trim_start_matches('#');
            assert_eq!(
                page.attr(&format!("section.attempt[id='{target}']"), "data-candidate")
                    .as_deref(),
                Some(name),
                "{b}: {case} {name}'s cell leads to its attempt"
            );
        }
    }
    // Attempts fold to one line each, expanding to the full output and grades.
    let line = page.text(&format!(
        "#case-{} section.attempt[data-candidate=exact] > details > summary",
        shown[0]
    ));
    assert!(
        line.contains("rep. 0 · attempt 0") && line.contains("score 1.00") && line.contains("TTFT"),
        "{b}: {line}"
    );
    assert_eq!(page.count("section.attempt > details > summary"), 20, "{b}");

    // Candidate: one column, its attempts only.
    let (page, _) = app.page(&format!("/runs/{run}/cases?candidate={sloppy}")).await;
    assert_eq!(
        page.texts("table.case-grid thead th"),
        ["Case", "Expected", "sloppy"],
        "{b}"
    );
    let candidates: Vec<String> = page
        .select("section.attempt")
        .iter()
        .map(|s| s.value().attr("data-candidate").unwrap_or_default().to_string())
        .collect();
    assert!(
        candidates.len() == 10 && candidates.iter().all(|c| c == "sloppy"),
        "{b}: {candidates:?}"
    );
    assert!(
        page.attr(&format!("#f-candidate option[value='{sloppy}']"), "selected")
            .is_some()
    );

    // Outcome: the cases a candidate got wrong; the exact one got none wrong.
    let (page, _) = app.page(&format!("/runs/{run}/cases?outcome=fail")).await;
    assert_eq!(
        grid_cases(&page),
        wrong.iter().take(10).cloned().collect::<Vec<_>>(),
        "{b}"
    );
    let (page, _) = app
        .page(&format!("/runs/{run}/cases?outcome=fail&candidate={exact}"))
        .await;
    assert!(grid_cases(&page).is_empty() && page.count(".empty") > 0, "{b}");
    let (page, _) = app
        .page(&format!("/runs/{run}/cases?outcome=pass&candidate={sloppy}"))
        .await;
    assert_eq!(
        page.text("#matching"),
        format!("{} of 12 cases match.", 12 - wrong.len()),
        "{b}"
    );

    // Failures only: the failing cases, and in them only the failing attempts (the exact
    // candidate's right answers to the same cases are not listed).
    let (page, _) = app.page(&format!("/runs/{run}/cases?failures=on")).await;
    assert_eq!(
        grid_cases(&page),
        wrong.iter().take(10).cloned().collect::<Vec<_>>(),
        "{b}"
    );
    let listed = page.select("section.attempt");
    assert_eq!(
        listed.len(),
        wrong.len().min(10),
        "{b}: one failing attempt per failing case"
    );
    assert!(
        listed
            .iter()
            .all(|s| s.value().attr("data-candidate") == Some("sloppy")),
        "{b}: no passing attempt listed"
    );
    assert_eq!(page.count("section.attempt .badge.pass"), 0, "{b}");
    // The grid still says how the other candidate did, without a link to unlisted attempts.
    let case = &wrong[0];
    assert_eq!(
        page.text(&format!("tr[data-grid-case={case}] td[data-grid-candidate=exact]")),
        "✓ pass score 1.00",
        "{b}: no answer listed for an unlisted candidate"
    );
    assert_eq!(
        page.count(&format!("tr[data-grid-case={case}] td[data-grid-candidate=exact] a")),
        0,
        "{b}"
    );

    // Text: case ids, expected values and answers, ignoring case.
    let (page, _) = app.page(&format!("/runs/{run}/cases?q=t03")).await;
    assert_eq!(grid_cases(&page), ["t03"], "{b}");
    let neutral: Vec<String> = file
        .cases
        .iter()
        .filter(|c| {
            c.expected.as_ref().unwrap().as_str() == Some("neutral")
                || records
                    .iter()
                    .any(|r| *r.case_id == c.id && r.output().to_lowercase().contains("neutral"))
        })
        .map(|c| c.id.clone())
        .collect();
    assert!(neutral.len() >= 4, "{b}: every third case expects neutral");
    for q in ["neutral", "NEUTRAL"] {
        let (page, _) = app.page(&format!("/runs/{run}/cases?q={q}")).await;
        assert_eq!(
            page.text("#matching"),
            format!("{} of 12 cases match.", neutral.len()),
            "{b}: {q}"
        );
        assert_eq!(
            grid_cases(&page),
            neutral.iter().take(10).cloned().collect::<Vec<_>>(),
            "{b}: {q}"
        );
        assert_eq!(page.attr("#f-q", "value").as_deref(), Some(q), "{b}: echoed back");
    }
    let (page, _) = app.page(&format!("/runs/{run}/cases?q=50%25_off")).await;
    assert!(grid_cases(&page).is_empty(), "{b}: % and _ are literal");

    // Bad input: a clear error naming the field.
    for (q, field) in [
        ("outcome=maybe", "outcome"),
        ("candidate=999999", "candidate"),
        ("candidate=x", "candidate"),
    ] {
        let r = app.get(&format!("/runs/{run}/cases?{q}")).await;
        assert_eq!(r.status().as_u16(), 400, "{b}: {q}");
        assert!(r.text().await.unwrap().contains(field), "{b}: {q} names {field}");
    }
    let long = "x".repeat(201);
    let r = app.get(&format!("/runs/{run}/cases?q={long}")).await;
    assert_eq!(r.status().as_u16(), 400, "{b}");
    assert!(r.text().await.unwrap().contains("at most 200 characters"), "{b}");

    // The run page: pass-rate bars say what the graders table says, and the run over time.
    let (page, _) = app.page(&format!("/runs/{run}")).await;
    let bars = chart_titles(&page, "chart-pass-rates");
    assert_eq!(bars.len(), 2, "{b}: {bars:?}");
    for name in ["sloppy", "exact"] {
        let scope = format!(".quality-candidate[data-candidate={name}] tr[data-grader=label]");
        let want = format!(
            "label · {name}: {} ({})",
            page.text(&format!("{scope} .pass-rate")),
            page.text(&format!("{scope} [data-figure=passed]"))
        );
        assert!(bars.contains(&want), "{b}: {want} in {bars:?}");
    }
    over_time_matches_its_table(&page, &records, b);
    let (live, _) = app.page(&format!("/runs/{run}/live")).await;
    assert_eq!(live.count("#chart-tok-s-over-time"), 1, "{b}: in the live fragment too");
}

/// The over-time charts' hover texts are its table's figures, and the table's tok/s add up to
/// the output tokens of the successful measured requests.
fn over_time_matches_its_table(
    page: &crate::support::app::Page,
    records: &[bakeoff::domain::run::RequestRecord],
    b: &str,
) {
    let tok_s = chart_titles(page, "chart-tok-s-over-time");
    let ttft = chart_titles(page, "chart-ttft-over-time");
    let rows = page.select("table.over-time tbody tr");
    assert!(!rows.is_empty(), "{b}");
    // A run spanning fewer than three of the charts' intervals (0.5 s at least) draws no trend:
    // a sentence says so, and the table keeps the figures (issue 54).
    let floored = page.count("[data-chart-floor]") == 1;
    if floored {
        assert!(tok_s.is_empty() && ttft.is_empty(), "{b}: a chart below the floor");
        let intervals: std::collections::HashSet<&str> =
            rows.iter().filter_map(|r| r.value().attr("data-interval")).collect();
        assert!(intervals.len() < 3, "{b}: {intervals:?}");
    }
    let mut tokens = 0.0;
    let mut rounding = 0.0;
    for row in &rows {
        let candidate = row.value().attr("data-candidate").unwrap();
        let interval = row.value().attr("data-interval").unwrap();
        let cell = |figure: &str| {
            let sel = scraper::Selector::parse(&format!("[data-figure={figure}]")).unwrap();
            crate::support::app::text_of(&row.select(&sel).next().unwrap())
        };
        let rate = cell("tok_s");
        if rate == "—" {
            assert!(
                !tok_s
                    .iter()
                    .any(|t| t.starts_with(&format!("{candidate}, {interval}:"))),
                "{b}"
            );
            continue;
        }
        assert!(
            floored || tok_s.contains(&format!("{candidate}, {interval}: {rate}")),
            "{b}: {candidate} {interval} {rate} in {tok_s:?}"
        );
        if !floored && cell("ttft") != "—" {
            assert!(
                ttft.contains(&format!("{candidate}, {interval}: {}", cell("ttft"))),
                "{b}: {candidate} {interval}"
            );
        }
        let (start, end) = interval.trim_end_matches(" s").split_once('–').unwrap();
        let width = end.parse::<f64>().unwrap() - start.parse::<f64>().unwrap();
        let rate = rate.trim_end_matches(" tok/s").parse::<f64>().unwrap();
        tokens += rate * width;
        // Each end is shown rounded (to its last digit): the width is known only that well.
        let half_unit = |shown: &str| 0.5 * 10f64.powi(-(shown.split_once('.').map_or(0, |(_, d)| d.len()) as i32));
        rounding += rate * (half_unit(start) + half_unit(end));
    }
    let want: u32 = records
        .iter()
        .filter(|r| !r.is_warmup && r.succeeded())
        .map(|r| match r.chunks.is_empty() {
            true => r.output_tokens.unwrap_or(0),
            false => r.chunks.iter().map(|c| c.1).sum(),
        })
        .sum();
    // Three significant digits a figure.
    assert!(
        (tokens - f64::from(want)).abs() <= f64::from(want) * 0.01 + 1.0 + rounding,
        "{b}: {tokens} vs {want} tokens (± {rounding:.2} from the intervals' rounding)"
    );
}

each_backend!(a_sweep_run_page_charts_throughput_and_latency_vs_concurrency_with_the_tables_figures);
async fn a_sweep_run_page_charts_throughput_and_latency_vs_concurrency_with_the_tables_figures(db: TestStore) {
    let two_slots = ModelProfile {
        ttft_ms: 20.0,
        inter_token_ms: Some(4.0),
        slots: Some(2),
        ..ModelProfile::named("two-slots")
    };
    let mock = start_mock(vec![two_slots], Vec::new()).await;
    let file = bakeoff::engine::endpoint_measure::synthetic_evalset(&[16], 8, 16).unwrap();
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let c = app.candidate("two-slots", &mock.base_url(), "two-slots").await;
    let config = RunConfig {
        concurrency: 1,
        warmup_requests: 0,
        max_tokens: Some(16),
        retries: 0,
        staged_rollout: false,
        load: LoadShape::Sweep {
            max_concurrency: 4,
            ttft_factor: 2.0,
            min_gain: 0.05,
        },
        ..RunConfig::default()
    };
    let run = app.run(version, &[c], config).await;
    assert_eq!(app.run_to_end(run, true).await, RunStatus::Finished, "{b}");
    let (page, _) = app.page(&format!("/runs/{run}")).await;

    assert_eq!(page.count("section.run-charts"), 1, "{b}");
    let throughput = chart_titles(&page, "chart-throughput");
    let latency = chart_titles(&page, "chart-latency");
    assert!(
        page.text("#chart-throughput figcaption").contains("knee"),
        "{b}: the knee is named"
    );
    let rows = page.select(".levels-latency tbody tr");
    assert_eq!(rows.len(), 3, "{b}: c=1, 2, 4");
    let speed = page.select(".levels-speed tbody tr");
    let cells = |r: &scraper::ElementRef<'_>| -> Vec<String> {
        r.children()
            .filter_map(scraper::ElementRef::wrap)
            .map(|e| crate::support::app::text_of(&e))
            .collect()
    };
    let knee = page.text(".knees .knee-value");
    let series = "two-slots · 16-token prompts";
    for (lat, spd) in rows.iter().zip(&speed) {
        let (l, s) = (cells(lat), cells(spd));
        let level = l[1]
            .trim_end_matches(" past saturation")
            .trim_start_matches("c=")
            .to_string();
        for (label, value) in [
            ("TTFT p50", &l[5]),
            ("TTFT p95", &l[6]),
            ("E2E p50", &l[8]),
            ("E2E p95", &l[9]),
        ] {
            let want = format!("{series} · {label}: {value} at c={level}");
            assert!(latency.contains(&want), "{b}: {want} in {latency:?}");
        }
        let aggregate = s[7].split(" tok/s").next().unwrap();
        let want = format!(
            "{series}: {aggregate} tok/s aggregate (steady window) at c={level}{}",
            if knee == l[1] { " — the knee" } else { "" }
        );
        assert!(throughput.contains(&want), "{b}: {want} in {throughput:?}");
    }
    assert_eq!(throughput.len(), 3, "{b}");
    assert_eq!(latency.len(), 12, "{b}: four figures at three levels");
    for axis in [
        "concurrency (requests in flight, log₂ scale)",
        "latency (ms), successful requests",
    ] {
        assert!(
            page.text("#chart-latency .chart-svg").contains(axis),
            "{b}: the axis says {axis}"
        );
    }
    let records = app.store.list_request_records(run).await.unwrap();
    over_time_matches_its_table(&page, &records, b);

    // Each streamed attempt of the drill-down has its token timeline, from its chunk timings.
    let (cases, body) = app.page(&format!("/runs/{run}/cases")).await;
    let streamed = records
        .iter()
        .filter(|r| r.chunks.len() >= bakeoff::app::pages::charts::TIMELINE_MIN_CHUNKS)
        .count();
    assert_eq!(
        cases.count("section.attempt"),
        records.len(),
        "{b}: every attempt on one page"
    );
    assert!(streamed > 0, "{b}: 16-token answers stream in several chunks");
    // The first attempt of each case draws it; the others link to it, fetched when opened.
    let links: Vec<String> = cases
        .select("section.attempt .token-timeline-link a[data-timeline]")
        .iter()
        .filter_map(|a| a.value().attr("href").map(str::to_string))
        .collect();
    assert_eq!(
        cases.count("section.attempt .token-timeline svg") + links.len(),
        streamed,
        "{b}"
    );
    assert!(!links.is_empty(), "{b}: later attempts link to theirs");
    for href in links.iter().take(3) {
        let (fragment, _) = app.page(href).await;
        assert_eq!(fragment.count(".token-timeline svg"), 1, "{b}: {href}");
    }
    // A level's attempts say their load, and the repetition within it.
    let lines = cases.texts("section.attempt > details > summary");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("throughput · c=2 · rep. 0 · attempt 0")),
        "{b}: {lines:?}"
    );
    let first = &cases
        .select("article.case")
        .first()
        .unwrap()
        .value()
        .attr("data-case")
        .unwrap()
        .to_string();
    let r = records
        .iter()
        .find(|r| *r.case_id == **first && r.attempt == 0 && r.repetition == 0)
        .unwrap();
    let titles = cases.texts(&format!(
        "#case-{first} section.attempt .token-timeline .point-title title"
    ));
    let want = format!(
        "first token at {} ms",
        bakeoff::domain::format::significant(r.chunks.first().unwrap().0 as f64 / 1000.0)
    );
    assert!(titles.contains(&want), "{b}: {want} in {titles:?}");
    assert!(!body.contains("<script>alert"), "{b}");
}

each_backend!(a_case_of_many_attempts_lists_its_failed_ones_first_and_reads_the_rest_on_demand);
/// A case measured 30 times by one candidate (5 failed, 3 wrong) and once by another: the page
/// lists 24 attempts, every failed and wrong one among them, says how many it left out, grades
/// the grid cells from all 30 final attempts, and each listed attempt's timeline is read on its
/// own (the outline → whole-record path), 404 for an attempt that was never measured.
async fn a_case_of_many_attempts_lists_its_failed_ones_first_and_reads_the_rest_on_demand(db: TestStore) {
    let app = spawn_app_on(db).await;
    let b = app.backend;
    let file = EvalSetFile::parse("tiny.jsonl", crate::support::app::TINY_EVALSET).unwrap();
    let version = app.store.save_evalset_version(&file).await.unwrap();
    let many = app.candidate("many", "http://127.0.0.1:1/v1", "many").await;
    let once = app.candidate("once", "http://127.0.0.1:1/v1", "once").await;
    let run = app.run(version, &[many, once], RunConfig::default()).await;
    let mut records = Vec::new();
    for repetition in 0..30u32 {
        let wrong = repetition % 10 == 4;
        let mut r = record(run, many, "c1", if wrong { "negative" } else { "positive" }, !wrong);
        r.repetition = repetition;
        r.sent_at_us += i64::from(repetition) * 1_000;
        r.chunks = (0..8).map(|i| (40_000 + i * 25_000, 1)).collect();
        if repetition % 6 == 5 {
            r.error_class = Some(bakeoff::domain::run::ErrorClass::StreamCut);
            r.grades.clear();
        }
        records.push(r);
    }
    records.push(record(run, once, "c1", "positive", true));
    app.store.append_request_records(&records).await.unwrap();
    app.store.set_run_status(run, RunStatus::Finished, None).await.unwrap();

    let (page, _) = app.page(&format!("/runs/{run}/cases")).await;
    let attrs = |css: &str, name: &str| -> Vec<String> {
        page.select(css)
            .iter()
            .filter_map(|e| e.value().attr(name).map(str::to_string))
            .collect()
    };
    let statuses = attrs("#case-c1 section.attempt", "data-status");
    assert_eq!(statuses.len(), 24, "{b}: at most 24 attempts a case");
    assert_eq!(
        statuses.iter().filter(|s| *s == "stream_cut").count(),
        5,
        "{b}: every failed attempt listed"
    );
    let text = page.text("#case-c1");
    assert!(
        text.contains("8 of 31 attempts failed") && text.contains("showing 24 of them, failed ones first"),
        "{b}: {}",
        &text[..text.len().min(300)]
    );
    // 30 final attempts: 22 right, 3 wrong, 5 failed (a failed request scores 0).
    let many_cell = page.text("tr[data-grid-case=c1] td[data-grid-candidate=many]");
    assert!(
        many_cell.starts_with("⚠ stream_cut 22 of 30 passed · score 0.73"),
        "{b}: {many_cell}"
    );
    let once_cell = page.text("tr[data-grid-case=c1] td[data-grid-candidate=once]");
    assert!(once_cell.starts_with("✓ pass score 1.00"), "{b}: {once_cell}");

    // Attempts after the first link to their timeline, drawn from that one record.
    let links = attrs("#case-c1 a[data-timeline]", "href");
    assert!(!links.is_empty(), "{b}: later attempts link to their timelines");
    for href in links.iter().take(3) {
        let body = app.text_ok(href).await;
        assert!(body.contains("<svg"), "{b} {href}: {body}");
    }
    let never = format!("/runs/{run}/timeline?candidate={many}&case=c1&phase=quality&repetition=99&attempt=0");
    assert_eq!(app.get(&never).await.status(), 404, "{b}");
}

/// A created run of candidates alpha and beta over the 3-case eval set, `repetitions` each, with
/// no record yet; its id and the candidates'.
async fn two_candidate_run(app: &TestApp, repetitions: u32) -> (i64, Vec<i64>) {
    let version = app.create_evalset().await;
    let ids = vec![
        app.create_candidate("alpha", "http://127.0.0.1:1/v1").await,
        app.create_candidate("beta", "http://127.0.0.1:1/v1").await,
    ];
    let run = app
        .store
        .create_run(&NewRun {
            name: "two candidates".into(),
            evalset_version_id: version,
            candidate_ids: ids.clone(),
            config: RunConfig {
                repetitions,
                ..RunConfig::default()
            },
        })
        .await
        .unwrap();
    (run, ids)
}

/// A run of two candidates × 3 cases × `repetitions`, stored (not executed) and left running.
async fn stored_live_run(app: &TestApp, repetitions: u32) -> (i64, Vec<i64>) {
    let (run, ids) = two_candidate_run(app, repetitions).await;
    let mut records = Vec::new();
    for &candidate in &ids {
        for case in ["c1", "c2", "c3"] {
            for repetition in 0..repetitions {
                let mut r = record(run, candidate, case, "positive", true);
                r.repetition = repetition;
                r.sent_at_us = 1_000_000_000 + records.len() as i64 * 1_000;
                records.push(r);
            }
        }
    }
    app.store.append_request_records(&records).await.unwrap();
    app.store.set_run_status(run, RunStatus::Running, None).await.unwrap();
    (run, ids)
}

each_backend!(a_reader_of_records_waits_while_the_process_holds_as_many_candidates_as_it_allows);
/// However many pages and run ends read records at once, the process holds at most
/// `RECORD_HOLDERS` candidates' records: a further reader waits until one lets go, and a
/// reader asking again for the candidate it holds does not wait.
async fn a_reader_of_records_waits_while_the_process_holds_as_many_candidates_as_it_allows(db: TestStore) {
    use bakeoff::app::runs::{RECORD_HOLDERS, RunRecords};
    use std::time::Duration;
    // This test alone holds several places from one task: its two backends' runs, sharing the
    // process's places, would each hold one and wait for the other's. One at a time.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _alone = ONE_AT_A_TIME.lock().await;
    let app = spawn_app_on(db).await;
    let (run, ids) = stored_live_run(&app, 4).await;
    let holders: Vec<RunRecords> = (0..RECORD_HOLDERS).map(|_| RunRecords::of(run)).collect();
    for (i, h) in holders.iter().enumerate() {
        let held = h.of_candidate(&app.store, ids[i % 2]).await.unwrap();
        assert_eq!(held.len(), 12, "{}", app.backend);
    }
    let again = tokio::time::timeout(Duration::from_secs(10), holders[0].of_candidate(&app.store, ids[0])).await;
    assert!(
        again.is_ok(),
        "the candidate a reader holds is not read again ({})",
        app.backend
    );

    let waiting = RunRecords::of(run);
    let read = waiting.of_candidate(&app.store, ids[1]);
    tokio::pin!(read);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut read)
            .await
            .is_err(),
        "a reader beyond the holders waits ({})",
        app.backend
    );
    holders[0].release().await;
    let got = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the waiting reader reads once a holder lets go")
        .unwrap();
    assert_eq!(got.len(), 12, "{}", app.backend);
}

each_backend!(views_of_a_live_run_arriving_together_all_get_its_parts);
/// Views of an unfinished run that arrive together share one computation of its parts (the
/// others wait for it or take the last ones): every one shows both candidates' progress.
async fn views_of_a_live_run_arriving_together_all_get_its_parts(db: TestStore) {
    let app = spawn_app_on(db).await;
    let (run, _) = stored_live_run(&app, 10).await;
    let path = format!("/runs/{run}");
    let views = (0..8).map(|_| app.page(&path));
    for (page, _) in futures_util::future::join_all(views).await {
        assert_eq!(
            page.text("main").matches("30 of 30 requests").count(),
            2,
            "{}: {}",
            app.backend,
            page.text("main")
        );
    }
    // Its cases page too (its case index is read from every record's facts while it runs).
    let path = format!("/runs/{run}/cases?failures=on");
    let views = (0..8).map(|_| app.page(&path));
    for (page, _) in futures_util::future::join_all(views).await {
        assert_eq!(page.text("#matching"), "0 of 3 cases match.", "{}", app.backend);
    }
    let (page, _) = app.page(&format!("/runs/{run}/cases")).await;
    assert_eq!(page.text("#matching"), "3 of 3 cases match.", "{}", app.backend);
}

// ------------------------------------------------------------------ conversations (issue 46)

each_backend!(a_conversation_run_from_the_form_shows_its_figures_by_turn_and_the_ttft_context_chart);
async fn a_conversation_run_from_the_form_shows_its_figures_by_turn_and_the_ttft_context_chart(db: TestStore) {
    let file = EvalSetFile::parse(
        "c.jsonl",
        r#"{"bakeoff_evalset":1,"name":"chat","task":"generation","system":"Be brief.","graders":[{"kind":"exact"}]}
{"id":"a","turns":[{"user":"Call me <b>Ann</b>.","expected":"OK <b>Ann</b>"},{"user":"Who am I?","expected":"Ann"}]}
{"id":"b","turns":[{"user":"Call me Bo.","expected":"OK Bo"},{"user":"Who am I?","expected":"Bo"}]}"#,
    )
    .unwrap();
    let profile = ModelProfile {
        prefix_cache: true,
        prefill_ms_per_token: 0.2,
        ..fast("chatty")
    };
    let mock = start_mock(vec![profile], vec![file.clone()]).await;
    let app = spawn_app_on(db).await;
    let version = app.store.save_evalset_version(&file).await.unwrap().to_string();
    let chatty = app.candidate("chatty", &mock.base_url(), "chatty").await.to_string();
    let mut fields = vec![
        ("evalset_version", version.as_str()),
        ("candidate", chatty.as_str()),
        ("concurrency", "2"),
        ("repetitions", "1"),
        ("warmup_requests", "0"),
        ("timeout_secs", "20"),
        ("retries", "0"),
        ("stream", "on"),
        ("load_shape", "fixed"),
        ("think_time", "sometimes"),
    ];
    // A think time the form cannot read is refused, naming the field; nothing starts.
    let r = app.post_form("/runs", &fields).await;
    assert_eq!(r.status().as_u16(), 422, "{}", app.backend);
    let body = r.text().await.unwrap();
    assert!(body.contains("not a think-time distribution"), "{}", app.backend);
    fields.retain(|(k, _)| *k != "think_time");
    fields.push(("think_time", "uniform 2-6"));
    let r = app.post_form("/runs", &fields).await;
    assert_eq!(r.status().as_u16(), 303, "{}", app.backend);
    let run: i64 = r.headers()["location"]
        .to_str()
        .unwrap()
        .trim_start_matches("/runs/")
        .parse()
        .unwrap();
    assert_eq!(app.run_to_end(run, false).await, RunStatus::Finished);
    let records = app.store.list_request_records(run).await.unwrap();
    let mut keys: Vec<&str> = records.iter().map(|r| r.case_id.as_ref()).collect();
    keys.sort();
    assert_eq!(keys, ["a#1", "a#2", "b#1", "b#2"], "{}", app.backend);
    let (page, html) = app.page(&format!("/runs/{run}")).await;
    let block = page.text(".conversations");
    assert!(block.contains("Conversations by turn"), "{}: {block}", app.backend);
    assert!(block.contains("think time uniform 2–6 ms"), "{}: {block}", app.backend);
    assert!(block.contains("users start evenly spread"), "{}: {block}", app.backend);
    // How users are carried and how the measured window was chosen are stated.
    assert!(
        block.contains("each user keeps its own connection"),
        "{}: {block}",
        app.backend
    );
    assert!(
        block.contains("measured window starts once every user has started"),
        "{}: {block}",
        app.backend
    );
    let ramp = page.text("[data-figure=ramp]");
    assert!(
        ramp.contains("sent before every user had started") || ramp.starts_with("every turn measured"),
        "{}: {ramp}",
        app.backend
    );
    assert!(html.contains("id=\"chart-ttft-context\""), "{}", app.backend);
    assert!(html.contains("data-turn=\"2\""), "{}", app.backend);
    assert!(
        page.text("[data-figure=conversation-pass-rate]").contains("of 2"),
        "{}",
        app.backend
    );
    assert!(
        page.text(".conditions").contains("think time (conversations)"),
        "{}",
        app.backend
    );
    // The model's answer is escaped wherever it shows.
    assert!(!html.contains("<b>Ann</b>"), "{}", app.backend);
}
