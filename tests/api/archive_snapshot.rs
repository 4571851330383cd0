//! The archive never changes: a run keeps its candidates as it measured them (name, base URL,
//! prices…), so editing a candidate afterwards changes nothing of the run's page, scorecard
//! (cost verdict included) or export; imports are recognised by content hash, never overlap the
//! runs measured here, and a refused import leaves nothing behind — on every backend.
use bakeoff::app::live::Live;
use bakeoff::app::scorecard::{ScorecardChoice, assemble};
use bakeoff::app::transfer::{Imported, export_run, import_run, parse_export};
use bakeoff::domain::candidate::CandidateDraft;
use bakeoff::domain::thresholds::key::MetricKey;
use bakeoff::domain::thresholds::{Comparator, ThresholdRule};

use crate::support::app::spawn_app_on;
use crate::support::db::{TestStore, each_backend, each_backend_pair};

fn cost_rule() -> Vec<ThresholdRule> {
    vec![ThresholdRule {
        metric: "cost_per_1k_cases".into(),
        comparator: Comparator::AtMost,
        value: 1.0,
        unit: MetricKey::parse("cost_per_1k_cases")
            .unwrap()
            .def()
            .unit
            .stored_name()
            .to_string(),
        rationale: "test".into(),
    }]
}

fn draft(name: &str, base_url: &str, price: &str) -> CandidateDraft {
    CandidateDraft {
        name: name.into(),
        provider: "openai-chat".into(),
        base_url: base_url.into(),
        model: "alpha-model".into(),
        price_input: price.into(),
        price_output: price.into(),
        ..Default::default()
    }
}

/// Everything of an export but its time of export.
fn export_json(export: bakeoff::app::transfer::RunExport) -> serde_json::Value {
    let mut v = serde_json::to_value(export).unwrap();
    v.as_object_mut().unwrap().remove("exported_at");
    v
}

each_backend!(editing_a_candidate_changes_nothing_of_its_archived_runs);
async fn editing_a_candidate_changes_nothing_of_its_archived_runs(t: TestStore) {
    let app = spawn_app_on(t).await;
    let s = app.store.clone();
    let run = app.finished_run("snap", None).await;
    let id = s.run_candidates(run).await.unwrap()[0].id;
    let priced = draft("snap", "http://127.0.0.1:1/v1", "0.5").validate(None).unwrap();
    // Prices as they were when the run was measured: a new run is created with them.
    s.update_candidate(&crate::support::checked::admin_change(s.as_ref(), id, &priced).await)
        .await
        .unwrap();
    let version = s.get_run(run).await.unwrap().unwrap().evalset_version_id;
    let run = app.create_run("priced", version, &[id]).await;
    let old = s
        .list_request_records(app.finished_run("records", None).await)
        .await
        .unwrap();
    let records: Vec<_> = old
        .into_iter()
        .map(|r| bakeoff::domain::run::RequestRecord {
            run_id: run,
            candidate_id: id,
            ..r
        })
        .collect();
    s.append_request_records(&records).await.unwrap();
    s.set_run_status(run, bakeoff::domain::run::RunStatus::Finished, None)
        .await
        .unwrap();
    let (profile, _) = s
        .save_threshold_profile("cost", "", &cost_rule(), "me", "first")
        .await
        .unwrap();
    let choice = ScorecardChoice {
        profile: Some(profile),
        ..Default::default()
    };

    let snapshot = s.run_candidates(run).await.unwrap();
    assert_eq!(snapshot[0].spec.name, "snap", "{}", app.backend);
    assert_eq!(snapshot[0].spec.base_url, "http://127.0.0.1:1/v1");
    assert_eq!(snapshot[0].spec.pricing.input_per_mtok, Some(0.5));
    assert!(snapshot[0].spec.api_key.is_none());

    let card_before = assemble(&s, &Live::new(), run, &choice).await.unwrap();
    let verdicts_before = card_before.verdicts();
    let export_before = export_json(export_run(s.as_ref(), run).await.unwrap());
    let (page_before, _) = app.page(&format!("/runs/{run}")).await;
    let (scorecard_before, _) = app.page(&format!("/runs/{run}/scorecard?profile={profile}")).await;
    let list_before = s.list_runs(10, 0).await.unwrap();

    // Name, base URL and prices change (no prices at all: cost would become "not measured").
    let edited = draft("renamed", "http://127.0.0.1:9/other", "").validate(None).unwrap();
    s.update_candidate(&crate::support::checked::admin_change(s.as_ref(), id, &edited).await)
        .await
        .unwrap();

    let card_after = assemble(&s, &Live::new(), run, &choice).await.unwrap();
    assert_eq!(
        card_after.verdicts(),
        verdicts_before,
        "{}: the cost verdict stands",
        app.backend
    );
    assert_eq!(card_after.candidates[0].spec.pricing.input_per_mtok, Some(0.5));
    assert_eq!(
        export_json(export_run(s.as_ref(), run).await.unwrap()),
        export_before,
        "{}: the export is unchanged",
        app.backend
    );
    let (page_after, _) = app.page(&format!("/runs/{run}")).await;
    let (scorecard_after, _) = app.page(&format!("/runs/{run}/scorecard?profile={profile}")).await;
    assert_eq!(page_after.texts("main h1"), page_before.texts("main h1"));
    assert!(
        !page_after.text("main").contains("renamed"),
        "{}: the run page names the candidate as measured",
        app.backend
    );
    assert!(!scorecard_after.text("main").contains("renamed"));
    assert_eq!(
        scorecard_after.texts("table"),
        scorecard_before.texts("table"),
        "{}: scorecard unchanged",
        app.backend
    );
    let names =
        |items: Vec<bakeoff::store::RunListItem>| items.into_iter().find(|i| i.run.id == run).unwrap().candidate_names;
    let list_after = s.list_runs(10, 0).await.unwrap();
    assert_eq!(
        names(list_after),
        ["snap"],
        "{}: the run list names it as measured",
        app.backend
    );
    assert_eq!(names(list_before), ["snap"]);
    // A new run measures the candidate as it is now.
    let newer = app.create_run("newer", version, &[id]).await;
    assert_eq!(s.run_candidates(newer).await.unwrap()[0].spec.name, "renamed");
}

each_backend!(importing_the_same_export_twice_creates_nothing_and_imports_never_overlap);
async fn importing_the_same_export_twice_creates_nothing_and_imports_never_overlap(t: TestStore) {
    let app = spawn_app_on(t).await;
    let s = app.store.clone();
    let run = app.finished_run("original", None).await;
    let text = serde_json::to_string(&export_run(s.as_ref(), run).await.unwrap()).unwrap();

    // Imported into the installation that measured it: a new run (the same candidate, matched).
    let first = import_run(s.as_ref(), &parse_export(&text).unwrap()).await.unwrap();
    let Imported::New(copy) = first else {
        panic!("{}: first import stores a run", app.backend)
    };
    let runs = s.count_runs().await.unwrap();
    let candidates = s.list_candidates().await.unwrap().len();
    // The same export again, and a second export of the same run: recognised, nothing stored.
    assert_eq!(
        import_run(s.as_ref(), &parse_export(&text).unwrap()).await.unwrap(),
        Imported::Before(copy)
    );
    let again = serde_json::to_string(&export_run(s.as_ref(), run).await.unwrap()).unwrap();
    assert_eq!(
        import_run(s.as_ref(), &parse_export(&again).unwrap()).await.unwrap(),
        Imported::Before(copy)
    );
    assert_eq!(s.count_runs().await.unwrap(), runs, "{}", app.backend);
    assert_eq!(s.list_candidates().await.unwrap().len(), candidates);
    assert!(s.run_import_hash(copy).await.unwrap().is_some());
    assert!(s.run_import_hash(run).await.unwrap().is_none());

    // Over HTTP the second import says so.
    const BOUNDARY: &str = "bakeoff-test-boundary-5e2a";
    let mut upload = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"run.json\"\r\n\
         Content-Type: application/json\r\n\r\n{text}\r\n--{BOUNDARY}--\r\n"
    );
    upload.shrink_to_fit();
    let response = app
        .client
        .post(app.url("/archive/import"))
        .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .body(upload)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(
        body.contains(&format!("imported before, as run #{copy}")),
        "{}: {body}",
        app.backend
    );
    assert_eq!(s.count_runs().await.unwrap(), runs);

    // The copy has the original's times: it must not be shown as overlapping it, either way.
    for id in [run, copy] {
        let (page, _) = app.page(&format!("/runs/{id}")).await;
        assert_eq!(
            page.count(".overlap-warning"),
            0,
            "{}: run {id} shows no overlap",
            app.backend
        );
    }
}

each_backend_pair!(an_import_refused_half_way_leaves_nothing_behind);
async fn an_import_refused_half_way_leaves_nothing_behind(from: TestStore, to: TestStore) {
    let app = spawn_app_on(from).await;
    let run = app.finished_run("whole", None).await;
    let mut export: serde_json::Value =
        serde_json::to_value(export_run(app.store.as_ref(), run).await.unwrap()).unwrap();
    // A second candidate with the first one's name and endpoint: the first is created, the
    // second breaks the unique name inside the transaction, after the eval set was stored.
    let mut twin = export["candidates"][0].clone();
    twin["id"] = serde_json::json!(987_654);
    export["candidates"].as_array_mut().unwrap().push(twin);
    let export = parse_export(&export.to_string()).unwrap();

    let s = &to.store;
    let counts = || async {
        (
            s.list_candidates().await.unwrap().len(),
            s.list_evalsets().await.unwrap().len(),
            s.count_runs().await.unwrap(),
            to.fetch_i64("SELECT COUNT(*) FROM request_records").await.unwrap(),
        )
    };
    let before = counts().await;
    let refused = import_run(s.as_ref(), &export).await;
    assert!(refused.is_err(), "{} → {}: refused", app.backend, to.backend);
    assert_eq!(
        counts().await,
        before,
        "{} → {}: nothing left behind",
        app.backend,
        to.backend
    );
    assert_eq!(before, (0, 0, 0, 0));
}

each_backend!(runs_from_before_snapshots_get_one_from_the_candidate_on_start);
async fn runs_from_before_snapshots_get_one_from_the_candidate_on_start(t: TestStore) {
    let s = &t.store;
    let file = bakeoff::domain::evalset::EvalSetFile::parse("tiny.jsonl", crate::support::app::TINY_EVALSET).unwrap();
    let version = s.save_evalset_version(&file).await.unwrap();
    let id = s
        .create_candidate(&crate::support::checked::admin_new(
            &draft("older", "http://127.0.0.1:1/v1", "").validate(None).unwrap(),
        ))
        .await
        .unwrap();
    let run = s
        .create_run(&bakeoff::domain::run::NewRun {
            name: "older".into(),
            evalset_version_id: version,
            candidate_ids: vec![id],
            config: Default::default(),
        })
        .await
        .unwrap();
    // As a run stored before migration 0013: no snapshot.
    t.execute_raw("UPDATE run_candidates SET snapshot = NULL")
        .await
        .unwrap();
    let missing = "SELECT COUNT(*) FROM run_candidates WHERE snapshot IS NULL";
    assert_eq!(t.fetch_i64(missing).await.unwrap(), 1);
    // Read meanwhile from the candidate as it is; on the next start the snapshot is written.
    assert_eq!(s.run_candidates(run).await.unwrap()[0].spec.name, "older");
    let reopened = crate::support::db::open(&t.url).await;
    assert_eq!(
        t.fetch_i64(missing).await.unwrap(),
        0,
        "{}: backfilled on start",
        t.backend
    );
    let renamed = draft("renamed", "http://127.0.0.1:1/v1", "").validate(None).unwrap();
    reopened
        .update_candidate(&crate::support::checked::admin_change(reopened.as_ref(), id, &renamed).await)
        .await
        .unwrap();
    assert_eq!(
        reopened.run_candidates(run).await.unwrap()[0].spec.name,
        "older",
        "{}",
        t.backend
    );
}
