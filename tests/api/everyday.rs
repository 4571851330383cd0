//! The everyday actions of issue 17 over real HTTP, on both databases: retiring and restoring a
//! candidate, an eval set and a threshold profile (gone from lists and the run form, kept by the
//! runs that measured them, audited); choosing the default threshold profile (the archive and a
//! scorecard opened without a choice follow it; a retired default falls back); the candidate
//! page; "Run again" on a cleanly finished run.
use bakeoff::domain::audit::AuditFilter;

use crate::support::app::spawn_app_on;
use crate::support::db::{TestStore, each_backend};

each_backend!(retired_things_leave_the_lists_and_the_run_form_but_keep_their_runs);
async fn retired_things_leave_the_lists_and_the_run_form_but_keep_their_runs(t: TestStore) {
    let app = spawn_app_on(t).await;
    let run = app.finished_run("old-model", None).await;
    let candidate = app.store.get_run(run).await.unwrap().unwrap().candidate_ids[0];
    let version = app.store.get_run(run).await.unwrap().unwrap().evalset_version_id;
    let other = app.create_candidate("new-model", "http://127.0.0.1:1/v1").await;

    let r = app.post_form(&format!("/candidates/{candidate}/retire"), &[]).await;
    assert_eq!(r.status().as_u16(), 303, "{}", app.backend);
    let r = app.post_form(&format!("/evalsets/{version}/retire"), &[]).await;
    assert_eq!(r.status().as_u16(), 303);

    let list = app.get_html("/candidates").await;
    assert_eq!(list.texts("table.candidates tbody th"), ["new-model"]);
    assert!(
        list.text("details.retired").contains("old-model"),
        "{}",
        list.text("details.retired")
    );
    let sets = app.get_html("/evalsets").await;
    assert_eq!(sets.count("table.list tbody tr"), 0, "the only set is retired");
    assert!(sets.text("details.retired").contains("tiny"));
    let form = app.get_html("/runs/new").await;
    let offered: Vec<String> = form
        .select("input[name=candidate]")
        .iter()
        .filter_map(|e| e.value().attr("value").map(str::to_string))
        .collect();
    assert_eq!(offered, [other.to_string()], "only the candidate in use is offered");
    assert_eq!(form.count(&format!("#f-evalset_version option[value='{version}']")), 0);
    assert_eq!(
        form.count(&format!("#f-judge_candidate option[value='{candidate}']")),
        0
    );
    assert_eq!(form.count(&format!("#f-judge_candidate option[value='{other}']")), 1);

    // The run that measured it is unchanged, and its candidate page says it is retired.
    let page = app.get_html(&format!("/runs/{run}")).await;
    assert!(page.text("main").contains("old-model"));
    let cand = app.get_html(&format!("/candidates/{candidate}")).await;
    assert!(cand.text("h1").contains("retired"), "{}", cand.text("h1"));
    assert!(cand.text("main").contains(&format!("#{run}")), "its runs are listed");

    // Restored: back in the list and the form; the retired section offers Delete.
    assert_eq!(
        cand_list_buttons(&app).await,
        ["Restore old-model", "Delete old-model"],
        "single-user mode may delete"
    );
    let r = app.post_form(&format!("/candidates/{candidate}/restore"), &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    let list = app.get_html("/candidates").await;
    assert_eq!(list.count("table.candidates tbody tr"), 2);
    assert_eq!(list.count("details.retired"), 0);

    let audit = app.store.list_audit(&AuditFilter::default(), 50, 0).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.action.as_str()).collect();
    for expected in ["candidate.retired", "evalset.retired", "candidate.restored"] {
        assert!(actions.contains(&expected), "{expected} missing from {actions:?}");
    }
    // Deleting: refused for what a run measured (it stays, the reason is given), done for what
    // nothing refers to.
    let r = app.post_form(&format!("/candidates/{candidate}/delete"), &[]).await;
    assert_eq!(r.status().as_u16(), 400);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("cannot be deleted") && body.contains("retire it instead"),
        "{body}"
    );
    assert!(app.store.get_candidate(candidate).await.unwrap().is_some());
    let r = app.post_form(&format!("/evalsets/{version}/delete"), &[]).await;
    assert_eq!(r.status().as_u16(), 400, "the set a run measured stays");
    app.post_form(&format!("/candidates/{other}/retire"), &[]).await;
    let r = app.post_form(&format!("/candidates/{other}/delete"), &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    assert!(app.store.get_candidate(other).await.unwrap().is_none());
    let list = app.get_html("/candidates").await;
    assert!(
        !list.text("main").contains("new-model"),
        "gone from the lists, retired ones too"
    );
    let audit = app.store.list_audit(&AuditFilter::default(), 50, 0).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.action.as_str() == "candidate.deleted" && e.target.contains("new-model"))
    );

    // Unknown ids are a 404, and nothing is recorded for them.
    let r = app.post_form("/candidates/999999/retire", &[]).await;
    assert_eq!(r.status().as_u16(), 404);
}

each_backend!(the_default_profile_is_chosen_followed_and_falls_back_when_retired);
async fn the_default_profile_is_chosen_followed_and_falls_back_when_retired(t: TestStore) {
    let app = spawn_app_on(t).await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let profiles = app.store.list_threshold_profiles().await.unwrap();
    assert!(profiles.len() >= 2, "the shipped profiles");
    let shipped = profiles
        .iter()
        .find(|p| p.name == bakeoff::app::demo::DEFAULT_PROFILE)
        .unwrap();
    let other = profiles.iter().find(|p| p.id != shipped.id).unwrap();
    let run = app.finished_run("m", None).await;

    let default_name = |page: &crate::support::app::Page| page.text("tr.default-profile th a");
    let list = app.get_html("/thresholds").await;
    assert_eq!(
        default_name(&list),
        shipped.name,
        "the shipped default before any choice"
    );

    let r = app.post_form(&format!("/thresholds/{}/default", other.id), &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    let list = app.get_html("/thresholds").await;
    assert_eq!(default_name(&list), other.name);
    let archive = app.get_html("/archive").await;
    assert!(
        archive.text("table").contains(&format!("Verdict by {}", other.name)),
        "the archive judges by the chosen default: {}",
        archive.text("thead")
    );
    let card = app.get_html(&format!("/runs/{run}/scorecard")).await;
    assert_eq!(
        card.text("#f-profile option[selected]"),
        card.texts("#f-profile option")
            .into_iter()
            .find(|o| o.contains(&other.name))
            .unwrap(),
        "a scorecard opened without a choice uses the default"
    );

    // A retired default gives way to the shipped one; a retired profile cannot be chosen.
    app.post_form(&format!("/thresholds/{}/retire", other.id), &[]).await;
    let list = app.get_html("/thresholds").await;
    assert_eq!(default_name(&list), shipped.name);
    let r = app.post_form(&format!("/thresholds/{}/default", other.id), &[]).await;
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("restore it"));
    let audit = app.store.list_audit(&AuditFilter::default(), 50, 0).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.action.as_str() == "threshold_profile.default_chosen")
    );
}

#[tokio::test]
async fn a_cleanly_finished_run_offers_run_again() {
    let app = crate::support::app::spawn_app().await;
    let run = app.finished_run("steady", None).await;
    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(page.texts(".run-again-form button"), ["Run again"]);
}

/// The buttons of the candidates list's retired section.
async fn cand_list_buttons(app: &crate::support::app::TestApp) -> Vec<String> {
    app.get_html("/candidates").await.texts("details.retired button")
}
