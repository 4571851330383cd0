//! Accounts over real HTTP on both databases: the store's account queries, the route × role
//! matrix over every route of the router (from `web::access::ROUTES`, which a unit test proves
//! equal to the routers' `.route(…)` calls), foreign-Origin posts in accounts mode, session
//! expiry and logout, login throttling, password change, API tokens, and the planted key.
use bakeoff::domain::Timestamp;
use bakeoff::domain::accounts::{self, Role, SESSION_MAX_MS, secret_hash};
use bakeoff::web::access::{Access, ROUTES};

use crate::support::app::{TestApp, spawn_app_on};
use crate::support::db::{TestStore, each_backend};

each_backend!(users_sessions_tokens_and_failures_are_stored_and_found);
async fn users_sessions_tokens_and_failures_are_stored_and_found(db: TestStore) {
    let s = db.store.as_ref();
    let b = db.backend;
    assert_eq!(s.count_users().await.unwrap(), 0);
    let ada = s.create_user("ada", Role::Admin, "$argon2id$x").await.unwrap();
    let bob = s.create_user("bob", Role::Viewer, "$argon2id$y").await.unwrap();
    assert!(matches!(
        s.create_user("ada", Role::Viewer, "h").await,
        Err(bakeoff::store::StoreError::Conflict(_))
    ));
    let names: Vec<String> = s.list_users().await.unwrap().into_iter().map(|u| u.username).collect();
    assert_eq!(names, ["ada", "bob"], "{b}");
    assert_eq!(s.find_user("bob").await.unwrap().unwrap().id, bob);
    assert_eq!(s.password_hash(ada).await.unwrap().as_deref(), Some("$argon2id$x"));
    s.set_user_role(bob, Role::Editor).await.unwrap();
    s.set_user_password(bob, "$argon2id$z").await.unwrap();
    assert_eq!(s.get_user(bob).await.unwrap().unwrap().role, Role::Editor);
    assert!(s.set_user_role(999, Role::Editor).await.is_err());

    // Sessions: found while fresh, gone when expired, ended with logout or a disable.
    let now = Timestamp::now();
    s.create_session("h1", bob, now).await.unwrap();
    s.create_session("h2", bob, now).await.unwrap();
    assert_eq!(s.session_user("h1", now).await.unwrap().unwrap().username, "bob");
    assert!(
        s.session_user("h1", Timestamp(now.0 + SESSION_MAX_MS + 1))
            .await
            .unwrap()
            .is_none()
    );
    assert!(s.session_user("nope", now).await.unwrap().is_none());
    assert_eq!(s.delete_user_sessions(bob, Some("h1")).await.unwrap(), 1);
    assert!(s.session_user("h2", now).await.unwrap().is_none());
    s.set_user_disabled(bob, true).await.unwrap();
    assert!(
        s.session_user("h1", now).await.unwrap().is_none(),
        "{b}: a disabled user's session"
    );
    s.set_user_disabled(bob, false).await.unwrap();
    assert!(s.session_user("h1", now).await.unwrap().is_some());
    s.delete_session("h1").await.unwrap();
    assert!(s.session_user("h1", now).await.unwrap().is_none());

    // Tokens: found by hash until revoked; use recorded.
    let t = s.create_api_token(bob, "ci", Role::Viewer, "th").await.unwrap();
    let (user, token) = s.token_user("th", now).await.unwrap().unwrap();
    assert_eq!((user.id, token.id, token.role), (bob, t, Role::Viewer));
    assert!(
        s.list_api_tokens(Some(bob)).await.unwrap()[0].last_used_at.is_some(),
        "{b}"
    );
    assert_eq!(s.list_api_tokens(Some(ada)).await.unwrap().len(), 0);
    assert!(s.revoke_api_token(t).await.unwrap());
    assert!(!s.revoke_api_token(t).await.unwrap());
    assert!(s.token_user("th", now).await.unwrap().is_none());
    s.create_api_token(bob, "two", Role::Editor, "th2").await.unwrap();
    assert_eq!(s.revoke_user_tokens(bob).await.unwrap(), 1);

    // Failed logins per name and address.
    assert_eq!(s.login_failures("bob", "1.2.3.4").await.unwrap(), None);
    assert_eq!(s.record_login_failure("bob", "1.2.3.4", now).await.unwrap(), 1);
    assert_eq!(s.record_login_failure("bob", "1.2.3.4", now).await.unwrap(), 2);
    assert_eq!(s.record_login_failure("bob", "5.6.7.8", now).await.unwrap(), 1);
    assert_eq!(s.login_failures("bob", "1.2.3.4").await.unwrap().unwrap().0, 2);
    s.clear_login_failures("bob", "1.2.3.4").await.unwrap();
    assert_eq!(s.login_failures("bob", "1.2.3.4").await.unwrap(), None);

    // Removing a user removes its sessions and tokens.
    s.create_session("h3", bob, now).await.unwrap();
    s.delete_user(bob).await.unwrap();
    assert!(s.session_user("h3", now).await.unwrap().is_none());
    assert_eq!(s.list_api_tokens(None).await.unwrap().len(), 0, "{b}");
}

/// A way of calling the app in the matrix.
struct Caller {
    label: String,
    client: reqwest::Client,
    /// None: anonymous.
    role: Option<Role>,
}

/// Ids to fill every route pattern's parameters with.
pub(crate) struct Ids {
    pub candidate: i64,
    pub version: i64,
    pub run: i64,
    pub profile: i64,
    pub scorecard: i64,
    pub user: i64,
    pub token: i64,
    /// The eval set of `version` (the API names sets and versions apart).
    pub evalset: i64,
    /// The query naming an attempt of `run` with a token timeline (`timeline_query`).
    pub timeline: String,
    /// A schedule of `candidate` on the version's set, and a review item of `run`.
    pub schedule: i64,
    pub review_item: i64,
    /// A workload version (its pages and API).
    pub workload: i64,
}

/// A small generated workload stored as a version: its id, for the workload routes.
pub(crate) async fn seed_workload(app: &TestApp) -> i64 {
    let spec = bakeoff::domain::workload::generate::SharedPrefixSpec {
        name: "seeded-traffic".into(),
        description: String::new(),
        requests: 5,
        per_second: 1.0,
        poisson: false,
        seed: 1,
        system_tokens: 8,
        prefixes: Vec::new(),
        suffix_min: 1,
        suffix_max: 4,
        output_tokens: 3,
        cache_bust: false,
        block_tokens: 4,
    };
    app.store
        .save_workload_version(&spec.generate("seed").unwrap())
        .await
        .unwrap()
        .0
}

/// The query of `/runs/{id}/timeline` naming the run's first attempt with a token timeline
/// (its first attempt when none has one: the route then answers 404).
pub(crate) async fn timeline_query(app: &TestApp, run: i64) -> String {
    let records = app.store.list_request_records(run).await.unwrap();
    let streamed = records
        .iter()
        .find(|r| r.chunks.len() >= bakeoff::app::pages::charts::TIMELINE_MIN_CHUNKS);
    let Some(r) = streamed.or(records.first()) else {
        return String::new();
    };
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("candidate", &r.candidate_id.to_string())
        .append_pair("case", &r.case_id)
        .append_pair("phase", r.phase.as_str())
        .append_pair("repetition", &r.repetition.to_string())
        .append_pair("attempt", &r.attempt.to_string())
        .finish()
}

/// The eval set a version belongs to.
pub(crate) async fn evalset_of(app: &TestApp, version: i64) -> i64 {
    app.store
        .get_evalset_version(version)
        .await
        .unwrap()
        .unwrap()
        .evalset_id
}

async fn seed(app: &TestApp) -> Ids {
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("target", "http://127.0.0.1:1/v1").await;
    // A run measures the candidate on the version, and a scorecard names the profile: the
    // matrix's delete routes are then refused for being in use, and every later caller still
    // finds them.
    app.create_run("measures target", version, &[candidate]).await;
    let run = app.finished_run("judged", None).await;
    let profile = app
        .store
        .save_threshold_profile("gate", "", &[], "test", "test")
        .await
        .unwrap()
        .0;
    let scorecard = app
        .store
        .save_scorecard(&bakeoff::domain::scorecard::NewScorecard {
            run_id: run,
            profile_id: profile,
            profile_version: 1,
            incumbent: None,
            pipeline: Default::default(),
            created_by: "test".into(),
            note: String::new(),
            verdicts: vec![],
        })
        .await
        .unwrap();
    app.add_user("seed-admin", Role::Admin).await;
    app.add_user("target-user", Role::Viewer).await;
    let target = app.store.find_user("target-user").await.unwrap().unwrap();
    let (token, _) = accounts_app::create_token(app.store.as_ref(), "test", &target, "t", None)
        .await
        .unwrap();
    let evalset = evalset_of(app, version).await;
    let (schedule, review_item) = schedule_and_review_item(app, evalset, candidate, run).await;
    Ids {
        candidate,
        version,
        run,
        profile,
        scorecard,
        user: target.id,
        token: token.id,
        evalset,
        timeline: timeline_query(app, run).await,
        schedule,
        review_item,
        workload: seed_workload(app).await,
    }
}

/// A schedule of `candidate` on `evalset`, and a review item of `run`'s first record (the run
/// must have one): the ids their pages need.
pub(crate) async fn schedule_and_review_item(app: &TestApp, evalset: i64, candidate: i64, run: i64) -> (i64, i64) {
    let config = bakeoff::domain::run::RunConfig::default();
    let schedule = bakeoff::app::schedules::save(
        &app.store,
        None,
        &bakeoff::app::schedules::ScheduleRequest {
            name: "nightly".into(),
            evalset: evalset.to_string(),
            evalset_version: "latest".into(),
            candidates: vec![candidate.to_string()],
            draft: bakeoff::domain::run::RunDraft::from_config(&config),
            load: bakeoff::domain::presets::LoadDraft::from_config(&config),
            cadence: "0 0 1 1 *".into(),
            time_zone: "UTC".into(),
            ..Default::default()
        },
        "test",
    )
    .await
    .unwrap();
    let answer = app
        .store
        .list_request_records(run)
        .await
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    app.store
        .add_review_items(
            &[bakeoff::domain::review::NewReviewItem {
                run_id: run,
                candidate_id: answer.candidate_id,
                case_id: answer.case_id.to_string(),
                repetition: answer.repetition,
                reasons: vec![bakeoff::domain::review::Reason::Manual],
                detail: String::new(),
                added_by: "test".into(),
            }],
            Timestamp::now(),
        )
        .await
        .unwrap();
    (schedule, app.store.list_review_items(Some(run), 1).await.unwrap()[0].id)
}

use bakeoff::app::accounts as accounts_app;

/// The path of route `pattern` with its parameters filled in (and the query a page needs to
/// show something: the scorecard's profile, the runs compared, the history's candidate).
pub(crate) fn fill(pattern: &str, ids: &Ids) -> String {
    // The JSON API's resources are named as the pages' are, after its prefix.
    let resource = pattern.strip_prefix("/api/v1").unwrap_or(pattern);
    let id = if resource.starts_with("/workload") {
        ids.workload
    } else if resource.starts_with("/evalsets") {
        ids.evalset
    } else if resource.starts_with("/evalset-versions") {
        ids.version
    } else if resource.starts_with("/profiles") {
        ids.profile
    } else if resource.starts_with("/candidates") {
        ids.candidate
    } else if resource.starts_with("/runs") {
        ids.run
    } else if resource.starts_with("/thresholds") {
        ids.profile
    } else if resource.starts_with("/scorecards") {
        ids.scorecard
    } else if resource.starts_with("/users") {
        ids.user
    } else if resource.ends_with("/delete") && resource.starts_with("/schedules") {
        // Deleted by the first editor, the schedule would be missing for every later caller.
        0
    } else if resource.starts_with("/schedules") {
        ids.schedule
    } else if resource.starts_with("/review/items") {
        ids.review_item
    } else {
        ids.token
    };
    let path = pattern
        .replace("{id}", &id.to_string())
        .replace(
            "{version_id}",
            &(if resource.starts_with("/workload") {
                ids.workload
            } else {
                ids.version
            })
            .to_string(),
        )
        .replace("{other_id}", &ids.version.to_string())
        .replace("{position}", "1")
        .replace("{*path}", "app.css");
    if (path.contains("/scorecard") && !path.contains("/save")) || path.ends_with("/verdict") {
        format!("{path}?profile={}", ids.profile)
    } else if path.ends_with("/timeline") {
        format!("{path}?{}", ids.timeline)
    } else if path.ends_with("/archive/compare") {
        format!("{path}?runs={}", ids.run)
    } else if path.ends_with("/archive/history") {
        format!("{path}?candidate={}&evalset={}", ids.candidate, ids.evalset)
    } else {
        path
    }
}

/// How the guard answered, when it refused: Some("login") or Some("role").
async fn refusal(r: reqwest::Response) -> (u16, Option<&'static str>) {
    let status = r.status().as_u16();
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = r.text().await.unwrap_or_default();
    let kind = if (status == 401 && body.contains("Log in first"))
        || (status == 303 && location.starts_with("/login?next="))
    {
        Some("login")
    } else if status == 403 && body.contains("This needs the") {
        Some("role")
    } else {
        None
    };
    (status, kind)
}

async fn send(client: &reqwest::Client, app: &TestApp, method: &str, path: &str) -> reqwest::Response {
    let request = if method == "GET" {
        client.get(app.url(path))
    } else {
        client
            .request(method.parse().expect("an HTTP method"), app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("")
    };
    request.send().await.unwrap()
}

fn bearer_client(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()
        .unwrap()
}

/// Routes in the order the matrix calls them: logout last (it ends the caller's session).
fn routes_in_order() -> Vec<(&'static str, &'static str, Access)> {
    let mut routes: Vec<_> = ROUTES.to_vec();
    routes.sort_by_key(|(_, p, _)| *p == "/logout");
    routes
}

each_backend!(every_route_answers_each_role_as_the_access_table_says);
async fn every_route_answers_each_role_as_the_access_table_says(db: TestStore) {
    let app = spawn_app_on(db).await;
    let ids = seed(&app).await;
    let mut callers = vec![Caller {
        label: "anonymous".into(),
        client: app.client.clone(),
        role: None,
    }];
    for role in Role::ALL {
        let name = format!("{role}-user");
        let password = app.add_user(&name, role).await;
        let (client, _) = app.login(&name, &password).await;
        callers.push(Caller {
            label: format!("{role} session"),
            client,
            role: Some(role),
        });
        let user = app.store.find_user(&name).await.unwrap().unwrap();
        let (_, secret) = accounts_app::create_token(app.store.as_ref(), "test", &user, "matrix", None)
            .await
            .unwrap();
        callers.push(Caller {
            label: format!("{role} token"),
            client: bearer_client(&secret),
            role: Some(role),
        });
    }
    for caller in &callers {
        for (method, pattern, access) in routes_in_order() {
            let path = fill(pattern, &ids);
            let (status, refused) = refusal(send(&caller.client, &app, method, &path).await).await;
            let expected = match (access, caller.role) {
                (Access::Public, _) => None,
                (Access::Role(_), None) => Some("login"),
                (Access::Role(needed), Some(has)) if has < needed => Some("role"),
                (Access::Role(_), Some(_)) => None,
            };
            assert_eq!(
                refused, expected,
                "{}: {} {method} {path} answered {status}",
                app.backend, caller.label
            );
            if expected.is_none() {
                assert!(
                    status != 405 && !(method == "GET" && status == 404),
                    "{}: {} {method} {path} answered {status}: the route was not reached",
                    app.backend,
                    caller.label
                );
            }
        }
    }
}

each_backend!(single_user_mode_reaches_every_route_without_a_login);
async fn single_user_mode_reaches_every_route_without_a_login(db: TestStore) {
    let app = spawn_app_on(db).await;
    let version = app.create_evalset().await;
    let run = app.finished_run("judged", None).await;
    let ids = Ids {
        candidate: app.create_candidate("target", "http://127.0.0.1:1/v1").await,
        version,
        run,
        profile: 1,
        scorecard: 1,
        user: 1,
        token: 1,
        evalset: evalset_of(&app, version).await,
        timeline: timeline_query(&app, run).await,
        // Only refusals are checked here: a missing schedule or item may answer 404.
        schedule: 0,
        review_item: 0,
        workload: seed_workload(&app).await,
    };
    for (method, pattern, _) in ROUTES {
        // The users and account pages add a user, which would switch the mode.
        if pattern.starts_with("/users") || pattern.starts_with("/account") || *method != "GET" {
            continue;
        }
        let path = fill(pattern, &ids);
        let (status, refused) = refusal(send(&app.client, &app, method, &path).await).await;
        assert_eq!(refused, None, "{}: {method} {path} answered {status}", app.backend);
    }
    let page = app.get_html("/").await;
    assert_eq!(page.count("#mode"), 1, "the single-user banner");
    assert_eq!(page.count("#logout"), 0);
}

each_backend!(a_foreign_origin_or_a_missing_token_changes_nothing_in_accounts_mode);
async fn a_foreign_origin_or_a_missing_token_changes_nothing_in_accounts_mode(db: TestStore) {
    let app = spawn_app_on(db).await;
    let ids = seed(&app).await;
    let password = app.add_user("root", Role::Admin).await;
    let (admin, secret) = app.login("root", &password).await;
    let audit_before = app.store.count_audit(&Default::default()).await.unwrap();
    let cookie_only = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (method, pattern, _) in ROUTES.iter().filter(|(m, _, _)| *m == "POST") {
        let path = fill(pattern, &ids);
        let foreign = admin
            .post(app.url(&path))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", "http://evil.example")
            .body("username=mallory&role=admin&password=mallory-password-1")
            .send()
            .await
            .unwrap();
        assert_eq!(
            foreign.status(),
            403,
            "{}: {method} {path} from evil.example",
            app.backend
        );
        // The session cookie alone (what a page on another site can make a browser send).
        let no_token = cookie_only
            .post(app.url(&path))
            .header("cookie", format!("bakeoff_session={secret}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("username=mallory&role=admin&password=mallory-password-1")
            .send()
            .await
            .unwrap();
        assert_eq!(
            no_token.status(),
            403,
            "{}: {method} {path} without a token",
            app.backend
        );
    }
    assert_eq!(app.store.count_audit(&Default::default()).await.unwrap(), audit_before);
    assert!(app.store.find_user("mallory").await.unwrap().is_none());
}

each_backend!(sessions_expire_and_logout_ends_them_on_the_server);
async fn sessions_expire_and_logout_ends_them_on_the_server(db: TestStore) {
    let app = spawn_app_on(db).await;
    let password = app.add_user("ada", Role::Admin).await;
    let ada = app.store.find_user("ada").await.unwrap().unwrap();
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let with_cookie = |secret: &str| {
        plain
            .get(app.url("/candidates"))
            .header("cookie", format!("bakeoff_session={secret}"))
            .header("accept", "text/html")
    };
    // A session created longer ago than the absolute limit is refused.
    let old = accounts::new_secret("");
    app.store
        .create_session(
            &secret_hash(&old),
            ada.id,
            Timestamp(Timestamp::now().0 - SESSION_MAX_MS - 1),
        )
        .await
        .unwrap();
    let r = with_cookie(&old).send().await.unwrap();
    assert_eq!(r.status(), 303, "{}", app.backend);
    assert!(
        r.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/login?next=%2Fcandidates")
    );
    let cleared = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .any(|v| v.to_str().unwrap().starts_with("bakeoff_session=;"));
    assert!(cleared, "the stale cookie is removed");

    let (client, secret) = app.login("ada", &password).await;
    assert_eq!(with_cookie(&secret).send().await.unwrap().status(), 200);
    let out = client
        .post(app.url("/logout"))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    // The old cookie no longer works: the session is gone on the server, not just in the browser.
    assert_eq!(with_cookie(&secret).send().await.unwrap().status(), 303);
    let audit = app.store.list_audit(&Default::default(), 10, 0).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.action == "session.logged_out" && e.actor == "ada"),
        "{audit:?}"
    );
}

each_backend!(failed_logins_are_throttled_per_name_and_address_and_remembered);
async fn failed_logins_are_throttled_per_name_and_address_and_remembered(db: TestStore) {
    let app = spawn_app_on(db).await;
    let password = app.add_user("ada", Role::Admin).await;
    for attempt in 1..=accounts::FREE_LOGIN_FAILURES {
        let r = app
            .post_form("/login", &[("username", "ada"), ("password", "wrong password!")])
            .await;
        assert_eq!(r.status(), 401, "{}: attempt {attempt}", app.backend);
    }
    // Now even the right password must wait, and the page says so.
    let r = app
        .post_form("/login", &[("username", "ada"), ("password", password.as_str())])
        .await;
    assert_eq!(r.status(), 429, "{}", app.backend);
    let page = crate::support::app::Page::parse(429, &r.text().await.unwrap());
    assert!(
        page.text("#login-error").contains("Try again in"),
        "{}",
        page.text("#login-error")
    );
    // Counted in the database (so a restart does not reset it), per name and address.
    let (failures, _) = app.store.login_failures("ada", "127.0.0.1").await.unwrap().unwrap();
    assert_eq!(failures, accounts::FREE_LOGIN_FAILURES);
    assert!(app.store.login_failures("ada", "10.0.0.1").await.unwrap().is_none());
}

each_backend!(a_password_change_needs_the_current_one_and_ends_other_sessions);
async fn a_password_change_needs_the_current_one_and_ends_other_sessions(db: TestStore) {
    let app = spawn_app_on(db).await;
    app.add_user("root", Role::Admin).await;
    let password = app.add_user("ada", Role::Editor).await;
    let (client, _) = app.login("ada", &password).await;
    let (_, other) = app.login("ada", &password).await;
    let change = |current: &str, new: &str| {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("current_password", current)
            .append_pair("new_password", new)
            .append_pair("confirm_password", new)
            .finish();
        client
            .post(app.url("/account/password"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    let wrong = change("not my password", "a brand new password").await.unwrap();
    assert_eq!(wrong.status(), 422, "{}", app.backend);
    let page = crate::support::app::Page::parse(422, &wrong.text().await.unwrap());
    assert!(page.text("#password-error").contains("current password"));
    assert_eq!(change(&password, "short").await.unwrap().status(), 422);
    assert_eq!(change(&password, "a brand new password").await.unwrap().status(), 303);
    // This session stays; the other one ended; the old password no longer works.
    assert_eq!(client.get(app.url("/account")).send().await.unwrap().status(), 200);
    assert!(
        app.store
            .session_user(&secret_hash(&other), Timestamp::now())
            .await
            .unwrap()
            .is_none(),
        "{}",
        app.backend
    );
    let old = app
        .post_form("/login", &[("username", "ada"), ("password", password.as_str())])
        .await;
    assert_eq!(old.status(), 401);
    app.login("ada", "a brand new password").await;
}

each_backend!(api_tokens_authenticate_without_csrf_until_revoked_and_never_above_their_user);
async fn api_tokens_authenticate_without_csrf_until_revoked_and_never_above_their_user(db: TestStore) {
    let app = spawn_app_on(db).await;
    app.add_user("root", Role::Admin).await;
    let password = app.add_user("ci", Role::Editor).await;
    let (client, _) = app.login("ci", &password).await;
    let created = client
        .post(app.url("/account/tokens"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("name=pipeline&role=editor")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200, "{}", app.backend);
    assert_eq!(created.headers()["cache-control"], "no-store");
    let page = crate::support::app::Page::parse(200, &created.text().await.unwrap());
    let secret = page.text("#new-token-secret");
    assert!(secret.starts_with(accounts::TOKEN_PREFIX), "{secret}");
    // Revealed once, with a button that copies it (shown by the script); a new token starts at
    // the least role, a wider one is a choice.
    assert_eq!(page.count("button[data-copy='#new-token-secret']"), 1);
    assert_eq!(
        page.attr("#f-token-role option[selected]", "value").as_deref(),
        Some("viewer")
    );
    // Shown once: the account page lists the token, never the secret again.
    let again = client
        .get(app.url("/account"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(again.contains("pipeline") && !again.contains(&secret));

    let bearer = bearer_client(&secret);
    let json = bearer.get(app.url("/audit/export.json")).send().await.unwrap();
    assert_eq!(json.status(), 200);
    assert!(json.text().await.unwrap().contains("token.created"));
    // A state-changing request with the token needs no CSRF token, and is audited as its user.
    let made = bearer
        .post(app.url("/thresholds"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("name=from-ci&changed_by=ci&rationale=x")
        .send()
        .await
        .unwrap();
    assert_ne!(made.status(), 403, "{}", app.backend);
    // An editor's token cannot manage users.
    assert_eq!(bearer.get(app.url("/users")).send().await.unwrap().status(), 403);
    // A viewer token of an editor cannot change anything.
    let ci = app.store.find_user("ci").await.unwrap().unwrap();
    let (_, viewer_secret) = accounts_app::create_token(app.store.as_ref(), "test", &ci, "read", Some(Role::Viewer))
        .await
        .unwrap();
    let viewer = bearer_client(&viewer_secret);
    assert_eq!(viewer.get(app.url("/candidates")).send().await.unwrap().status(), 200);
    let refused = viewer
        .post(app.url("/runs/1/cancel"))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    // Asking for more than the user has is refused.
    assert!(
        accounts_app::create_token(app.store.as_ref(), "test", &ci, "x", Some(Role::Admin))
            .await
            .is_err()
    );

    // Revoked: refused at once, with a 401 that says why.
    let token = app.store.list_api_tokens(Some(ci.id)).await.unwrap();
    let id = token.iter().find(|t| t.name == "pipeline").unwrap().id;
    let r = client
        .post(app.url(&format!("/account/tokens/{id}/revoke")))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let after = bearer.get(app.url("/audit/export.json")).send().await.unwrap();
    assert_eq!(after.status(), 401, "{}", app.backend);
    assert!(
        after.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );
    assert_eq!(
        bearer_client("bko_forged")
            .get(app.url("/"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
}

each_backend!(account_changes_are_audited_with_the_acting_user_and_the_last_admin_is_kept);
async fn account_changes_are_audited_with_the_acting_user_and_the_last_admin_is_kept(db: TestStore) {
    let app = spawn_app_on(db).await;
    let password = app.add_user("root", Role::Admin).await;
    let (admin, _) = app.login("root", &password).await;
    let post = |path: &str, body: &str| {
        admin
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_string())
            .send()
    };
    let r = post("/users", "username=Bea&role=viewer&password=bea-password-123")
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{}", app.backend);
    let bea = app.store.find_user("bea").await.unwrap().unwrap();
    assert_eq!(
        post(&format!("/users/{}/role", bea.id), "role=editor")
            .await
            .unwrap()
            .status(),
        303
    );
    assert_eq!(
        post(&format!("/users/{}/password", bea.id), "password=another-password-1")
            .await
            .unwrap()
            .status(),
        303
    );
    assert_eq!(
        post(&format!("/users/{}/disable", bea.id), "").await.unwrap().status(),
        303
    );
    let disabled = app
        .post_form("/login", &[("username", "bea"), ("password", "another-password-1")])
        .await;
    assert_eq!(disabled.status(), 401, "a disabled user cannot log in");
    assert_eq!(
        post(&format!("/users/{}/enable", bea.id), "").await.unwrap().status(),
        303
    );
    // The only admin cannot demote or disable themselves.
    let root = app.store.find_user("root").await.unwrap().unwrap();
    let r = post(&format!("/users/{}/role", root.id), "role=viewer").await.unwrap();
    assert_eq!(r.status(), 422);
    assert!(r.text().await.unwrap().contains("only active admin"));
    assert_eq!(
        post(&format!("/users/{}/disable", root.id), "").await.unwrap().status(),
        422
    );

    let entries = app.store.list_audit(&Default::default(), 100, 0).await.unwrap();
    for action in [
        "user.created",
        "user.role_changed",
        "user.password_reset",
        "user.disabled",
        "user.enabled",
    ] {
        assert!(
            entries
                .iter()
                .any(|e| e.action == action && e.actor == "root" && e.target.contains("bea")),
            "{}: {action} by root: {entries:?}",
            app.backend
        );
    }
    // Changes elsewhere name the logged-in user too.
    let r = post(
        "/candidates",
        "name=c&provider=openai-chat&base_url=http%3A%2F%2F127.0.0.1%3A1%2Fv1&model=m",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 303, "{}", app.backend);
    let entries = app.store.list_audit(&Default::default(), 1, 0).await.unwrap();
    assert_eq!(
        (entries[0].action.as_str(), entries[0].actor.as_str()),
        ("candidate.created", "root")
    );
    let users = app.get_html("/users").await;
    assert_eq!(users.status, 401, "anonymous, without a page Accept header");
}

each_backend!(an_editor_manages_candidates_but_not_their_keys);
async fn an_editor_manages_candidates_but_not_their_keys(db: TestStore) {
    let app = spawn_app_on(db).await;
    app.add_user("root", Role::Admin).await;
    let password = app.add_user("ed", Role::Editor).await;
    let (editor, _) = app.login("ed", &password).await;
    let post = |path: &str, fields: &[(&str, &str)]| {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        editor
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    let base = [
        ("name", "c1"),
        ("provider", "openai-chat"),
        ("base_url", "http://127.0.0.1:1/v1"),
        ("model", "m"),
    ];
    assert_eq!(
        post("/candidates", &base).await.unwrap().status(),
        303,
        "{}",
        app.backend
    );
    let mut keyed = base.to_vec();
    keyed[0] = ("name", "c2");
    keyed.push(("api_key", "sk-editor-typed"));
    let r = post("/candidates", &keyed).await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("admin"));
    let id = app.store.list_candidates().await.unwrap()[0].id;
    let mut env = base.to_vec();
    env.push(("api_key_env", "BAKEOFF_KEY_X"));
    assert_eq!(
        post(&format!("/candidates/{id}/edit"), &env).await.unwrap().status(),
        403
    );
    let mut renamed = base.to_vec();
    renamed[0] = ("name", "c1-renamed");
    assert_eq!(
        post(&format!("/candidates/{id}/edit"), &renamed)
            .await
            .unwrap()
            .status(),
        303
    );
}

/// Every row of every table as text (what a database dump holds).
async fn dump(db_url: &str, backend: &str) -> String {
    use sqlx::Connection;
    if backend == "sqlite" {
        // The database file itself, with its write-ahead log.
        let path = db_url.trim_start_matches("sqlite://");
        let mut bytes = std::fs::read(path).unwrap();
        bytes.extend(std::fs::read(format!("{path}-wal")).unwrap_or_default());
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        let mut conn = sqlx::PgConnection::connect(db_url).await.unwrap();
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let mut out = String::new();
        for t in tables {
            let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT row_to_json(x)::text FROM \"{t}\" x"
            )))
            .fetch_all(&mut conn)
            .await
            .unwrap();
            out.push_str(&rows.join("\n"));
        }
        out
    }
}

each_backend!(a_planted_key_password_and_token_are_in_no_dump_and_no_account_page);
async fn a_planted_key_password_and_token_are_in_no_dump_and_no_account_page(db: TestStore) {
    const PLANTED: &str = "sk-PLANTED-77aa31c0";
    let (url, backend) = (db.url.clone(), db.backend);
    let app = spawn_app_on(db).await;
    let password = app.add_user("root", Role::Admin).await;
    let (admin, session) = app.login("root", &password).await;
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("name", "keyed"),
            ("provider", "openai-chat"),
            ("base_url", "http://127.0.0.1:1/v1"),
            ("model", "m"),
            ("api_key", PLANTED),
        ])
        .finish();
    let r = admin
        .post(app.url("/candidates"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{backend}");
    let root = app.store.find_user("root").await.unwrap().unwrap();
    let (_, token) = accounts_app::create_token(app.store.as_ref(), "root", &root, "ci", None)
        .await
        .unwrap();
    let everything = dump(&url, backend).await;
    assert!(
        everything.contains("sealed:v2:"),
        "{backend}: the dump has the sealed key"
    );
    for secret in [PLANTED, password.as_str(), token.as_str(), session.as_str()] {
        assert!(
            !everything.contains(secret),
            "{backend}: {secret} is in the database dump"
        );
    }
    for path in [
        "/account",
        "/users",
        "/audit",
        "/audit/export.csv",
        "/audit/export.json",
        "/candidates",
    ] {
        let text = admin.get(app.url(path)).send().await.unwrap().text().await.unwrap();
        for secret in [PLANTED, password.as_str(), token.as_str()] {
            assert!(!text.contains(secret), "{backend}: {path} shows a secret");
        }
    }
}

each_backend!(an_admin_removes_a_user_ending_their_sessions_and_tokens_but_not_themselves);
async fn an_admin_removes_a_user_ending_their_sessions_and_tokens_but_not_themselves(db: TestStore) {
    let app = spawn_app_on(db).await;
    let password = app.add_user("root", Role::Admin).await;
    let (admin, _) = app.login("root", &password).await;
    let bea_password = app.add_user("bea", Role::Editor).await;
    let (_, bea_session) = app.login("bea", &bea_password).await;
    let bea = app.store.find_user("bea").await.unwrap().unwrap();
    let (_, bea_token) = accounts_app::create_token(app.store.as_ref(), "test", &bea, "ci", None)
        .await
        .unwrap();
    let as_bea_session = || {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(app.url("/candidates"))
            .header("cookie", format!("bakeoff_session={bea_session}"))
            .header("accept", "text/html")
            .send()
    };
    let as_bea_token = || bearer_client(&bea_token).get(app.url("/api/v1/candidates")).send();
    assert_eq!(as_bea_session().await.unwrap().status(), 200, "{}", app.backend);
    assert_eq!(as_bea_token().await.unwrap().status(), 200);

    // The Users page offers it as a form with the CSRF token, like every form.
    let remove = format!("/users/{}/remove", bea.id);
    let page = crate::support::app::Page::parse(
        200,
        &admin.get(app.url("/users")).send().await.unwrap().text().await.unwrap(),
    );
    let selector = format!("form[action=\"{remove}\"] input[name=_csrf]");
    assert_eq!(page.count(&selector), 1, "a Remove button for bea");
    // Without the token (a page on another site posting with the admin's cookie): refused.
    let admin_session = app.store.list_users().await.unwrap();
    assert_eq!(admin_session.len(), 2);
    let cookie_only = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let (_, root_secret) = app.login("root", &password).await;
    let r = cookie_only
        .post(app.url(&remove))
        .header("cookie", format!("bakeoff_session={root_secret}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(app.store.find_user("bea").await.unwrap().is_some(), "nothing removed");

    let r = admin
        .post(app.url(&remove))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{}", app.backend);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    let notice = crate::support::app::Page::parse(
        200,
        &admin.get(app.url(&to)).send().await.unwrap().text().await.unwrap(),
    )
    .text("#notice");
    assert!(notice.contains("Removed bea"), "{notice}");
    assert!(app.store.find_user("bea").await.unwrap().is_none());
    // Their session and token no longer work.
    assert_eq!(as_bea_session().await.unwrap().status(), 303, "back to the login");
    assert_eq!(as_bea_token().await.unwrap().status(), 401);
    let entries = app.store.list_audit(&Default::default(), 5, 0).await.unwrap();
    let removed = entries
        .iter()
        .find(|e| e.action == "user.removed")
        .unwrap_or_else(|| panic!("{entries:?}"));
    assert_eq!(removed.actor, "root");
    assert!(removed.target.contains("bea"), "{removed:?}");
    assert!(
        removed.detail.contains("1 session(s) ended, 1 token(s) revoked"),
        "{removed:?}"
    );

    // Not yourself, and never the last admin (the terminal has no account to compare).
    let root = app.store.find_user("root").await.unwrap().unwrap();
    let audited = app.store.count_audit(&Default::default()).await.unwrap();
    let r = admin
        .post(app.url(&format!("/users/{}/remove", root.id)))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let page = crate::support::app::Page::parse(422, &r.text().await.unwrap());
    assert!(
        page.text("#users-error").contains("cannot remove yourself"),
        "{}",
        page.text("#users-error")
    );
    let e = accounts_app::remove_user(app.store.as_ref(), "terminal", None, &root)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("only active admin"), "{e}");
    assert!(app.store.find_user("root").await.unwrap().is_some());
    assert_eq!(app.store.count_audit(&Default::default()).await.unwrap(), audited);
}

/// The `Set-Cookie` values of a response.
fn set_cookies(r: &reqwest::Response) -> Vec<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

each_backend!(session_cookies_are_httponly_lax_and_not_secure_over_http);
async fn session_cookies_are_httponly_lax_and_not_secure_over_http(db: TestStore) {
    let app = spawn_app_on(db).await;
    let password = app.add_user("root", Role::Admin).await;
    let r = app
        .post_form(
            "/login",
            &[("username", "root"), ("password", &password), ("next", "/")],
        )
        .await;
    assert_eq!(r.status(), 303, "{}", app.backend);
    let cookies = set_cookies(&r);
    let session = cookies
        .iter()
        .find(|c| c.starts_with("bakeoff_session="))
        .unwrap_or_else(|| panic!("{cookies:?}"));
    let attributes: Vec<&str> = session.split("; ").skip(1).collect();
    assert!(attributes.contains(&"HttpOnly"), "{session}");
    assert!(attributes.contains(&"SameSite=Lax"), "{session}");
    assert!(
        !attributes.contains(&"Secure"),
        "http://127.0.0.1 is no https: {session}"
    );
    // The per-browser cookie a first page sets follows the same rules.
    let first = reqwest::Client::new().get(app.url("/login")).send().await.unwrap();
    let browser = set_cookies(&first)
        .into_iter()
        .find(|c| c.starts_with("bakeoff_browser="))
        .expect("a first page sets the browser cookie");
    assert!(browser.contains("; HttpOnly") && browser.contains("; SameSite=Lax") && !browser.contains("Secure"));
}

/// `bakeoff serve ARGS` as its own process on `database_url` with `env` (and no inherited
/// BAKEOFF_* settings); its error output captured (a few lines: the log stays at warn).
fn serve_process(database_url: &str, args: &[String], env: &[(&str, &str)]) -> std::process::Child {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"));
    command.arg("serve").args(args).args(["--database-url", database_url]);
    for (name, _) in std::env::vars() {
        if name.starts_with("BAKEOFF_") {
            command.env_remove(name);
        }
    }
    command
        .envs(env.iter().copied())
        .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
        .env("BAKEOFF_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting bakeoff serve")
}

/// A port free now (bound on every interface, then released for the server).
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .expect("finding a free port")
        .port()
}

/// Waits (bounded) for the child to end on its own; its output. Killed if it does not.
async fn ended(mut child: std::process::Child) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("bakeoff serve did not end");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

each_backend!(serve_refuses_a_reachable_address_without_a_user_and_starts_with_the_admin_password);
async fn serve_refuses_a_reachable_address_without_a_user_and_starts_with_the_admin_password(db: TestStore) {
    let url = db.url.clone();
    let port = free_port();
    let listen = vec!["--listen".to_string(), format!("0.0.0.0:{port}")];
    let mut refused = listen.clone();
    refused.extend(["--public-url".to_string(), format!("http://bakeoff.example.com:{port}")]);
    let out = ended(serve_process(&url, &refused, &[])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}: it started: {stderr}", db.backend);
    for says in [
        "refusing to start",
        "0.0.0.0",
        "bakeoff user add",
        "--role admin",
        "BAKEOFF_ADMIN_PASSWORD",
        "127.0.0.1",
    ] {
        assert!(stderr.contains(says), "{}: no {says:?} in: {stderr}", db.backend);
    }
    assert_eq!(db.store.count_users().await.unwrap(), 0);

    // First start with the password in the environment: the admin exists and can log in; the
    // public URL is https, so the cookies are Secure.
    let public = format!("https://127.0.0.1:{port}");
    let mut args = listen.clone();
    args.extend(["--public-url".to_string(), public.clone()]);
    let mut child = serve_process(
        &url,
        &args,
        &[
            ("BAKEOFF_ADMIN_PASSWORD", "first-admin-password-1"),
            ("BAKEOFF_ADMIN_USER", "chief"),
        ],
    );
    let base = format!("http://127.0.0.1:{port}");
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let login_page = loop {
        if let Ok(r) = plain.get(format!("{base}/login")).send().await {
            break r;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!("serve ended ({status}): {}", String::from_utf8_lossy(&out.stderr));
        }
        assert!(std::time::Instant::now() < deadline, "serve did not answer");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(login_page.status(), 200);
    let browser = set_cookies(&login_page)
        .into_iter()
        .find(|c| c.starts_with("bakeoff_browser="))
        .expect("the browser cookie");
    assert!(browser.contains("; Secure"), "{browser}");
    let form = crate::support::app::Page::parse(200, &login_page.text().await.unwrap());
    let csrf = form.attr("input[name=_csrf]", "value").expect("the login form's token");
    let r = plain
        .post(format!("{base}/login"))
        .header("origin", &public)
        .header("cookie", browser.split(';').next().unwrap())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "username=chief&password=first-admin-password-1&next=%2F&_csrf={csrf}"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{}: {:?}", db.backend, r.text().await);
    let session = set_cookies(&r)
        .into_iter()
        .find(|c| c.starts_with("bakeoff_session="))
        .expect("the session cookie");
    for attribute in ["; HttpOnly", "; SameSite=Lax", "; Secure"] {
        assert!(session.contains(attribute), "{session}");
    }
    let users = plain
        .get(format!("{base}/users"))
        .header("cookie", session.split(';').next().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(users.status(), 200, "the admin reaches the Users page");
    assert!(users.text().await.unwrap().contains("chief"));
    let chief = db.store.find_user("chief").await.unwrap().expect("the first admin");
    assert_eq!(chief.role, Role::Admin);
    child.kill().unwrap();
    child.wait().unwrap();
}

each_backend!(hostile_names_are_neutralised_in_the_audit_csv_export);
async fn hostile_names_are_neutralised_in_the_audit_csv_export(db: TestStore) {
    let app = spawn_app_on(db).await;
    let password = app.add_user("root", Role::Admin).await;
    // A user name may begin with `-` or `@`: both start a formula in a spreadsheet.
    let hostile_user = "@sum-1";
    let hostile_password = {
        let (admin, _) = app.login("root", &password).await;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("username", hostile_user),
                ("role", "editor"),
                ("password", "hostile-password-1"),
            ])
            .finish();
        let r = admin
            .post(app.url("/users"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "{}", app.backend);
        "hostile-password-1"
    };
    let (editor, _) = app.login(hostile_user, hostile_password).await;
    let name = "=HYPERLINK(\"http://evil.example\",\"x\")<script>alert(1)</script>";
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("name", name),
            ("provider", "openai-chat"),
            ("base_url", "http://127.0.0.1:1/v1"),
            ("model", "m"),
        ])
        .finish();
    let r = editor
        .post(app.url("/candidates"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{}", app.backend);

    let (admin, _) = app.login("root", &password).await;
    let csv = admin
        .get(app.url("/audit/export.csv"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let created = rows
        .iter()
        .find(|r| r.iter().any(|c| c == "candidate.created"))
        .unwrap_or_else(|| panic!("{csv}"));
    assert!(
        created.iter().any(|c| c == format!("'{hostile_user}")),
        "the actor made text: {created:?}"
    );
    assert!(created.iter().any(|c| c.contains("=HYPERLINK")), "{created:?}");
    for row in &rows {
        for cell in row {
            // A plain number (`-1`) is no formula; any other cell starting so is.
            let formula = cell.starts_with(['=', '+', '-', '@', '\t', '\r']) && cell.parse::<f64>().is_err();
            assert!(!formula, "{}: a formula cell {cell:?}", app.backend);
        }
    }
    // The audit page shows the name as text.
    let page = admin.get(app.url("/audit")).send().await.unwrap().text().await.unwrap();
    assert!(!page.contains("<script>alert(1)"), "{}", app.backend);
    let shown = crate::support::app::Page::parse(200, &page).text("table.audit");
    assert!(shown.contains("<script>alert(1)</script>"), "{}: {shown}", app.backend);
}
