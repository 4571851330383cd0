//! The JSON API under /api/v1 against a served app, through its own OpenAPI document: every
//! documented path is called and answers 2xx with a body of the documented content type and
//! schema; problem details for 400/401/403/404/422; a viewer's token refused on changes; a
//! browser session's changes need the CSRF header while a bearer's do not; and a whole
//! create → poll → scorecard → verdict flow against the built-in mock, whose scorecard is the
//! page export's and whose verdict is the one `bakeoff run start` reports. Both backends.
use std::collections::BTreeSet;
use std::time::Duration;

use bakeoff::app::accounts as accounts_app;
use bakeoff::domain::accounts::Role;
use bakeoff::mock::MockServer;
use serde_json::{Value, json};

use crate::gate::{evalset_text, mock};
use crate::support::app::{Page, TestApp, spawn_app_on};
use crate::support::db::{TestStore, each_backend};

/// An API client holding one bearer token.
pub struct Api {
    pub base: String,
    pub token: String,
    client: reqwest::Client,
}

/// One answer: status, media type (without parameters) and body as JSON (Null when not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub media_type: String,
    pub body: Value,
    pub location: Option<String>,
}

impl Api {
    /// A user with `role` (accounts mode from then on; the first user is an admin as the
    /// accounts rules want) and a token of theirs.
    pub async fn new(app: &TestApp, name: &str, role: Role) -> Api {
        if app.store.count_users().await.unwrap() == 0 && role != Role::Admin {
            app.add_user("root", Role::Admin).await;
        }
        app.add_user(name, role).await;
        let user = app.store.find_user(name).await.unwrap().unwrap();
        let (_, token) = accounts_app::create_token(app.store.as_ref(), "test", &user, "api", None)
            .await
            .unwrap();
        Api::with_token(app, &token)
    }

    pub fn with_token(app: &TestApp, token: &str) -> Api {
        Api {
            base: app.base_url.clone(),
            token: token.to_string(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        }
    }

    pub async fn send(&self, method: &str, path: &str, body: Option<(&str, String)>) -> Answer {
        send(
            self.client
                .request(method.parse().unwrap(), format!("{}{path}", self.base))
                .bearer_auth(&self.token),
            body,
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None).await
    }

    /// POST a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.send("POST", path, Some(("application/json", body.to_string())))
            .await
    }

    /// GET what must answer 200; its body.
    pub async fn ok(&self, path: &str) -> Value {
        let a = self.get(path).await;
        assert_eq!(a.status, 200, "GET {path}: {a:?}");
        a.body
    }
}

async fn send(mut request: reqwest::RequestBuilder, body: Option<(&str, String)>) -> Answer {
    if let Some((content_type, text)) = body {
        request = request.header("content-type", content_type).body(text);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let media_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or_default()
        .to_string();
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = r.text().await.unwrap();
    Answer {
        status,
        media_type,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        location,
    }
}

/// A candidates file (TOML) with one candidate of the mock, without credentials (what an
/// editor may import).
pub fn candidate_toml(name: &str, base_url: &str, model: &str) -> String {
    format!(
        "bakeoff_candidates = 1\n[[candidate]]\nname = \"{name}\"\nprovider = \"openai-chat\"\nbase_url = \"{base_url}\"\nmodel = \"{model}\"\n"
    )
}

/// The same file naming the variable that holds the key (only an admin may import it).
fn candidate_toml_with_key_env(name: &str, base_url: &str, model: &str, var: &str) -> String {
    format!("{}api_key_env = \"{var}\"\n", candidate_toml(name, base_url, model))
}

/// The profile `accuracy ≥ 50 %` in the file's JSON shape.
fn accuracy_profile() -> Value {
    json!({"bakeoff_profile": 1, "name": "accuracy", "rule": [{"metric": "accuracy", "comparator": ">=", "value": 50}]})
}

/// A small, quick run's settings in the settings file's shape.
fn quick_settings() -> Value {
    json!({"concurrency": 4, "warmup_requests": 0, "retries": 0, "timeout_secs": 10})
}

/// What the flow stored, for filling paths.
struct Seed {
    candidate: i64,
    evalset: i64,
    version: i64,
    profile: i64,
    run: i64,
    /// A scorecard of the run saved through the API.
    scorecard: i64,
    /// A review item of the run (0 until a test queues one: `crate::review::queue_for_walk`).
    review_item: i64,
    /// A run of two candidates answering one case (0 until queued, like `review_item`).
    pair_run: i64,
    /// A workload version imported through the API.
    workload: i64,
}

/// A Mooncake trace of two requests sharing a prefix block.
const WALK_TRACE: &str = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1]}\n\
                          {\"timestamp\": 50, \"input_length\": 700, \"output_length\": 6, \"hash_ids\": [0, 2]}\n";

/// Waits (bounded) until run `id` has ended; its last status.
async fn until_terminal(api: &Api, id: i64) -> Value {
    crate::support::wait::until_some(&format!("run #{id} to end"), Duration::from_secs(90), || async {
        let status = api.ok(&format!("/api/v1/runs/{id}")).await;
        (status["terminal"] == true).then_some(status)
    })
    .await
}

/// Candidates, eval set and profile uploaded, and one run of the right model started, waited for.
async fn seed(api: &Api, mock: &MockServer) -> Seed {
    let a = api
        .send(
            "POST",
            "/api/v1/candidates",
            Some(("application/toml", candidate_toml("right", &mock.base_url(), "right"))),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["items"][0]["outcome"], "created");
    let candidate = a.body["items"][0]["candidate"]["id"].as_i64().unwrap();
    let a = api
        .send("POST", "/api/v1/evalsets", Some(("application/jsonl", evalset_text())))
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let version = a.body["version"]["id"].as_i64().unwrap();
    let evalset = a.body["version"]["evalset_id"].as_i64().unwrap();
    let a = api.post("/api/v1/profiles", &accuracy_profile()).await;
    assert_eq!(a.status, 200, "{a:?}");
    let profile = a.body["profile"]["id"].as_i64().unwrap();
    let a = api
        .post(
            "/api/v1/runs",
            &json!({"evalset": "gate-set", "candidates": ["right"], "settings": quick_settings()}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    let run = a.body["run_id"].as_i64().unwrap();
    assert_eq!(a.location.as_deref(), Some(format!("/api/v1/runs/{run}").as_str()));
    let done = until_terminal(api, run).await;
    assert_eq!(done["status"], "finished", "{done}");
    let a = api
        .post(
            &format!("/api/v1/runs/{run}/scorecards"),
            &json!({"profile": profile, "note": "seeded"}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    let scorecard = a.body["id"].as_i64().unwrap();
    assert_eq!(
        a.location.as_deref(),
        Some(format!("/api/v1/scorecards/{scorecard}").as_str())
    );
    let a = api
        .send(
            "POST",
            "/api/v1/workloads?name=seeded-traffic&format=mooncake",
            Some(("application/jsonl", WALK_TRACE.to_string())),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let workload = a.body["version_id"].as_i64().unwrap();
    Seed {
        candidate,
        evalset,
        version,
        profile,
        run,
        scorecard,
        review_item: 0,
        pair_run: 0,
        workload,
    }
}

/// The document's schema for an answer, with the document's components beside it so `$ref`s
/// resolve, as a JSON Schema 2020-12 validator takes it.
fn schema_for(doc: &Value, path: &str, method: &str, status: u16, media_type: &str) -> Result<Option<Value>, String> {
    let op = &doc["paths"][path][method.to_ascii_lowercase()];
    let response = &op["responses"][status.to_string()];
    if response.is_null() {
        return Err(format!("{method} {path}: status {status} is not documented"));
    }
    let content = &response["content"];
    let Some(entry) = content.get(media_type) else {
        return Err(format!(
            "{method} {path} {status}: content type {media_type:?} is not documented (documented: {content})"
        ));
    };
    Ok(entry.get("schema").map(|s| {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": doc["components"],
            "allOf": [s],
        })
    }))
}

/// Fails unless the answer's status and content type are documented and its body matches.
fn check_documented(doc: &Value, path: &str, method: &str, a: &Answer) {
    match schema_for(doc, path, method, a.status, &a.media_type) {
        Err(e) => panic!("{e}: {a:?}"),
        Ok(None) => {}
        Ok(Some(schema)) => {
            let validator = jsonschema::draft202012::new(&schema)
                .unwrap_or_else(|e| panic!("{method} {path}: the documented schema does not compile: {e}"));
            let errors: Vec<String> = validator
                .iter_errors(&a.body)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{method} {path} {}: the body does not match the documented schema: {errors:?}\n{}",
                a.status,
                a.body
            );
        }
    }
}

/// The path of a documented route with its parameters filled from the seed.
fn fill(path: &str, seed: &Seed) -> String {
    let id = if path.starts_with("/api/v1/candidates") {
        seed.candidate
    } else if path.starts_with("/api/v1/evalsets") {
        seed.evalset
    } else if path.starts_with("/api/v1/evalset-versions") {
        seed.version
    } else if path.starts_with("/api/v1/workload-versions") {
        seed.workload
    } else if path.starts_with("/api/v1/profiles") {
        seed.profile
    } else if path.starts_with("/api/v1/scorecards") {
        seed.scorecard
    } else if path.starts_with("/api/v1/review/items") {
        seed.review_item
    } else if path.ends_with("/review/preferences") {
        seed.pair_run
    } else {
        seed.run
    };
    let filled = path.replace("{id}", &id.to_string()).replace("{name}", "judge");
    if filled.ends_with("/verdict") || filled.ends_with("/scorecard") {
        format!("{filled}?profile={}", seed.profile)
    } else if filled.ends_with("/archive/compare") {
        format!("{filled}?runs={}", seed.run)
    } else if filled == "/api/v1/workloads" {
        // The import's parameters (a list ignores them).
        format!("{filled}?name=walk&format=mooncake")
    } else if filled.ends_with("/archive/history") {
        format!("{filled}?candidate={}&evalset={}", seed.candidate, seed.evalset)
    } else {
        filled
    }
}

each_backend!(
    every_documented_path_answers_as_documented,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn every_documented_path_answers_as_documented(db: TestStore) {
    let mock = mock().await;
    let app = spawn_app_on(db).await;
    let api = Api::new(&app, "ci", Role::Editor).await;
    let admin = Api::new(&app, "ci-admin", Role::Admin).await;
    let mut seed = seed(&api, &mock).await;
    let review = crate::review::queue_for_walk(&app, seed.run, seed.version, seed.candidate).await;
    seed.review_item = review.item;
    seed.pair_run = review.pair_run;

    let doc = api.ok("/api/v1/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc,
        serde_json::from_str::<Value>(&bakeoff::web::api::openapi_text()).unwrap(),
        "the served document is the generated one"
    );
    let mut answered: BTreeSet<(String, String)> = BTreeSet::new();
    let mut documented: BTreeSet<(String, String)> = BTreeSet::new();
    let mut started_here: Option<i64> = None;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in ["get", "post", "put"] {
            if item.get(method).is_none() {
                continue;
            }
            let method = method.to_ascii_uppercase();
            documented.insert((method.clone(), path.clone()));
            let url = fill(path, &seed);
            let body: Option<(&str, String)> = match (method.as_str(), path.as_str()) {
                ("GET", _) => None,
                ("POST", "/api/v1/candidates") => Some((
                    "application/json",
                    json!({"bakeoff_candidates": 1, "candidate": [{"name": "second", "provider": "openai-chat",
                        "base_url": mock.base_url(), "model": "wrong", "pricing": {"input_per_mtok": 0.1}}]})
                    .to_string(),
                )),
                ("POST", "/api/v1/evalsets") => Some(("application/jsonl", evalset_text())),
                ("POST", "/api/v1/workloads") => Some(("application/jsonl", WALK_TRACE.to_string())),
                ("POST", "/api/v1/profiles") => Some((
                    "application/toml",
                    "bakeoff_profile = 1\nname = \"lenient\"\n[[rule]]\nmetric = \"failure_rate\"\ncomparator = \"<\"\nvalue = 50\n"
                        .to_string(),
                )),
                ("POST", "/api/v1/runs") => Some((
                    "application/json",
                    json!({"evalset_version_id": seed.version, "candidate_ids": [seed.candidate], "settings": quick_settings()})
                        .to_string(),
                )),
                ("POST", p) if p.ends_with("/cancel") => None,
                // No labels: the run the walk starts stays measurable by this server's worker.
                ("PUT", "/api/v1/candidates/{id}/worker-labels") => {
                    Some(("application/json", json!({"labels": []}).to_string()))
                }
                ("POST", "/api/v1/runs/{id}/scorecards") => Some((
                    "application/json",
                    json!({"profile": seed.profile, "note": "from the walk"}).to_string(),
                )),
                ("POST", "/api/v1/review/items/{id}/label") => {
                    Some(("application/json", json!({"verdict": "pass", "note": "from the walk"}).to_string()))
                }
                ("POST", "/api/v1/review/items/{id}/assign") => {
                    Some(("application/json", json!({"assignee": null}).to_string()))
                }
                ("POST", "/api/v1/review/items/{id}/claim" | "/api/v1/review/items/{id}/skip") => None,
                ("POST", "/api/v1/runs/{id}/review/fill") => None,
                ("POST", "/api/v1/runs/{id}/review/preferences") => Some((
                    "application/json",
                    json!({"case_id": review.case_id, "left_candidate": seed.candidate,
                        "right_candidate": review.second_candidate, "choice": "left"})
                    .to_string(),
                )),
                ("POST", "/api/v1/schedules") => Some((
                    "application/toml",
                    "bakeoff_schedules = 1\n[[schedule]]\nname = \"walk\"\nevalset = \"gate-set\"\nversion = \"latest\"\n\
                     candidates = [\"right\"]\ncadence = \"0 6 * * 1-5\"\ntime_zone = \"UTC\"\n"
                        .to_string(),
                )),
                ("POST", "/api/v1/notification-targets") => Some((
                    "application/json",
                    json!({"name": "walk-hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook",
                        "secret": "a-walk-secret-of-24-chars", "profile_id": seed.profile})
                    .to_string(),
                )),
                other => panic!("no request body written for {other:?}: add one here"),
            };
            // Notification targets hold secrets: only an admin sets them.
            let caller = if path == "/api/v1/notification-targets" {
                &admin
            } else {
                &api
            };
            let a = caller.send(&method, &url, body).await;
            assert!(
                (200..300).contains(&a.status),
                "{}: {method} {url} answered {}: {}",
                app.backend,
                a.status,
                a.body
            );
            check_documented(&doc, path, &method, &a);
            if path == "/api/v1/runs" && method == "POST" {
                started_here = a.body["run_id"].as_i64();
            }
            answered.insert((method, path.clone()));
        }
    }
    let missed: Vec<_> = documented.difference(&answered).collect();
    assert!(missed.is_empty(), "documented paths never answered 2xx: {missed:?}");
    assert!(documented.len() >= 24, "{documented:?}");

    // The run the walk started is cancelled through the API and ends as cancelled (or finished,
    // when it was quicker).
    let id = started_here.expect("POST /api/v1/runs answered a run");
    let a = api.send("POST", &format!("/api/v1/runs/{id}/cancel"), None).await;
    assert_eq!(a.status, 200, "{a:?}");
    let end = until_terminal(&api, id).await;
    assert!(
        ["cancelled", "finished"].contains(&end["status"].as_str().unwrap()),
        "{end}"
    );
}

each_backend!(
    create_poll_scorecard_and_verdict_against_the_mock,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn create_poll_scorecard_and_verdict_against_the_mock(db: TestStore) {
    let mock = mock().await;
    let app = spawn_app_on(db).await;
    let api = Api::new(&app, "ci", Role::Editor).await;
    let seed = seed(&api, &mock).await;

    let status = api.ok(&format!("/api/v1/runs/{}", seed.run)).await;
    assert_eq!(status["expected"], 12, "{status}");
    assert_eq!(status["done"], 12, "{status}");
    assert_eq!(status["failed"], 0, "{status}");
    assert_eq!(status["candidate_ids"], json!([seed.candidate]));

    // The scorecard is the page's JSON export, figure for figure.
    let mut card = api
        .ok(&format!("/api/v1/runs/{}/scorecard?profile={}", seed.run, seed.profile))
        .await;
    let page = reqwest::Client::new()
        .get(app.url(&format!(
            "/runs/{}/scorecard/export.json?profile={}",
            seed.run, seed.profile
        )))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let mut exported: Value = page.json().await.unwrap();
    assert_eq!(card["schema"], "bakeoff.scorecard/1");
    card.as_object_mut().unwrap().remove("generated_at");
    exported.as_object_mut().unwrap().remove("generated_at");
    assert_eq!(card, exported, "{}: the API's scorecard is the page's", app.backend);

    // The verdict is the gate's: GO with exit code 0, each rule with its reason.
    let verdict = api
        .ok(&format!("/api/v1/runs/{}/verdict?profile={}", seed.run, seed.profile))
        .await;
    assert_eq!(verdict["format"], "bakeoff.gate/1");
    assert_eq!(verdict["verdict"], "GO", "{verdict}");
    assert_eq!(verdict["exit_code"], 0);
    assert_eq!(verdict["candidates"][0]["rules"][0]["state"], "pass", "{verdict}");

    // Records page by page with the cursor: every record once, in storage order.
    let mut seen = Vec::new();
    let mut after = 0;
    for _ in 0..100 {
        let page = api
            .ok(&format!("/api/v1/runs/{}/records?limit=5&after={after}", seed.run))
            .await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 5);
        for item in items {
            seen.push(item["id"].as_i64().unwrap());
            assert_eq!(item["record"]["run_id"], seed.run);
        }
        match page["next_after"].as_i64() {
            Some(next) => after = next,
            None => break,
        }
    }
    let stored = app.store.list_request_records(seed.run).await.unwrap().len();
    assert_eq!(seen.len(), stored, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");

    // The archive finds it by the archive page's filters, with the verdict just recorded.
    let archive = api
        .ok(&format!(
            "/api/v1/archive?profile={}&verdict=GO&status=finished",
            seed.profile
        ))
        .await;
    assert_eq!(archive["total"], 1, "{archive}");
    assert_eq!(archive["items"][0]["id"], seed.run);
    assert_eq!(archive["items"][0]["verdicts"][0]["verdict"], "GO");
    let none = api
        .ok(&format!("/api/v1/archive?profile={}&verdict=NO-GO", seed.profile))
        .await;
    assert_eq!(none["total"], 0, "{none}");

    // Eval set, versions and cases paged.
    let set = api.ok(&format!("/api/v1/evalsets/{}", seed.evalset)).await;
    assert_eq!(set["versions"][0]["id"], seed.version);
    let cases = api
        .ok(&format!(
            "/api/v1/evalset-versions/{}/cases?limit=5&offset=10",
            seed.version
        ))
        .await;
    assert_eq!(
        (cases["total"].clone(), cases["items"].as_array().unwrap().len()),
        (json!(12), 2)
    );
    assert_eq!(cases["items"][0]["id"], "c10");

    // A candidate is shown without any key.
    let c = api.ok(&format!("/api/v1/candidates/{}", seed.candidate)).await;
    assert_eq!(c["has_stored_key"], false);
    assert!(c.get("api_key").is_none(), "{c}");
}

/// POSTs a candidates file (TOML).
async fn import_candidates(api: &Api, toml: String) -> Answer {
    api.send("POST", "/api/v1/candidates", Some(("application/toml", toml)))
        .await
}

each_backend!(only_an_admin_sets_credentials_by_import_and_a_move_drops_them);
async fn only_an_admin_sets_credentials_by_import_and_a_move_drops_them(db: TestStore) {
    let app = spawn_app_on(db).await;
    let admin = Api::new(&app, "root", Role::Admin).await;
    let editor = Api::new(&app, "ed", Role::Editor).await;
    let here = "http://127.0.0.1:9/v1";
    let audited = || async { app.store.count_audit(&Default::default()).await.unwrap() };

    // An editor naming a key variable on a new candidate: 403, nothing stored or audited.
    let before = audited().await;
    let a = import_candidates(
        &editor,
        candidate_toml_with_key_env("keyed", here, "m", "BAKEOFF_KEY_API"),
    )
    .await;
    assert_problem(&a, 403);
    let detail = a.body["detail"].as_str().unwrap();
    assert!(detail.contains("admin") && detail.contains("key variable"), "{a:?}");
    assert!(app.store.list_candidates().await.unwrap().is_empty(), "{}", app.backend);
    assert_eq!(audited().await, before);

    // An admin may; then a key is stored for it (as the browser's form does for an admin).
    let a = import_candidates(
        &admin,
        candidate_toml_with_key_env("keyed", here, "m", "BAKEOFF_KEY_API"),
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        a.body["items"][0]["candidate"]["file"]["api_key_env"],
        "BAKEOFF_KEY_API"
    );
    let id = a.body["items"][0]["candidate"]["id"].as_i64().unwrap();
    let mut keyed = app.store.get_candidate(id).await.unwrap().unwrap().spec;
    keyed.api_key = Some(bakeoff::domain::candidate::Secret::new("sk-stored-0123456789"));
    app.store
        .update_candidate(&crate::support::checked::admin_change(app.store.as_ref(), id, &keyed).await)
        .await
        .unwrap();

    // An editor changing or removing the variable: 403, the candidate as it was.
    let stored = || async { app.store.get_candidate(id).await.unwrap().unwrap().spec };
    for file in [
        candidate_toml_with_key_env("keyed", here, "m", "BAKEOFF_KEY_OTHER"),
        candidate_toml("keyed", here, "m"),
    ] {
        assert_problem(&import_candidates(&editor, file).await, 403);
        assert_eq!(stored().await, keyed, "{}", app.backend);
    }
    // Other fields with the credentials left as they are: the editor may, the key stays.
    let a = import_candidates(
        &editor,
        candidate_toml_with_key_env("keyed", here, "m2", "BAKEOFF_KEY_API"),
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["items"][0]["outcome"], "updated");
    assert!(a.body["items"][0].get("credentials_dropped").is_none(), "{a:?}");
    assert!(stored().await.api_key.is_some());

    // Moving to another server drops the stored key and the variable, and the answer says so.
    let elsewhere = "http://evil.example/v1";
    let a = import_candidates(
        &editor,
        candidate_toml_with_key_env("keyed", elsewhere, "m2", "BAKEOFF_KEY_API"),
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    let item = &a.body["items"][0];
    assert_eq!(item["outcome"], "updated");
    assert_eq!(item["candidate"]["has_stored_key"], false, "{a:?}");
    assert!(item["candidate"]["file"].get("api_key_env").is_none(), "{a:?}");
    let note = item["credentials_dropped"].as_str().unwrap_or_default();
    assert!(
        note.contains("http://evil.example") && note.contains("removed"),
        "{a:?}"
    );
    let moved = stored().await;
    assert_eq!((moved.api_key, moved.api_key_env), (None, None), "{}", app.backend);
    let entries = app.store.list_audit(&Default::default(), 5, 0).await.unwrap();
    assert!(
        entries.iter().any(|e| e.action == "candidate.key_cleared"
            && e.actor.starts_with("ed (token #")
            && e.detail.contains("moved to another server")),
        "{entries:?}"
    );
    assert!(!format!("{entries:?}").contains("sk-stored"));
    // Setting the variable again for the new server is an admin's decision.
    let again = candidate_toml_with_key_env("keyed", elsewhere, "m2", "BAKEOFF_KEY_API");
    assert_problem(&import_candidates(&editor, again.clone()).await, 403);
    let a = import_candidates(&admin, again).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(stored().await.api_key_env.as_deref(), Some("BAKEOFF_KEY_API"));
}

/// A page of the app as the API's caller sees it (pages take the same bearer token).
async fn page_of(app: &TestApp, api: &Api, path: &str) -> Page {
    let r = reqwest::Client::new()
        .get(app.url(path))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let page = Page::parse(status, &r.text().await.unwrap());
    assert_eq!(status, 200, "GET {path}");
    page
}

each_backend!(
    saved_scorecards_compare_and_history_are_the_pages,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn saved_scorecards_compare_and_history_are_the_pages(db: TestStore) {
    let mock = mock().await;
    let app = spawn_app_on(db).await;
    let api = Api::new(&app, "ci", Role::Editor).await;
    let seed = seed(&api, &mock).await;

    // Saved scorecards: listed, and one of them judged as saved, signed by the token's user and
    // the token.
    let list = api.ok("/api/v1/scorecards?limit=10").await;
    assert_eq!(list["total"], 1, "{list}");
    assert_eq!(list["items"][0]["id"], seed.scorecard);
    assert_eq!(list["items"][0]["profile_name"], "accuracy");
    let saved = api.ok(&format!("/api/v1/scorecards/{}", seed.scorecard)).await;
    assert!(
        saved["created_by"]
            .as_str()
            .is_some_and(|by| by.starts_with("ci (token #")),
        "{saved}"
    );
    assert_eq!(saved["note"], "seeded");
    assert_eq!(saved["verdicts"][0]["verdict"], "GO", "{saved}");
    assert_eq!(saved["drifted"], false);
    let mut now = api
        .ok(&format!(
            "/api/v1/runs/{}/scorecard?profile={}&version=1",
            seed.run, seed.profile
        ))
        .await;
    let mut then = saved["scorecard"].clone();
    now.as_object_mut().unwrap().remove("generated_at");
    then.as_object_mut().unwrap().remove("generated_at");
    assert_eq!(
        then, now,
        "{}: the saved scorecard is the run's at that version",
        app.backend
    );
    // A body naming nothing is refused field by field, and nothing is saved.
    for (body, field) in [
        (json!({"profile": 999999}), "profile"),
        (json!({"profile": seed.profile, "version": 7}), "version"),
        (json!({"profile": seed.profile, "incumbent": 999999}), "incumbent"),
        (json!({"profile": seed.profile, "note": "x".repeat(20_000)}), "note"),
    ] {
        let a = api.post(&format!("/api/v1/runs/{}/scorecards", seed.run), &body).await;
        assert_problem(&a, 422);
        assert_eq!(a.body["field_errors"][0]["field"], field, "{a:?}");
    }
    let viewer = Api::new(&app, "reader", Role::Viewer).await;
    let a = viewer
        .post(
            &format!("/api/v1/runs/{}/scorecards", seed.run),
            &json!({"profile": seed.profile}),
        )
        .await;
    assert_problem(&a, 403);
    assert_eq!(app.store.count_scorecards().await.unwrap(), 1, "nothing more was saved");

    // A second run, of the wrong model, compared with the first: the API's figures are the
    // compare page's, text, mark and whether compared, cell by cell.
    let a = api
        .send(
            "POST",
            "/api/v1/candidates",
            Some(("application/toml", candidate_toml("wrong", &mock.base_url(), "wrong"))),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let a = api
        .post(
            "/api/v1/runs",
            &json!({"evalset": "gate-set", "candidates": ["wrong"], "settings": quick_settings()}),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    let other = a.body["run_id"].as_i64().unwrap();
    assert_eq!(until_terminal(&api, other).await["status"], "finished");
    let runs = format!("runs={},{other}", seed.run);
    let api_compare = api
        .ok(&format!("/api/v1/archive/compare?{runs}&limit=5&offset=10"))
        .await;
    let page = page_of(&app, &api, &format!("/archive/compare?{runs}")).await;
    let figures = api_compare["figures"].as_array().unwrap();
    assert!(figures.len() >= 4, "{api_compare}");
    for figure in figures {
        let label = figure["label"].as_str().unwrap();
        let cells = page.select(&format!("tr[data-figure=\"{label}\"] td"));
        let api_cells = figure["cells"].as_array().unwrap();
        assert_eq!(cells.len(), api_cells.len(), "{label}");
        for (td, cell) in cells.iter().zip(api_cells) {
            let shown = td.text().next().unwrap_or_default().trim();
            assert_eq!(shown, cell["text"].as_str().unwrap(), "{}: {label}", app.backend);
            let attr = |name: &str| td.value().attr(name).unwrap_or_default().to_string();
            assert_eq!(attr("data-mark"), cell["mark"].as_str().unwrap(), "{label}");
            assert_eq!(attr("data-compared"), cell["compared"].as_str().unwrap(), "{label}");
        }
    }
    let accuracy = figures.iter().find(|f| f["label"] == "accuracy").unwrap();
    assert_eq!(accuracy["cells"][0]["value"], 1.0, "{accuracy}");
    assert_eq!(accuracy["cells"][1]["value"], 0.0, "{accuracy}");
    assert_eq!(accuracy["cells"][1]["mark"], "worse", "{accuracy}");
    assert_eq!(
        page.texts(".not-compared li").len(),
        api_compare["not_compared"].as_array().unwrap().len()
    );
    assert_eq!(
        page.select("tr.condition").len() + page.select(".same-conditions [data-condition]").len(),
        api_compare["conditions"].as_array().unwrap().len()
    );
    assert_eq!(api_compare["entries"][1]["regressed"], 12, "{api_compare}");
    // The cases paged: 12 in all, the page of 5 from the 11th holds 2.
    assert_eq!(api_compare["cases_page"]["total"], 12);
    let cases = api_compare["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "{api_compare}");
    assert_eq!(cases[0]["case_id"], "c10");
    assert_eq!(cases[0]["cells"][1]["mark"], "regressed");
    // A compare naming no run is a problem that says what to give.
    let a = api.get("/api/v1/archive/compare").await;
    assert_problem(&a, 400);
    assert!(a.body["detail"].as_str().unwrap().contains("runs"), "{a:?}");

    // History: the candidate's runs on the eval set, as the history page lists them.
    let history = api
        .ok(&format!(
            "/api/v1/archive/history?candidate={}&evalset={}",
            seed.candidate, seed.evalset
        ))
        .await;
    let points = history["runs"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{history}");
    assert_eq!(points[0]["run_id"], seed.run);
    assert_eq!(points[0]["figures"]["accuracy"], 1.0);
    let page = page_of(
        &app,
        &api,
        &format!("/archive/history?candidate={}&evalset={}", seed.candidate, seed.evalset),
    )
    .await;
    let row = page.texts(&format!("tr[data-run=\"{}\"] td", seed.run));
    assert_eq!(row[5], points[0]["accuracy"].as_str().unwrap(), "{row:?}");
    assert_eq!(row[7], points[0]["ttft"].as_str().unwrap(), "{row:?}");
    assert_problem(&api.get("/api/v1/archive/history?candidate=1").await, 400);
}

/// A problem detail: its media type and members.
fn assert_problem(a: &Answer, status: u16) {
    assert_eq!(a.status, status, "{a:?}");
    assert_eq!(a.media_type, "application/problem+json", "{a:?}");
    assert_eq!(a.body["status"], status, "{a:?}");
    for member in ["type", "title", "detail"] {
        assert!(
            a.body[member].as_str().is_some_and(|s| !s.is_empty()),
            "{member} in {a:?}"
        );
    }
    assert!(a.body["type"].as_str().unwrap().starts_with("urn:bakeoff:problem:"));
}

each_backend!(errors_are_problem_details_and_roles_are_enforced);
async fn errors_are_problem_details_and_roles_are_enforced(db: TestStore) {
    let app = spawn_app_on(db).await;
    let editor = Api::new(&app, "editor", Role::Editor).await;
    let viewer = Api::new(&app, "viewer", Role::Viewer).await;

    // 400: a parameter out of range names itself.
    let a = viewer.get("/api/v1/runs?limit=0").await;
    assert_problem(&a, 400);
    assert_eq!(a.body["field_errors"][0]["field"], "limit", "{a:?}");
    // 400: a body that is not JSON says where.
    let a = editor
        .send(
            "POST",
            "/api/v1/runs",
            Some(("application/json", "{\"evalset\": ".into())),
        )
        .await;
    assert_problem(&a, 400);
    assert!(a.body["detail"].as_str().unwrap().contains("line 1"), "{a:?}");

    // 401: no token, and a token that is not one (accounts mode).
    let anonymous = send(reqwest::Client::new().get(app.url("/api/v1/candidates")), None).await;
    assert_problem(&anonymous, 401);
    let bad = Api::with_token(&app, "not-a-token").get("/api/v1/candidates").await;
    assert_problem(&bad, 401);

    // 404: an id that names nothing, and an address that is no route.
    assert_problem(&viewer.get("/api/v1/runs/999999").await, 404);
    assert_problem(&viewer.get("/api/v1/candidates/abc").await, 404);
    assert_problem(&viewer.get("/api/v1/nothing-here").await, 404);

    // 422: a candidates file with a wrong field is refused whole, naming the field and line.
    let a = editor
        .send(
            "POST",
            "/api/v1/candidates",
            Some((
                "application/toml",
                "bakeoff_candidates = 1\n[[candidate]]\nname = \"ok\"\nprovider = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\n[[candidate]]\nname = \"bad\"\nprovider = \"grpc\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n".into(),
            )),
        )
        .await;
    assert_problem(&a, 422);
    assert_eq!(a.body["field_errors"][0]["field"], "candidate[1].provider", "{a:?}");
    assert_eq!(a.body["field_errors"][0]["line"], 10, "{a:?}");
    // A key is never read from a request.
    let a = editor
        .post(
            "/api/v1/candidates",
            &json!({"bakeoff_candidates": 1, "candidate": [{"name": "k", "provider": "openai-chat",
                "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": "sk-live-123456789"}]}),
        )
        .await;
    assert_problem(&a, 422);
    assert_eq!(a.body["field_errors"][0]["field"], "candidate[0].api_key", "{a:?}");
    assert!(!a.body.to_string().contains("sk-live"), "{a:?}");
    assert_eq!(app.store.list_candidates().await.unwrap().len(), 0, "nothing stored");
    // A run with unknown names and a bad setting: every field named at once.
    let a = editor
        .post(
            "/api/v1/runs",
            &json!({"evalset": "no-such-set", "candidates": ["nobody"], "settings": {"concurrency": 0}}),
        )
        .await;
    assert_problem(&a, 422);
    let fields: Vec<&str> = a.body["field_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"evalset") && fields.contains(&"candidates"), "{a:?}");
    let a = editor
        .post(
            "/api/v1/runs",
            &json!({"evalset_version_id": 1, "settings": {"concurrency": 0}}),
        )
        .await;
    assert_problem(&a, 422);
    assert!(
        a.body["field_errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["field"].as_str().unwrap().starts_with("settings.")),
        "{a:?}"
    );

    // 403: a viewer's token reads but cannot create or cancel.
    let version = app.create_evalset().await;
    let candidate = app.create_candidate("target", "http://127.0.0.1:1/v1").await;
    let run = app.finished_run("judged", None).await;
    assert_eq!(viewer.get("/api/v1/runs").await.status, 200);
    let a = viewer
        .post(
            "/api/v1/runs",
            &json!({"evalset_version_id": version, "candidate_ids": [candidate]}),
        )
        .await;
    assert_problem(&a, 403);
    assert!(a.body["detail"].as_str().unwrap().contains("editor"), "{a:?}");
    assert_problem(
        &viewer.send("POST", &format!("/api/v1/runs/{run}/cancel"), None).await,
        403,
    );
    assert_problem(&viewer.post("/api/v1/profiles", &accuracy_profile()).await, 403);
    assert_eq!(app.store.count_runs().await.unwrap(), 1, "the viewer started nothing");
}

each_backend!(a_session_needs_the_csrf_header_on_changes_and_a_bearer_does_not);
async fn a_session_needs_the_csrf_header_on_changes_and_a_bearer_does_not(db: TestStore) {
    let app = spawn_app_on(db).await;
    app.add_user("root", Role::Admin).await;
    let password = app.add_user("ada", Role::Editor).await;
    let (with_csrf, secret) = app.login("ada", &password).await;
    let profile = accuracy_profile().to_string();
    let post = |client: &reqwest::Client| {
        client
            .post(app.url("/api/v1/profiles"))
            .header("content-type", "application/json")
            .body(profile.clone())
    };
    // The session cookie alone, as a page on another site could make a browser send it.
    let cookie_only = reqwest::Client::new()
        .post(app.url("/api/v1/profiles"))
        .header("cookie", format!("bakeoff_session={secret}"))
        .header("content-type", "application/json")
        .body(profile.clone());
    let a = send(cookie_only, None).await;
    assert_problem(&a, 403);
    assert!(app.store.list_threshold_profiles().await.unwrap().is_empty());
    // The logged-in browser's request, with its X-CSRF-Token header.
    let a = send(post(&with_csrf), None).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["outcome"], "created");
    // A bearer token needs no CSRF token.
    let api = Api::new(&app, "ci", Role::Editor).await;
    let a = api
        .post(
            "/api/v1/profiles",
            &json!({"bakeoff_profile": 1, "name": "accuracy", "description": "changed", "rule": [{"metric": "accuracy", "comparator": ">=", "value": 60}]}),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["outcome"], "new version");
    assert_eq!(a.body["profile"]["version"], 2);
    // Both changes are audited under their users' names, the token's naming the token.
    let audit = app.store.list_audit(&Default::default(), 10, 0).await.unwrap();
    let actors: Vec<&str> = audit.iter().map(|e| e.actor.as_str()).collect();
    assert!(
        actors.contains(&"ada") && actors.iter().any(|a| a.starts_with("ci (token #")),
        "{actors:?}"
    );
}

#[tokio::test]
async fn single_user_mode_answers_reads_without_a_token() {
    let app = crate::support::app::spawn_app().await;
    let a = send(reqwest::Client::new().get(app.url("/api/v1/candidates")), None).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["items"], json!([]));
    // Changes need the browser's CSRF token, as forms on the pages do.
    let a = send(
        reqwest::Client::new()
            .post(app.url("/api/v1/profiles"))
            .header("content-type", "application/json")
            .body(accuracy_profile().to_string()),
        None,
    )
    .await;
    assert_problem(&a, 403);
    let a = send(
        app.client
            .post(app.url("/api/v1/profiles"))
            .header("content-type", "application/json")
            .body(accuracy_profile().to_string()),
        None,
    )
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["profile"]["name"], "accuracy");
}
