//! The SLO block of a threshold profile (issue 47): typed in the threshold editor (each bad field
//! named, its changes in the history), read from a profile file through the API, taken by a run
//! when it starts so a find-capacity run with no SLO of its own searches against the profile's,
//! said on the run page and the scorecard; and a run's capacity searches travel with its export.
use std::time::Duration;

use bakeoff::app::transfer::{Imported, export_run, import_run};
use bakeoff::domain::accounts::Role;
use bakeoff::mock::MockConfig;
use bakeoff::mock::truth::{REFERENCE as TRUTH, TruthServer};
use serde_json::json;

use crate::api_v1::Api;
use crate::support::app::{TestApp, spawn_app_on};
use crate::support::db::TestStore;

/// Longest the search may take before the test fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(600);

async fn profile_id(app: &TestApp, name: &str) -> i64 {
    app.store
        .list_threshold_profiles()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap()
        .id
}

/// The editor: SLO fields typed with the rules; every bad one is named and nothing is stored;
/// a valid one is stored with the version, shown on the profile's page and diffed in its
/// history.
async fn the_editor_keeps_an_slo_block(db: TestStore) {
    let app = spawn_app_on(db).await;
    let base = [
        ("name", "Online"),
        ("changed_by", "Ana"),
        ("change_rationale", "first cut"),
        ("rule0_metric", "slo_attainment"),
        ("rule0_comparator", ">="),
        ("rule0_value", "90"),
    ];
    let form = app.get_html("/thresholds/new").await;
    assert_eq!(form.count("fieldset.slo-block input"), 10, "the SLO block's fields");
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut fields = base.to_vec();
        fields.extend_from_slice(extra);
        fields
    };
    let bad = app
        .post_form_html(
            "/thresholds",
            &with(&[
                ("slo_ttft_ms", "fast"),
                ("slo_target", "120"),
                ("slo_later_e2e_ms", "9000"),
            ]),
        )
        .await;
    assert_eq!(bad.status, 422);
    for field in ["slo_ttft_ms", "slo_target", "slo_from_turn"] {
        assert_eq!(
            bad.attr(&format!("input[name={field}]"), "aria-invalid").as_deref(),
            Some("true"),
            "{field} is marked"
        );
        assert_eq!(bad.count(&format!("#f-{field}-error")), 1, "{field} has its message");
    }
    assert_eq!(bad.attr("input[name=slo_ttft_ms]", "value").as_deref(), Some("fast"));
    assert!(app.store.list_threshold_profiles().await.unwrap().is_empty());

    let ok = app
        .post_form(
            "/thresholds",
            &with(&[
                ("slo_ttft_ms", "800"),
                ("slo_e2e_ms", "5000"),
                ("slo_target", "95"),
                ("slo_from_turn", "3"),
                ("slo_later_ttft_ms", "1500"),
            ]),
        )
        .await;
    assert_eq!(ok.status(), 303);
    let id = profile_id(&app, "Online").await;
    let stored = app.store.get_threshold_profile(id, None).await.unwrap().unwrap();
    let slo = stored.slo.expect("stored with the version");
    assert_eq!(
        (slo.ttft_ms, slo.e2e_ms, slo.target_attainment),
        (Some(800.0), Some(5000.0), Some(0.95))
    );
    assert_eq!(
        slo.later_turns.map(|t| (t.from_turn, t.ttft_ms)),
        Some((3, Some(1500.0)))
    );
    let edit = app.get_html(&format!("/thresholds/{id}/edit")).await;
    assert_eq!(edit.attr("input[name=slo_target]", "value").as_deref(), Some("95"));
    assert_eq!(edit.attr("input[name=slo_from_turn]", "value").as_deref(), Some("3"));

    // Version 2 tightens the TTFT limit: the history says so in one line.
    let mut v2 = with(&[
        ("slo_ttft_ms", "600"),
        ("slo_e2e_ms", "5000"),
        ("slo_target", "95"),
        ("slo_from_turn", "3"),
        ("slo_later_ttft_ms", "1500"),
    ]);
    v2.retain(|(k, _)| *k != "change_rationale");
    v2.push(("change_rationale", "users complained"));
    let saved = app.post_form(&format!("/thresholds/{id}/edit"), &v2).await;
    assert_eq!(saved.status(), 303);
    let detail = app.get_html(&format!("/thresholds/{id}")).await;
    assert_eq!(
        detail.text(".profile-slo"),
        "TTFT ≤ 600 ms, E2E ≤ 5 s; from turn 3: TTFT ≤ 1.5 s; 95 % must meet all"
    );
    let diff = detail.texts("#v2 .diff li");
    assert_eq!(
        diff,
        [
            "slo SLO: TTFT ≤ 800 ms, E2E ≤ 5 s; from turn 3: TTFT ≤ 1.5 s; 95 % must meet all → \
          TTFT ≤ 600 ms, E2E ≤ 5 s; from turn 3: TTFT ≤ 1.5 s; 95 % must meet all"
        ],
    );
    let initial = detail.texts("#v1 .diff li");
    assert!(
        initial.iter().any(|l| l.contains("added SLO: TTFT ≤ 800 ms")),
        "{initial:?}"
    );
    // The profile file (API) carries it too.
    let api = Api::new(&app, "viewer", Role::Viewer).await;
    let view = api.ok(&format!("/api/v1/profiles/{id}")).await;
    assert_eq!(view["slo"]["ttft_ms"], 600.0, "{view}");
    assert_eq!(view["slo"]["later_turns"]["from_turn"], 3, "{view}");
}

#[tokio::test]
async fn the_editor_keeps_an_slo_block_sqlite() {
    the_editor_keeps_an_slo_block(crate::support::db::sqlite_test_store().await).await;
}

#[tokio::test]
async fn the_editor_keeps_an_slo_block_postgres() {
    the_editor_keeps_an_slo_block(crate::support::db::postgres_test_store().await).await;
}

/// A profile with an SLO judges the eval set; a find-capacity run posted with no SLO of its own
/// is accepted and searches against the profile's; the run page and scorecard say which SLO
/// judged. Its export holds the search, and an import keeps it (probes, bracket, stop reason).
async fn a_profile_slo_judges_a_capacity_run_that_has_none(db: TestStore) {
    const TRUTH_SERVER: TruthServer = TRUTH;
    const MAX_PROBES: usize = 3;
    let app = spawn_app_on(db).await;
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: vec![TRUTH_SERVER.profile("truth")],
        answer_keys: Vec::new(),
        seed: 5,
    })
    .await;
    let api = Api::new(&app, "planner", Role::Admin).await;
    let toml = format!(
        "bakeoff_candidates = 1\n[[candidate]]\nname = \"truth-a\"\nprovider = \"openai-chat\"\nbase_url = \"{}\"\nmodel = \"truth\"\n",
        mock.base_url()
    );
    let a = api
        .send("POST", "/api/v1/candidates", Some(("application/toml", toml)))
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let mut set = String::from(
        r#"{"bakeoff_evalset":1,"name":"slo-set","task":"generation","prompt":"Tell me about {{n}}","max_tokens":3}"#,
    );
    for i in 0..20 {
        set.push_str(&format!("\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}}}}"));
    }
    set.push('\n');
    let a = api
        .send("POST", "/api/v1/evalsets", Some(("application/jsonl", set)))
        .await;
    assert_eq!(a.status, 200, "{a:?}");

    let settings = json!({
        "concurrency": 4, "warmup_requests": 4, "retries": 0, "timeout_secs": 30, "temperature": 0.0,
        "staged_rollout": false, "max_tokens": TRUTH_SERVER.tokens,
        "load": {"shape": "capacity", "capacity_axis": "rate", "rate": (TRUTH_SERVER.max_rate() * 0.4).round(),
                 "capacity_max_probes": MAX_PROBES, "requests_per_level": 60},
    });
    let body = json!({"evalset": "slo-set", "candidates": ["truth-a"], "settings": settings});
    let post_run = || api.post("/api/v1/runs", &body);
    // No SLO anywhere: refused, naming the fields.
    let a = post_run().await;
    assert!((400..500).contains(&a.status), "{a:?}");
    assert!(a.body.to_string().contains("target_percent"), "{a:?}");

    // A profile file with an SLO block; a bad one is refused naming its field.
    let ttft = TRUTH_SERVER.reference_slo().ttft_ms.unwrap();
    let profile = |ttft: &str| {
        format!(
            "bakeoff_profile = 1\nname = \"online\"\n\n[[rule]]\nmetric = \"capacity_at_slo\"\ncomparator = \">=\"\nvalue = 0.5\n\n\
             [slo]\nttft_ms = {ttft}\ntarget_percent = 90\n"
        )
    };
    let a = api
        .send("POST", "/api/v1/profiles", Some(("application/toml", profile("-1"))))
        .await;
    assert!((400..500).contains(&a.status), "{a:?}");
    assert!(a.body.to_string().contains("slo.ttft_ms"), "{a:?}");
    let a = api
        .send(
            "POST",
            "/api/v1/profiles",
            Some(("application/toml", profile(&ttft.to_string()))),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let id = a.body["profile"]["id"].as_i64().unwrap();
    bakeoff::app::profiles::set_profile_for_evalset(&app.store, "slo-set", id, "test")
        .await
        .unwrap();

    let a = post_run().await;
    assert_eq!(a.status, 201, "{a:?}");
    let run = a.body["run_id"].as_i64().unwrap();
    let done = crate::support::wait::until_some(&format!("run #{run} to end"), DEADLINE, || async {
        let status = api.ok(&format!("/api/v1/runs/{run}")).await;
        (status["terminal"] == true).then_some(status)
    })
    .await;
    assert_eq!(done["status"], "finished", "{done}");
    let stored = app.store.get_run(run).await.unwrap().unwrap();
    assert!(!stored.config.slo.is_set(), "the run has no SLO of its own");
    let taken = stored
        .config
        .profile_slo
        .as_ref()
        .expect("the profile's SLO, taken at start");
    assert_eq!((taken.profile.as_str(), taken.version), ("online", 1));
    assert_eq!(taken.slo.ttft_ms, Some(ttft));
    let searches = app.store.list_run_capacity(run).await.unwrap();
    assert_eq!(searches.len(), 1);
    let search = &searches[0];
    assert!(search.outcome.is_some(), "the search ended");
    assert_eq!(search.search.target, 0.9, "the profile's target");
    assert!(!search.probes.is_empty() && search.probes.len() <= MAX_PROBES);

    let said = "SLO from profile \"online\" v1: TTFT ≤";
    let r = reqwest::Client::new()
        .get(app.url(&format!("/runs/{run}")))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    let page = crate::support::app::Page::parse(200, &r.text().await.unwrap());
    let text = page.text("body");
    assert!(text.contains(said), "run page: {text}");
    let r = reqwest::Client::new()
        .get(app.url(&format!("/runs/{run}/scorecard")))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let card = crate::support::app::Page::parse(200, &r.text().await.unwrap());
    let note = card.text("[data-slo-note]");
    assert!(note.starts_with(said) && note.ends_with("90 % must meet all"), "{note}");

    // Export and import: the search comes along, on the imported run's candidate.
    let export = export_run(app.store.as_ref(), run).await.unwrap();
    assert_eq!(export.capacity.len(), 1);
    let Imported::New(copy) = import_run(app.store.as_ref(), &export).await.unwrap() else {
        panic!("a new run")
    };
    let kept = app.store.list_run_capacity(copy).await.unwrap();
    assert_eq!(kept.len(), 1);
    let candidate = app.store.run_candidates(copy).await.unwrap()[0].id;
    assert_eq!(kept[0].candidate_id, candidate);
    assert_eq!(kept[0].outcome, search.outcome, "bracket and stop reason");
    assert_eq!(kept[0].search, search.search);
    let loads = |s: &bakeoff::domain::capacity::CandidateCapacity| {
        s.probes
            .iter()
            .map(|p| (p.probe.clone(), p.signs.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(loads(&kept[0]), loads(search), "every probe");
    assert!(kept[0].probes.iter().all(|p| p.run_id == copy));
    // Imported again: recognised, nothing stored.
    assert_eq!(
        import_run(app.store.as_ref(), &export).await.unwrap(),
        Imported::Before(copy)
    );
    mock.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_slo_judges_a_capacity_run_that_has_none_sqlite() {
    a_profile_slo_judges_a_capacity_run_that_has_none(crate::support::db::sqlite_test_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_slo_judges_a_capacity_run_that_has_none_postgres() {
    a_profile_slo_judges_a_capacity_run_that_has_none(crate::support::db::postgres_test_store().await).await;
}
