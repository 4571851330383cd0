//! Issue 54 over HTTP: pages that know the reader's role, refusals that keep the page and name
//! who refused (a user's role, or an API token's scope), confirmations after saves, figures with
//! a floor, and the overview's decisions.
use bakeoff::domain::accounts::Role;

use crate::support::app::spawn_app;

fn bearer(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .unwrap()
}

#[tokio::test]
async fn pages_know_the_role_and_a_refusal_keeps_the_header_and_names_who_refused() {
    let app = spawn_app().await;
    let ada = app.add_user("ada", Role::Admin).await;
    let ed = app.add_user("ed", Role::Editor).await;
    let vi = app.add_user("vi", Role::Viewer).await;
    let (viewer, _) = app.login("vi", &vi).await;
    let (editor, _) = app.login("ed", &ed).await;
    let (admin, _) = app.login("ada", &ada).await;

    // A viewer reads the run form, told first that starting needs an editor; Start is disabled.
    let r = viewer.get(app.url("/runs/new")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let page = crate::support::app::Page::parse(200, &r.text().await.unwrap());
    assert!(
        page.text("#needs-role").contains("needs editor"),
        "{}",
        page.text("#needs-role")
    );
    assert!(
        page.text("#needs-role").contains("who is a viewer"),
        "{}",
        page.text("#needs-role")
    );
    let start = page.select("form[action='/runs'] button[type=submit]");
    assert!(
        start.first().is_some_and(|b| b.value().attr("disabled").is_some()),
        "Start the run is disabled for a viewer"
    );
    // The same form for an editor: no notice, Start enabled.
    let page = crate::support::app::Page::parse(
        200,
        &editor
            .get(app.url("/runs/new"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(page.count("#needs-role"), 0);
    // Other forms a viewer may open are disabled as a whole.
    for path in ["/candidates/new", "/thresholds/new", "/evalsets/import"] {
        let page = crate::support::app::Page::parse(
            200,
            &viewer.get(app.url(path)).send().await.unwrap().text().await.unwrap(),
        );
        assert_eq!(page.count("#needs-role"), 1, "{path}");
        assert_eq!(page.count("fieldset.role-lock[disabled]"), 1, "{path}");
    }

    // An editor sees the credentials read-only, saying they need an admin; an admin can type.
    let new_candidate = app.url("/candidates/new");
    let form = |client: reqwest::Client| {
        let url = new_candidate.clone();
        async move { crate::support::app::Page::parse(200, &client.get(url).send().await.unwrap().text().await.unwrap()) }
    };
    let page = form(editor.clone()).await;
    assert!(
        page.attr("#f-api_key", "readonly").is_some(),
        "the key field is read-only for an editor"
    );
    assert!(page.text("main").contains("Needs admin"), "{}", page.text("main"));
    let page = form(admin.clone()).await;
    assert!(page.attr("#f-api_key", "readonly").is_none());

    // A refused submit keeps the header: the nav and who is signed in.
    let r = viewer
        .post(app.url("/runs"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("name=x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let page = crate::support::app::Page::parse(403, &r.text().await.unwrap());
    assert_eq!(page.text("#user-name"), "vi", "the refusal page names who is signed in");
    assert!(
        page.count("header nav .nav-links a") >= 6,
        "the refusal page keeps the nav"
    );
    assert!(page.text("article.error-page").contains("who is a viewer"));

    // "an editor", never "a editor".
    let r = editor
        .post(app.url("/users"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("username=zed&role=viewer&password=long+enough+password")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body = r.text().await.unwrap();
    assert!(body.contains("who is an editor"), "{body}");
    assert!(!body.contains("a editor"), "{body}");

    // An admin's token scoped to viewer: the refusal names the token and its scope, not the
    // admin's role.
    let user = app.store.find_user("ada").await.unwrap().unwrap();
    let (token, secret) =
        bakeoff::app::accounts::create_token(app.store.as_ref(), "test", &user, "ci-read", Some(Role::Viewer))
            .await
            .unwrap();
    let r = bearer(&secret)
        .post(app.url("/api/v1/runs"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body = r.text().await.unwrap();
    assert!(
        body.contains(&format!("API token #{} \\\"ci-read\\\"", token.id))
            || body.contains(&format!("API token #{} \"ci-read\"", token.id)),
        "{body}"
    );
    assert!(body.contains("limited to viewer"), "{body}");
    assert!(body.contains("is an admin"), "{body}");
    assert!(!body.contains("you are signed in"), "{body}");
}

#[tokio::test]
async fn saving_a_candidate_confirms_it_and_offers_to_test_the_connection() {
    let app = spawn_app().await;
    let fields = [
        ("name", "vllm-llama"),
        ("provider", "openai-chat"),
        ("base_url", "http://127.0.0.1:9/v1"),
        ("model", "llama"),
    ];
    let r = app.post_form("/candidates", &fields).await;
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    let page = app.get_html(&to).await;
    let notice = page.text("#saved-notice");
    assert!(notice.starts_with("Added vllm-llama."), "{notice}");
    assert!(page.attr("#saved-notice", "class").unwrap().contains("success"));
    let id = app.store.list_candidates().await.unwrap()[0].id;
    assert_eq!(
        page.count(&format!("#saved-notice a[href='/candidates/{id}/operability']")),
        1,
        "the confirmation offers to test the connection"
    );
    // An edit says "Saved".
    let r = app.post_form(&format!("/candidates/{id}/edit"), &fields).await;
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert!(
        app.get_html(&to)
            .await
            .text("#saved-notice")
            .starts_with("Saved vllm-llama.")
    );
    // A success on the account page is styled as one, not as a warning.
    let template =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/accounts/account.html")).unwrap();
    assert!(template.contains(r#"class="notice success" role="status" id="notice""#));
}

#[tokio::test]
async fn a_finished_run_page_opens_with_its_verdicts_and_folds_how_it_was_measured() {
    let app = spawn_app().await;
    // The shipped eval sets and profiles, each profile chosen for the set it was written for.
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let run = app.finished_run("alpha", None).await;
    let page = app.get_html(&format!("/runs/{run}")).await;
    // The decision first: the verdicts section comes before progress and results.
    let html = page.html.html();
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("{needle} not on the page"));
    assert!(at("data-verdicts") < at("id=\"progress-h-"));
    assert!(at("data-verdicts") < at("id=\"results-h-"));
    let chips = page.select(".verdict-strip .verdict-chip");
    assert_eq!(chips.len(), 1, "one verdict per candidate");
    assert!(
        matches!(
            chips[0].value().attr("data-verdict"),
            Some("GO" | "NO-GO" | "INCONCLUSIVE")
        ),
        "a verdict, judged for the page"
    );
    // Conditions, harness, units and the event log are folded away (closed <details>).
    assert_eq!(page.count("section.run-meta details[open]"), 0);
    assert_eq!(page.count("section.run-meta details"), 1);
    assert_eq!(page.count("details.harness-details[open]"), 0);
    assert_eq!(page.count("details.harness-details section.harness"), 1);
}

#[tokio::test]
async fn the_cases_grid_shows_each_answer_beside_the_expected_value() {
    let app = spawn_app().await;
    let run = app.finished_run("alpha", None).await;
    let page = app.get_html(&format!("/runs/{run}/cases")).await;
    assert_eq!(page.texts("table.case-grid thead th"), ["Case", "Expected", "alpha"]);
    // c1 right: its answer, unmarked; c3 wrong ("positive" for "neutral"): marked ≠.
    assert_eq!(page.text("tr[data-grid-case=c1] td[data-expected]"), "positive");
    assert_eq!(page.text("tr[data-grid-case=c1] [data-answer]"), "positive");
    assert_eq!(page.text("tr[data-grid-case=c3] td[data-expected]"), "neutral");
    assert_eq!(page.text("tr[data-grid-case=c3] [data-answer]"), "≠ positive");
    assert_eq!(page.count("tr[data-grid-case=c1] .ne"), 0);
}

#[tokio::test]
async fn a_run_judged_by_a_profile_written_for_another_set_says_so_and_the_form_offers_one() {
    let app = spawn_app().await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let run = app.finished_run("alpha", None).await;
    let version = app.store.get_run(run).await.unwrap().unwrap().evalset_version_id;
    // "tiny" has no profile of its own: the default (the support-ticket one) judges it, and
    // the run page and the scorecard say it was written for another set.
    let page = app.get_html(&format!("/runs/{run}")).await;
    let fit = page.text("[data-profile-fit]");
    assert!(
        fit.contains("written for \"support-ticket-triage\"") && fit.contains("\"tiny\""),
        "{fit}"
    );
    let card = app.get_html(&format!("/runs/{run}/scorecard")).await;
    assert!(card.text("[data-profile-fit]").contains("support-ticket-triage"));
    // The run form says which profile will judge a run of it, and offers to choose or create one.
    let form = app.get_html(&format!("/runs/new?evalset_version={version}")).await;
    assert_eq!(
        form.attr("[data-judged-by]", "data-judged-by").as_deref(),
        Some("default")
    );
    assert!(form.count("[data-judged-by] a[href='/thresholds/new']") == 1);
    // A support-ticket set judged by its own profile: no note.
    let triage = app
        .store
        .list_evalsets()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.name == "support-ticket-triage")
        .unwrap();
    let form = app
        .get_html(&format!("/runs/new?evalset_version={}", triage.latest_version_id))
        .await;
    assert_eq!(form.attr("[data-judged-by]", "data-judged-by").as_deref(), Some("own"));

    // Choosing a profile for "tiny" on its page: the run page judges by it, without a note; the
    // scorecard judged by another profile says which one the set is judged by.
    let agent = app
        .store
        .list_threshold_profiles()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == bakeoff::domain::thresholds::templates::AGENT_PROFILE_NAME)
        .unwrap()
        .id;
    let r = app
        .post_form(
            &format!("/evalsets/{version}/profile"),
            &[("profile", &agent.to_string())],
        )
        .await;
    assert_eq!(r.status(), 303);
    let set = app.get_html(&format!("/evalsets/{version}")).await;
    assert!(
        set.text("#judged-by")
            .contains(bakeoff::domain::thresholds::templates::AGENT_PROFILE_NAME)
    );
    let page = app.get_html(&format!("/runs/{run}")).await;
    assert_eq!(page.count("[data-profile-fit]"), 0);
    assert!(page.text(".verdict-source").contains("chosen for this eval set"));
    // The scorecard opens judged by the set's own profile too; judged by another on request,
    // it says which one the set is judged by.
    let card = app.get_html(&format!("/runs/{run}/scorecard")).await;
    assert_eq!(card.count("[data-profile-fit]"), 0);
    let default = app
        .store
        .list_threshold_profiles()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == bakeoff::domain::thresholds::templates::DEMO_PROFILE_NAME)
        .unwrap()
        .id;
    let card = app.get_html(&format!("/runs/{run}/scorecard?profile={default}")).await;
    assert!(
        card.text("[data-profile-fit]")
            .contains("is judged by \"Agent tool calls\""),
        "{}",
        card.text("[data-profile-fit]")
    );
    let form = app.get_html(&format!("/runs/new?evalset_version={version}")).await;
    assert_eq!(form.attr("[data-judged-by]", "data-judged-by").as_deref(), Some("own"));
}

/// Issue 54, defect 9: probes ran as a 35 s synchronous POST, the failures were not first and
/// raw evidence made the table thousands of pixels wide. Now the POST answers at once, the page
/// lists failures first, and each evidence cell is one short line with the raw text behind
/// "show raw".
#[tokio::test]
async fn probes_run_in_the_background_and_list_failures_first_with_short_evidence() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::app::demo::start_mock(listener).await.unwrap();
    let app = spawn_app().await;
    // swift-7b fails three probes on the demo mock (operability::the_demo_candidates_differ…).
    let id = app
        .store
        .create_candidate(&crate::support::checked::admin_new(
            &bakeoff::domain::candidate::CandidateSpec::openai_chat("swift", mock.base_url(), "swift-7b"),
        ))
        .await
        .unwrap();
    let r = app
        .post_form(&format!("/candidates/{id}/operability/probes"), &[])
        .await;
    assert_eq!(r.status(), 303, "the POST answers at once");
    crate::support::wait::until(
        "the background probes are saved",
        std::time::Duration::from_secs(60),
        || async { !app.store.list_probe_runs(id, 1).await.unwrap().is_empty() },
    )
    .await;
    let page = app.get_html(&format!("/candidates/{id}/operability")).await;
    let outcomes: Vec<String> = page
        .select("table.probes tbody tr[data-probe]")
        .iter()
        .map(|r| r.value().attr("data-outcome").unwrap_or_default().to_string())
        .collect();
    let fails = outcomes.iter().filter(|o| *o == "fail").count();
    assert!(fails >= 1, "{outcomes:?}");
    assert!(
        outcomes[..fails].iter().all(|o| o == "fail"),
        "failures first: {outcomes:?}"
    );
    let limit = bakeoff::web::operability::EVIDENCE_CHARS + 1;
    for short in page.texts("table.probes .excerpt-short") {
        assert!(short.chars().count() <= limit, "{short}");
        assert!(!short.contains('\n'), "one line: {short}");
    }
    // Where the raw evidence is longer than its line, it is one click away, folded.
    for row in page.select("table.probes tbody tr[data-probe]") {
        let text = |css: &str| {
            let sel = scraper::Selector::parse(css).unwrap();
            row.select(&sel).next().map(|e| crate::support::app::text_of(&e))
        };
        if let (Some(short), Some(raw)) = (text(".excerpt-short"), text("details.raw pre.excerpt")) {
            assert!(
                raw.chars().count() >= short.chars().count().saturating_sub(1),
                "{short} / {raw}"
            );
            assert_eq!(text("details.raw > summary").as_deref(), Some("show raw"));
        }
    }
    assert_eq!(page.count("details.raw[open]"), 0, "raw evidence starts folded");
}

/// Issue 54: "the README says 'New run' where the page says 'Start a run'". Every page word the
/// README's first steps name (a nav item, a button, a link, a heading) is on the page it names,
/// in demo mode, worded the same.
#[tokio::test]
async fn the_readmes_first_steps_name_the_pages_words() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let app = crate::browser::spawn_demo_app().await;
    let candidate = app.store.list_candidates().await.unwrap()[0].id;
    // (what the README says, the page, the element on it that must say the word).
    let candidate_page = format!("/candidates/{candidate}");
    let operability = format!("a[href='/candidates/{candidate}/operability'][role=button]");
    let steps: [(&str, &str, &str, &str); 8] = [
        ("**Overview → Run the demo**", "/", "#run-demo", "Run the demo"),
        (
            "**Runs → Start a run**",
            "/runs",
            "main a[href='/runs/new']",
            "Start a run",
        ),
        (
            "*Start the run*",
            "/runs/new",
            "form[action='/runs'] button[type=submit]",
            "Start the run",
        ),
        ("**Thresholds**", "/", ".nav-links a[href='/thresholds']", "Thresholds"),
        ("**Operability**", &candidate_page, &operability, "Operability"),
        ("*support-ticket-triage*", "/evalsets", "main", "support-ticket-triage"),
        (
            "*Support-ticket triage (demo default)*",
            "/thresholds",
            "main",
            "Support-ticket triage (demo default)",
        ),
        (
            "*Batch\n   summarisation*",
            "/thresholds",
            "main",
            "Batch summarisation",
        ),
    ];
    for (said, path, css, word) in steps {
        assert!(readme.contains(said), "the README no longer says {said}");
        let body = reqwest::get(format!("{}{path}", app.base_url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let page = crate::support::app::Page::parse(200, &body);
        let texts = page.texts(css);
        assert!(
            texts.iter().any(|t| t.contains(word)),
            "{path} {css} does not say {word:?}: {texts:?}"
        );
    }
}

/// Issue 54, point 2 on the overview: a candidate's latest decision is judged as its run page
/// judges it — by the profile chosen for the run's eval set, not the default's verdict.
#[tokio::test]
async fn the_overviews_latest_decisions_are_judged_by_the_sets_own_profile() {
    let app = spawn_app().await;
    bakeoff::app::demo::bootstrap(app.store.as_ref(), None).await.unwrap();
    let run = app.finished_run("alpha", None).await;
    let version = app.store.get_run(run).await.unwrap().unwrap().evalset_version_id;
    let profile = |name: &'static str| {
        let store = app.store.clone();
        async move {
            store
                .list_threshold_profiles()
                .await
                .unwrap()
                .into_iter()
                .find(|p| p.name == name)
                .unwrap()
                .id
        }
    };
    let agent = profile(bakeoff::domain::thresholds::templates::AGENT_PROFILE_NAME).await;
    let default = profile(bakeoff::domain::thresholds::templates::DEMO_PROFILE_NAME).await;
    // The background judge judges a finished run by every profile.
    for p in [agent, default] {
        bakeoff::app::verdicts::store_verdicts(&app.store, run, p)
            .await
            .unwrap();
    }
    let href =
        |page: &crate::support::app::Page| page.attr(".decisions-table tr[data-candidate=alpha] a.verdict", "href");
    // No profile chosen for "tiny": the default judges it.
    let page = app.get_html("/").await;
    assert!(
        href(&page).is_some_and(|h| h.contains(&format!("profile={default}&"))),
        "{:?}",
        href(&page)
    );
    // Chosen for the set: the overview shows that profile's verdict, as the run page does.
    let r = app
        .post_form(
            &format!("/evalsets/{version}/profile"),
            &[("profile", &agent.to_string())],
        )
        .await;
    assert_eq!(r.status(), 303);
    let page = app.get_html("/").await;
    assert!(
        href(&page).is_some_and(|h| h.contains(&format!("profile={agent}&"))),
        "{:?}",
        href(&page)
    );
}
