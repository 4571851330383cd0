//! Eval sets as editable, versioned data: import in the browser (upload or paste, preview,
//! save), precise errors that store nothing, case-by-case edits as new versions, the diff page,
//! the other formats, download round-trips, the CLI, the JSON Schema, and the shipped sets run
//! against the built-in mock.
use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::metrics::summarise_candidate;
use bakeoff::domain::run::{NewRun, RunConfig, RunStatus};
use bakeoff::engine::run::Runner;
use bakeoff::mock::{MockConfig, ModelProfile, demo_profiles};
use serde_json::Value;
use tower::ServiceExt;

use crate::support::app::{Page, TINY_EVALSET, TestApp, spawn_app};
use crate::support::db::{sqlite_store, sqlite_url};

// ------------------------------------------------------------------------------- helpers

/// One part of a multipart body: (field name, optional file name, content).
type Part<'a> = (&'a str, Option<&'a str>, &'a [u8]);

const BOUNDARY: &str = "----bakeoff-test-boundary-7d1c";

fn multipart_body(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, file_name, content) in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        match file_name {
            Some(f) => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            ),
            None => {
                body.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes())
            }
        }
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

async fn post_multipart(app: &TestApp, path: &str, parts: &[Part<'_>]) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .body(multipart_body(parts))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

async fn page_of(response: reqwest::Response) -> Page {
    let status = response.status().as_u16();
    let body = response.text().await.expect("response body");
    Page::parse(status, &body)
}

/// Uploads a file for preview.
async fn upload(app: &TestApp, file_name: &str, content: &str, options: &[(&str, &str)]) -> Page {
    let mut parts: Vec<Part<'_>> = vec![("file", Some(file_name), content.as_bytes())];
    parts.extend(options.iter().map(|(k, v)| (*k, None, v.as_bytes())));
    page_of(post_multipart(app, "/evalsets/import", &parts).await).await
}

/// Saves a preview page's content; returns the new version's id (from the redirect).
async fn save_preview(app: &TestApp, preview: &Page) -> i64 {
    assert_eq!(preview.status, 200, "{}", preview.text("main"));
    let content = preview
        .select("textarea[name=content]")
        .first()
        .map(|e| e.text().collect::<String>())
        .expect("the preview carries the file to save");
    let r = post_multipart(app, "/evalsets/import/save", &[("content", None, content.as_bytes())]).await;
    assert_eq!(r.status(), 303);
    version_from_redirect(&r)
}

fn version_from_redirect(r: &reqwest::Response) -> i64 {
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let id = location
        .strip_prefix("/evalsets/")
        .and_then(|rest| rest.split('?').next())
        .unwrap_or_else(|| panic!("unexpected redirect {location}"));
    id.parse().unwrap_or_else(|_| panic!("unexpected redirect {location}"))
}

async fn version_count(app: &TestApp) -> usize {
    app.store
        .list_evalsets()
        .await
        .unwrap()
        .iter()
        .map(|s| s.version_count)
        .sum()
}

async fn file_of(app: &TestApp, version_id: i64) -> EvalSetFile {
    app.store
        .get_evalset_version(version_id)
        .await
        .unwrap()
        .expect("version exists")
        .file
}

// ------------------------------------------------------------------------------- import in the browser

#[tokio::test]
async fn an_upload_is_previewed_then_saved_and_listed_as_a_new_set_then_a_new_version() {
    let app = spawn_app().await;
    assert!(
        app.get_html("/evalsets/import")
            .await
            .count("input[type=file][name=file]")
            == 1
    );

    let preview = upload(&app, "tiny.jsonl", TINY_EVALSET, &[("format", "auto")]).await;
    assert_eq!(preview.status, 200);
    assert_eq!(preview.text("h1"), "Preview: tiny");
    assert_eq!(preview.text(".case-count"), "3");
    assert_eq!(preview.text(".standing-kind"), "New eval set.");
    assert_eq!(preview.count("table.cases tbody tr"), 3);
    assert_eq!(version_count(&app).await, 0, "a preview stores nothing");

    let v1 = save_preview(&app, &preview).await;
    let list = app.get_html("/evalsets").await;
    assert!(list.texts("table.list tbody th a").contains(&"tiny".to_string()));
    let detail = app.get_html(&format!("/evalsets/{v1}?notice=saved")).await;
    assert_eq!(detail.count(".saved-notice"), 1);

    // The same content again is recognised as identical; nothing to save.
    let again = upload(&app, "tiny.jsonl", TINY_EVALSET, &[]).await;
    assert_eq!(again.text(".standing-kind"), "Identical");
    assert_eq!(again.count("button[type=submit]"), 0);

    // One more case: a new version of the same set, with the change counted.
    let more = format!(
        "{TINY_EVALSET}{}\n",
        r#"{"id":"c4","vars":{"text":"fine"},"expected":"positive"}"#
    );
    let preview = upload(&app, "tiny.jsonl", &more, &[]).await;
    assert_eq!(preview.text(".standing-kind"), "New version");
    assert!(
        preview.text(".standing").contains("1 case added, 0 removed, 0 changed"),
        "{}",
        preview.text(".standing")
    );
    let v2 = save_preview(&app, &preview).await;
    assert_ne!(v1, v2);
    let sets = app.store.list_evalsets().await.unwrap();
    assert_eq!((sets.len(), sets[0].version_count, sets[0].case_count), (1, 2, 4));
}

#[tokio::test]
async fn a_malformed_upload_names_its_first_bad_line_and_field_and_stores_nothing() {
    let app = spawn_app().await;
    app.create_evalset().await;
    let before = version_count(&app).await;

    let bad = TINY_EVALSET.replace(r#"{"id":"c2","#, r#"{"id":"c2","colour":"red","#);
    let page = upload(&app, "bad.jsonl", &bad, &[]).await;
    assert_eq!(page.status, 422);
    assert_eq!(page.text(".problem-source"), "bad.jsonl");
    assert_eq!(page.text(".problem-line"), "3");
    assert_eq!(page.text(".problem-field"), "colour");
    assert!(page.text(".import-problem").contains("Nothing was stored"));

    // A later bad line is still found even when the first cases are fine, and the whole file is refused.
    let missing_var = format!("{TINY_EVALSET}{}\n", r#"{"id":"c4","vars":{"txt":"typo"}}"#);
    let page = upload(&app, "tiny.jsonl", &missing_var, &[]).await;
    assert_eq!(
        (page.text(".problem-line"), page.text(".problem-field")),
        ("5".into(), "vars.text".into())
    );

    // Not UTF-8, and nothing at all.
    let page =
        page_of(post_multipart(&app, "/evalsets/import", &[("file", Some("x.jsonl"), b"\xff\xfe{")]).await).await;
    assert!(
        page.text(".problem-message").contains("not UTF-8"),
        "{}",
        page.text("main")
    );
    let page = page_of(post_multipart(&app, "/evalsets/import", &[("text", None, b"  ")]).await).await;
    assert_eq!(page.status, 422);
    assert!(page.text(".problem-message").contains("Choose a file"));

    // A save of hand-made content goes through the same parser.
    let r = post_multipart(&app, "/evalsets/import/save", &[("content", None, bad.as_bytes())]).await;
    assert_eq!(r.status(), 422);

    assert_eq!(version_count(&app).await, before, "no version was stored");
}

#[tokio::test]
async fn an_upload_lists_every_problem_with_its_place_and_empty_files_say_so() {
    let app = spawn_app().await;
    let mut bad = TINY_EVALSET
        .replace(r#"{"id":"c2","#, r#"{"id":{"n":2},"#)
        .replace(r#""expected":"neutral""#, r#""expected":"neutral","weight":-1"#);
    bad.push_str("{\"id\":\"c9\", \"vars\": {\"text\": \"<b>x</b>\"\n");
    for i in 0..60 {
        bad.push_str(&format!("{{\"id\":\"m{i}\",\"vars\":{{}}}}\n"));
    }
    let page = upload(&app, "cases.jsonl", &bad, &[]).await;
    assert_eq!(page.status, 422);
    let rows = page.texts(".problem-list tbody tr");
    assert_eq!(
        rows.len(),
        bakeoff::domain::evalset::MAX_LISTED_PROBLEMS,
        "{}",
        page.text("main")
    );
    let cells = |i: usize| {
        (
            page.texts(".problem-line")[i].clone(),
            page.texts(".problem-field")[i].clone(),
            page.texts(".problem-message")[i].clone(),
        )
    };
    assert_eq!(
        cells(0),
        (
            "3".into(),
            "id".into(),
            "must be a string or number, got an object".into()
        )
    );
    assert_eq!(cells(1).0, "4");
    assert_eq!(
        (cells(1).1.as_str(), cells(1).2.as_str()),
        ("weight", "must be a positive number")
    );
    let (place, field, message) = cells(2);
    assert!(place.starts_with("5, column "), "{place}");
    assert_eq!(
        (field.as_str(), message.as_str()),
        ("—", "not valid JSON: EOF while parsing an object")
    );
    // 3 + 60 problems: 50 listed, the rest counted.
    assert_eq!(page.text(".problem-unlisted"), "and 13 more problems.");
    assert!(page.text(".import-problem").contains("63 problems found"));
    assert_eq!(version_count(&app).await, 0);

    // An empty or blank file says so, whatever its extension: not a CSV problem.
    for name in ["empty.jsonl", "empty.csv"] {
        let page = page_of(post_multipart(&app, "/evalsets/import", &[("file", Some(name), b"\n  \n")]).await).await;
        assert_eq!(page.status, 422);
        assert_eq!(
            page.text(".problem-message"),
            bakeoff::domain::evalset::EMPTY_FILE,
            "{}",
            page.text("main")
        );
    }

    // An unclosed CSV quote is told at the line where it opens.
    let csv = "input,expected\na,b\nc,d\n\"never closed,e\nf,g\n";
    let page = upload(&app, "q.csv", csv, &[("task", "classification")]).await;
    assert_eq!(page.status, 422);
    assert_eq!(page.texts(".problem-line"), ["4"]);
    assert!(page.text(".problem-message").contains("never closed"));
}

#[tokio::test]
async fn an_upload_over_the_limit_gets_a_clear_413_and_other_forms_keep_theirs() {
    let app = spawn_app().await;
    let huge = vec![b'x'; bakeoff::domain::evalset::MAX_FILE_BYTES + 512 * 1024];
    let body = multipart_body(&[("file", Some("huge.jsonl"), &huge)]);
    let [(_, cookie), (_, token)] = app.browser_headers();
    let response = app
        .router()
        .oneshot(
            Request::post("/evalsets/import")
                .header("cookie", &cookie)
                .header("x-csrf-token", &token)
                .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let page = Page::parse(413, &String::from_utf8_lossy(&bytes));
    assert!(
        page.text(".problem-message").contains("larger than 20 MiB"),
        "{}",
        page.text("main")
    );
    assert_eq!(version_count(&app).await, 0);

    // A 2 MiB upload (over the global 1 MiB form limit) is fine on the import route.
    let mut big = String::from(TINY_EVALSET);
    let filler = "x".repeat(1000);
    for i in 0..2100 {
        big.push_str(&format!(
            "{{\"id\":\"big{i}\",\"vars\":{{\"text\":\"{filler}\"}},\"expected\":\"neutral\"}}\n"
        ));
    }
    assert!(big.len() > 2 * 1024 * 1024);
    let preview = upload(&app, "big.jsonl", &big, &[]).await;
    assert_eq!(preview.status, 200, "{}", preview.text("main"));
    assert_eq!(preview.text(".case-count"), "2103");
}

#[tokio::test]
async fn pasted_csv_openai_and_promptfoo_files_are_imported_through_the_browser() {
    let app = spawn_app().await;

    let csv = "id,input,expected,tags\nq1,\"Is 7 prime?\",yes,maths\nq2,\"Is 9 prime?\",no,maths;easy\n";
    let preview = page_of(
        post_multipart(
            &app,
            "/evalsets/import",
            &[
                ("text", None, csv.as_bytes()),
                ("format", None, b"csv"),
                ("name", None, b"primes"),
                ("task", None, b"classification"),
                ("prompt", None, b"Answer yes or no: {{input}}"),
            ],
        )
        .await,
    )
    .await;
    assert_eq!(preview.status, 200, "{}", preview.text("main"));
    let id = save_preview(&app, &preview).await;
    let file = file_of(&app, id).await;
    assert_eq!(file.header.name, "primes");
    assert_eq!(
        file.messages_for(&file.cases[1])[0].content,
        "Answer yes or no: Is 9 prime?"
    );
    assert_eq!(file.cases[1].tags, ["maths", "easy"]);

    // Without a task, a CSV is refused with the reason.
    let page =
        page_of(post_multipart(&app, "/evalsets/import", &[("file", Some("p.csv"), csv.as_bytes())]).await).await;
    assert_eq!((page.status, page.text(".problem-field")), (422, "task".to_string()));

    let openai = r#"{"input": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital of France?"}], "ideal": "Paris"}
{"input": "2+2=", "ideal": ["4", "four"]}
"#;
    let preview = upload(&app, "capitals.jsonl", openai, &[("task", "generation")]).await;
    assert_eq!(preview.status, 200, "{}", preview.text("main"));
    assert!(preview.text("main").contains("OpenAI evals"));
    let file = file_of(&app, save_preview(&app, &preview).await).await;
    assert_eq!((file.header.name.as_str(), file.cases.len()), ("capitals", 2));

    let yaml = "- vars: {question: \"1+1?\"}\n  assert: [{type: equals, value: \"2\"}]\n- vars: {question: \"Say hi\"}\n  assert: [{type: icontains, value: hi}]\n";
    let preview = upload(&app, "tests.yaml", yaml, &[("task", "generation"), ("name", "smoke")]).await;
    assert_eq!(preview.status, 200, "{}", preview.text("main"));
    let file = file_of(&app, save_preview(&app, &preview).await).await;
    assert_eq!(file.header.prompt.as_deref(), Some("{{question}}"));
    assert_eq!(file.cases[1].graders[0].name(), "contains");

    let unknown = "- vars: {q: a}\n  assert: [{type: javascript, value: \"output.length > 1\"}]\n";
    let page = upload(&app, "t.yaml", unknown, &[("task", "generation")]).await;
    assert_eq!(page.status, 422);
    assert!(
        page.text(".problem-message").contains("`javascript`"),
        "{}",
        page.text("main")
    );
    assert_eq!(app.store.list_evalsets().await.unwrap().len(), 3);
}

// ------------------------------------------------------------------------------- edits and diffs

#[tokio::test]
async fn editing_a_case_makes_a_new_version_leaves_the_old_one_and_the_diff_shows_it() {
    let app = spawn_app().await;
    let v1 = app.create_evalset().await;
    let original = file_of(&app, v1).await;

    let form = app.get_html(&format!("/evalsets/{v1}/cases/2/edit")).await;
    assert_eq!(form.status, 200);
    assert_eq!(form.attr("input[name=id]", "value").as_deref(), Some("c2"));
    let vars = form.text("textarea[name=vars]");
    assert!(vars.contains("awful"), "{vars}");

    let r = app
        .post_form(
            &format!("/evalsets/{v1}/cases/2/edit"),
            &[
                ("id", "c2"),
                ("vars", r#"{"text": "truly awful"}"#),
                ("messages", ""),
                ("expected_kind", "text"),
                ("expected", "very negative"),
                ("graders", ""),
                ("tags", "en, edited"),
                ("weight", "2"),
            ],
        )
        .await;
    assert_eq!(r.status(), 303);
    let v2 = version_from_redirect(&r);
    assert_ne!(v1, v2);
    assert_eq!(file_of(&app, v1).await, original, "the edited version is unchanged");
    let edited = file_of(&app, v2).await;
    assert_eq!(edited.cases[1].expected_text().as_deref(), Some("very negative"));
    assert_eq!(edited.cases[1].tags, ["en", "edited"]);
    assert_eq!(edited.cases[1].weight, Some(2.0));

    let detail = app.get_html(&format!("/evalsets/{v2}")).await;
    let compare = detail.attr("a.compare", "href").expect("a compare link");
    assert_eq!(compare, format!("/evalsets/{v1}/diff/{v2}"));
    let diff = app.get_html(&compare).await;
    assert_eq!(diff.status, 200);
    assert!(
        diff.text(".diff-summary")
            .starts_with("0 cases added, 0 removed, 1 changed, 2 unchanged")
    );
    let rows: Vec<String> = diff.texts(".changed-case td.part");
    assert_eq!(rows, ["input", "expected", "tags", "weight"]);
    assert!(diff.text(".diff-changed").contains("truly awful"));
    // Changed lines are marked, unchanged ones are not: the expected value's one line.
    assert!(diff.texts(".diff-changed del").contains(&"negative".to_string()));
    assert!(diff.texts(".diff-changed ins").contains(&"very negative".to_string()));

    // Saving the form unchanged stores nothing and says so.
    let unchanged_form = app.get_html(&format!("/evalsets/{v2}/cases/2/edit")).await;
    let field = |name: &str| unchanged_form.text(&format!("textarea[name={name}]"));
    let (vars, expected) = (field("vars"), field("expected"));
    let r = app
        .post_form(
            &format!("/evalsets/{v2}/cases/2/edit"),
            &[
                ("id", "c2"),
                ("vars", &vars),
                ("expected_kind", "text"),
                ("expected", &expected),
                ("tags", "en, edited"),
                ("weight", "2"),
            ],
        )
        .await;
    assert_eq!(
        r.headers()["location"],
        format!("/evalsets/{v2}?notice=unchanged").as_str()
    );

    // Add a case, then delete one: each is a new version.
    let r = app
        .post_form(
            &format!("/evalsets/{v2}/cases/new"),
            &[
                ("id", "c9"),
                ("vars", r#"{"text": "so-so"}"#),
                ("expected_kind", "text"),
                ("expected", "neutral"),
            ],
        )
        .await;
    assert_eq!(r.status(), 303);
    let v3 = version_from_redirect(&r);
    assert_eq!(file_of(&app, v3).await.cases.len(), 4);
    let r = app.post_form(&format!("/evalsets/{v3}/cases/1/delete"), &[]).await;
    assert_eq!(r.status(), 303);
    let v4 = version_from_redirect(&r);
    let ids: Vec<String> = file_of(&app, v4).await.cases.into_iter().map(|c| c.id).collect();
    assert_eq!(ids, ["c2", "c3", "c9"]);
    let diff = app.get_html(&format!("/evalsets/{v2}/diff/{v4}")).await;
    assert_eq!(diff.texts(".diff-added li code"), ["c9"]);
    assert_eq!(diff.text(".added-input"), "user: Label: so-so");
    assert_eq!(diff.text(".added-expected"), "neutral");
    assert_eq!(diff.texts(".diff-removed li code"), ["c1"]);
    assert_eq!(app.store.list_evalsets().await.unwrap()[0].version_count, 4);
}

#[tokio::test]
async fn a_bad_edit_names_the_field_and_stores_nothing() {
    let app = spawn_app().await;
    let v1 = app.create_evalset().await;
    let before = version_count(&app).await;
    let path = format!("/evalsets/{v1}/cases/1/edit");

    let page = app
        .post_form_html(
            &path,
            &[
                ("id", "c1"),
                ("vars", "{not json"),
                ("expected_kind", "text"),
                ("expected", "positive"),
            ],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(page.text("#f-vars-error").contains("is not valid JSON"));
    assert_eq!(page.text("textarea[name=vars]"), "{not json", "the typed value is kept");

    // Valid JSON, but the prompt template's variable is gone: the whole-file rule, on the field.
    let page = app
        .post_form_html(
            &path,
            &[("id", "c1"), ("vars", r#"{"other": 1}"#), ("expected_kind", "none")],
        )
        .await;
    assert_eq!(page.status, 422);
    assert!(
        page.text("#f-vars-error").contains("vars.text"),
        "{}",
        page.text("main")
    );

    // Another case's id.
    let page = app
        .post_form_html(
            &path,
            &[("id", "c3"), ("vars", r#"{"text": "x"}"#), ("expected_kind", "none")],
        )
        .await;
    assert!(page.text("#f-id-error").contains("duplicate"), "{}", page.text("main"));

    // A grader with an out-of-range option.
    let page = app
        .post_form_html(
            &path,
            &[
                ("id", "c1"),
                ("vars", r#"{"text": "x"}"#),
                ("expected_kind", "none"),
                ("graders", r#"[{"kind": "rouge-l", "min": 3}]"#),
            ],
        )
        .await;
    assert!(page.text("#f-graders-error").contains("min"), "{}", page.text("main"));

    assert_eq!(app.get(&format!("/evalsets/{v1}/cases/9/edit")).await.status(), 404);
    assert_eq!(app.get(&format!("/evalsets/{v1}/cases/0/edit")).await.status(), 404);
    assert_eq!(version_count(&app).await, before);

    // The only case of a set cannot be deleted.
    let single = EvalSetFile::parse(
        "one.jsonl",
        "{\"bakeoff_evalset\":1,\"name\":\"one\",\"task\":\"generation\",\"prompt\":\"{{q}}\"}\n{\"id\":\"a\",\"vars\":{\"q\":\"hi\"}}\n",
    )
    .unwrap();
    let one = app.store.save_evalset_version(&single).await.unwrap();
    assert_eq!(
        app.post_form(&format!("/evalsets/{one}/cases/1/delete"), &[])
            .await
            .status(),
        400
    );
}

// ------------------------------------------------------------------------------- download, schema

#[tokio::test]
async fn a_download_round_trips_to_the_same_version() {
    let app = spawn_app().await;
    // Key order and blank lines differ from the normalised form.
    let messy = TINY_EVALSET.replace(
        r#"{"id":"c2","vars":{"text":"awful"},"expected":"negative"}"#,
        "\n{\"expected\":\"negative\",\"vars\":{\"text\":\"awful\"},\"id\":\"c2\"}\n",
    );
    let preview = upload(&app, "tiny.jsonl", &messy, &[]).await;
    let id = save_preview(&app, &preview).await;
    let stored = app.store.get_evalset_version(id).await.unwrap().unwrap();
    let body = app.get(&format!("/evalsets/{id}/download")).await.text().await.unwrap();
    assert_eq!(body, stored.file.normalised());
    assert_eq!(
        EvalSetFile::parse("d.jsonl", &body).unwrap().content_hash(),
        stored.content_hash
    );
    assert_eq!(
        stored.content_hash,
        EvalSetFile::parse("m", &messy).unwrap().content_hash()
    );
}

#[tokio::test]
async fn the_json_schema_is_served_and_agrees_with_the_parser() {
    let app = spawn_app().await;
    let r = app.get("/evalsets/schema.json").await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/schema+json")
    );
    let schema: Value = r.json().await.unwrap();
    let header = jsonschema::draft202012::new(&json_pointer(&schema, "/$defs/header")).unwrap();
    let case = jsonschema::draft202012::new(&json_pointer(&schema, "/$defs/case")).unwrap();

    // Every line of every shipped set is valid by the schema.
    for (name, text) in bakeoff::assets::shipped_evalsets() {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let first: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let errors: Vec<String> = header.iter_errors(&first).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name} header: {errors:?}");
        for (i, line) in lines.enumerate() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert!(
                case.is_valid(&v),
                "{name} case {i}: {:?}",
                case.iter_errors(&v).map(|e| e.to_string()).collect::<Vec<_>>()
            );
        }
    }
    // What the parser accepts, the schema accepts: a numeric id is read as its text.
    let numeric = r#"{"id":7,"vars":{"x":"y"}}"#;
    assert!(case.is_valid(&serde_json::from_str::<Value>(numeric).unwrap()));
    let file =
        format!("{{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"generation\",\"prompt\":\"x\"}}\n{numeric}\n");
    assert_eq!(EvalSetFile::parse("s", &file).unwrap().cases[0].id, "7");
    // What the parser refuses, the schema refuses too.
    for bad in [
        r#"{"id":"a","colour":1}"#,
        r#"{"id":"","vars":{}}"#,
        r#"{"id":"a","weight":0}"#,
        r#"{"id":"a","graders":[{"kind":"exact","bogus":true}]}"#,
        r#"{"id":"a","graders":[{"kind":"telepathy"}]}"#,
        r#"{"id":"a","messages":[{"role":"user"}]}"#,
    ] {
        let v: Value = serde_json::from_str(bad).unwrap();
        assert!(!case.is_valid(&v), "schema accepted {bad}");
        let file =
            format!("{{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"generation\",\"prompt\":\"x\"}}\n{bad}\n");
        assert!(EvalSetFile::parse("s", &file).is_err(), "parser accepted {bad}");
    }
    for bad in [
        r#"{"bakeoff_evalset":2,"name":"s","task":"generation"}"#,
        r#"{"bakeoff_evalset":1,"name":"s","task":"poetry"}"#,
        r#"{"bakeoff_evalset":1,"task":"generation"}"#,
    ] {
        assert!(
            !header.is_valid(&serde_json::from_str::<Value>(bad).unwrap()),
            "schema accepted {bad}"
        );
    }
}

fn json_pointer(schema: &Value, pointer: &str) -> Value {
    // A sub-schema keeps its `$ref`s resolvable by carrying the root's `$defs`.
    let mut sub = schema
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} in the schema"))
        .clone();
    sub["$defs"] = schema["$defs"].clone();
    sub
}

// ------------------------------------------------------------------------------- CLI

fn bakeoff(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(args)
        .env("BAKEOFF_LOG", "warn")
        .output()
        .expect("running the bakeoff binary")
}

#[tokio::test]
async fn cli_validate_import_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("tiny.jsonl");
    std::fs::write(&good, TINY_EVALSET).unwrap();
    let out = bakeoff(&["evalset", "validate", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid bakeoff file, 3 cases"));

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        TINY_EVALSET.replace(r#""expected":"neutral""#, r#""expected":"neutral","weight":-1"#),
    )
    .unwrap();
    let out = bakeoff(&["evalset", "validate", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:4: field \"weight\" must be a positive number",
            bad.display()
        )),
        "{stderr}"
    );

    let csv = dir.path().join("qa.csv");
    std::fs::write(&csv, "input,expected\n\"Is 7 prime?\",yes\n\"Is 8 prime?\"\n").unwrap();
    let out = bakeoff(&["evalset", "validate", csv.to_str().unwrap(), "--task", "classification"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("qa.csv:3"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bakeoff(&["evalset", "validate", csv.to_str().unwrap(), "--format", "xml"]);
    assert!(!out.status.success());

    // Every problem in one pass, one line each, in one format; an empty file says so.
    let many = dir.path().join("many.jsonl");
    std::fs::write(
        &many,
        TINY_EVALSET
            .replace(r#"{"id":"c2","#, r#"{"id":[2],"#)
            .replace(r#""expected":"neutral""#, r#""expected":"neutral","weight":0"#),
    )
    .unwrap();
    let out = bakeoff(&["evalset", "validate", many.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in [
        format!(
            "{}:3: field \"id\" must be a string or number, got a list",
            many.display()
        ),
        format!("{}:4: field \"weight\" must be a positive number", many.display()),
    ] {
        assert!(stderr.contains(&line), "{line} in {stderr}");
    }
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "\n\n").unwrap();
    let out = bakeoff(&["evalset", "validate", empty.to_str().unwrap(), "--task", "generation"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(&format!("{}: file is empty", empty.display())),
        "{stderr}"
    );

    for (_, shipped) in bakeoff::assets::shipped_evalsets().iter().take(1) {
        let path = dir.path().join("shipped.jsonl");
        std::fs::write(&path, shipped).unwrap();
        assert!(
            bakeoff(&["evalset", "validate", path.to_str().unwrap()])
                .status
                .success()
        );
    }

    // Import into a fresh SQLite file, then export the stored version: the normalised file.
    let (url, _db) = sqlite_url();
    std::fs::write(&csv, "input,expected\n\"Is 7 prime?\",yes\n\"Is 8 prime?\",no\n").unwrap();
    let out = bakeoff(&[
        "evalset",
        "import",
        csv.to_str().unwrap(),
        "--task",
        "classification",
        "--name",
        "primes",
        "--database-url",
        &url,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(stdout.contains("as csv (new eval set)"), "{stdout}");
    let id: String = stdout
        .split("version id ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .expect("the version id is printed")
        .to_string();
    let exported = dir.path().join("out.jsonl");
    let out = bakeoff(&[
        "evalset",
        "export",
        "--version-id",
        &id,
        "--out",
        exported.to_str().unwrap(),
        "--database-url",
        &url,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&exported).unwrap();
    let file = EvalSetFile::parse("out.jsonl", &text).unwrap();
    assert_eq!(text, file.normalised());
    assert_eq!((file.header.name.as_str(), file.cases.len()), ("primes", 2));

    // Importing the exported file again stores nothing new.
    let out = bakeoff(&["evalset", "import", exported.to_str().unwrap(), "--database-url", &url]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("identical to a stored version"));
    let out = bakeoff(&["evalset", "export", "--version-id", "999", "--database-url", &url]);
    assert!(!out.status.success());
}

// ------------------------------------------------------------------------------- shipped sets

#[test]
fn every_shipped_set_passes_its_expected_answers_and_fails_other_cases_answers() {
    use bakeoff::domain::grading::grade;
    // A tool set is graded by its calls, against the mock's truth in tool_cases.rs.
    for file in bakeoff::app::demo::shipped_evalset_files()
        .expect("the shipped sets parse")
        .into_iter()
        .filter(|f| !is_tool_set(f) && !is_conversation_set(f))
    {
        let (mut wrong, mut wrong_passed) = (0usize, 0usize);
        for case in &file.cases {
            let expected = case.expected.as_ref();
            let passes = |output: &str| file.graders_for(case).iter().all(|g| grade(g, output, expected).passed);
            let right = case.expected_text().expect("every shipped case has an expected value");
            assert!(
                passes(&right),
                "{} {}: its own expected answer fails",
                file.header.name,
                case.id
            );
            // The mock's wrong answers are other cases' expected values: they must rarely pass.
            for other in file
                .cases
                .iter()
                .filter_map(|c| c.expected_text())
                .filter(|o| *o != right)
            {
                wrong += 1;
                wrong_passed += usize::from(passes(&other));
            }
        }
        eprintln!("{}: {wrong_passed} of {wrong} other answers pass", file.header.name);
        // A classification set passes another case's label when it is the same label.
        let bound = if file.header.name.contains("ticket") {
            0
        } else {
            wrong / 20
        };
        assert!(
            wrong_passed <= bound,
            "{}: {wrong_passed} of {wrong} wrong answers pass",
            file.header.name
        );
    }
}

/// A set of conversation cases (docs/evalset-format.md): graded turn by turn, run in
/// conversations.rs.
fn is_conversation_set(file: &bakeoff::domain::evalset::EvalSetFile) -> bool {
    file.cases.iter().any(|c| c.is_conversation())
}

/// A set of tool cases (docs/tool-cases.md): graded by its calls, run in tool_cases.rs.
fn is_tool_set(file: &bakeoff::domain::evalset::EvalSetFile) -> bool {
    file.cases.iter().any(|c| c.is_tool_case())
}

/// A demo profile with its speed raised and its answer behaviour (accuracy, faults) kept: the
/// scores depend on what the mock answers, not how fast.
fn fast(mut p: ModelProfile) -> ModelProfile {
    p.ttft_ms = 2.0;
    p.prefill_ms_per_token = 0.0;
    p.tokens_per_second = 20_000.0;
    p.stall_ms = 5.0;
    p
}

#[tokio::test]
async fn every_shipped_set_parses_is_large_enough_and_separates_the_demo_candidates() {
    let shipped = bakeoff::app::demo::shipped_evalset_files().expect("the shipped sets parse");
    assert!(shipped.len() >= 5, "{} shipped sets", shipped.len());
    for file in &shipped {
        if file.header.name != "support-ticket-triage" && !is_tool_set(file) && !is_conversation_set(file) {
            assert!(
                file.cases.len() >= 60,
                "{} has {} cases",
                file.header.name,
                file.cases.len()
            );
        }
    }

    let (store, _db) = sqlite_store().await;
    let profiles: Vec<ModelProfile> = demo_profiles().into_iter().map(fast).collect();
    let mock = crate::support::runs::start_mock(MockConfig {
        profiles: profiles.clone(),
        answer_keys: shipped.clone(),
        seed: 42,
    })
    .await;
    let mut candidates = Vec::new();
    for p in &profiles {
        let spec = CandidateSpec::openai_chat(p.name.clone(), mock.base_url(), p.name.clone());
        candidates.push((
            p.name.clone(),
            store
                .create_candidate(&crate::support::checked::admin_new(&spec))
                .await
                .unwrap(),
        ));
    }

    let runner = Runner::new(store.clone());
    let mut report = Vec::new();
    for file in shipped
        .iter()
        .filter(|f| f.header.name != "support-ticket-triage" && !is_tool_set(f) && !is_conversation_set(f))
    {
        let version = store.save_evalset_version(file).await.unwrap();
        let run = store
            .create_run(&NewRun {
                name: format!("shipped {}", file.header.name),
                evalset_version_id: version,
                candidate_ids: candidates.iter().map(|(_, id)| *id).collect(),
                config: RunConfig {
                    concurrency: 8,
                    warmup_requests: 0,
                    retries: 2,
                    timeout_secs: 20,
                    ..RunConfig::default()
                },
            })
            .await
            .unwrap();
        runner.start(run);
        tokio::time::timeout(Duration::from_secs(120), runner.wait(run))
            .await
            .expect("the run ended in time");
        assert_eq!(store.get_run(run).await.unwrap().unwrap().status, RunStatus::Finished);
        let records = store.list_request_records(run).await.unwrap();
        let weights: HashMap<&str, f64> = file.cases.iter().map(|c| (c.id.as_str(), c.weight())).collect();
        let accuracy: Vec<(String, f64)> = candidates
            .iter()
            .map(|(name, id)| {
                let s = summarise_candidate(*id, &records, |case| weights.get(case).copied().unwrap_or(1.0));
                (name.clone(), s.accuracy.expect("graded"))
            })
            .collect();
        // Per the mock's ground truth: a right answer always passes every grader (so max_tokens
        // leaves room for the answer), and a wrong one (another case's expected value) rarely does.
        let truth = mock_truth(&mock.root_url(), &file.header.name).await;
        let names: HashMap<i64, &str> = candidates.iter().map(|(n, id)| (*id, n.as_str())).collect();
        let (mut wrong, mut wrong_passed) = (0, 0);
        // Warm-up and roll-out (smoke) requests are recorded but never graded.
        for r in records.iter().filter(|r| !r.is_warmup && r.error_class.is_none()) {
            let correct = truth[&(names[&r.candidate_id].to_string(), r.case_id.to_string())];
            let passed = !r.grades.is_empty() && r.grades.iter().all(|g| g.passed);
            if correct {
                assert!(
                    passed,
                    "{} {}: a right answer failed: {:?}",
                    file.header.name, r.case_id, r.grades
                );
            } else {
                wrong += 1;
                wrong_passed += usize::from(passed);
            }
        }
        assert!(wrong > 0, "{}: the mock answered everything right", file.header.name);
        assert!(
            wrong_passed * 10 <= wrong,
            "{}: {wrong_passed} of {wrong} wrong answers passed",
            file.header.name
        );
        report.push(format!(
            "{}: {accuracy:?}, wrong answers passing: {wrong_passed}/{wrong}",
            file.header.name
        ));
        // The demo profiles answer right 60 % / 90 % / 98 % of the time; the graders must agree.
        let [swift, steady, sage] = [accuracy[0].1, accuracy[1].1, accuracy[2].1];
        assert!(swift < steady && steady < sage, "{}: {accuracy:?}", file.header.name);
        assert!((0.4..0.8).contains(&swift), "{}: {accuracy:?}", file.header.name);
        assert!(sage >= 0.9, "{}: {accuracy:?}", file.header.name);
    }
    eprintln!("accuracy per shipped set: {report:#?}");
}

/// (model, case id) → whether the mock answered it right, for one set.
async fn mock_truth(root_url: &str, set: &str) -> HashMap<(String, String), bool> {
    let page: Value = reqwest::get(format!("{root_url}/mock/requests"))
        .await
        .expect("fetching the mock's ground truth")
        .json()
        .await
        .expect("ground truth is JSON");
    page["requests"]
        .as_array()
        .expect("a requests array")
        .iter()
        .filter(|r| r["case"]["set"] == set)
        .map(|r| {
            let key = (
                r["model"].as_str().unwrap_or_default().to_string(),
                r["case"]["case_id"].as_str().unwrap_or_default().to_string(),
            );
            (key, r["case"]["correct"].as_bool().unwrap_or_default())
        })
        .collect()
}

// ------------------------------------------------------------------------------- proposed graders

/// An OpenAI evals file whose `ideal` is a JSON object written as a string (as OpenAI's own
/// extraction evals do) and, on the last line, as an object.
const OPENAI_JSON_IDEALS: &str = r#"{"input": [{"role": "system", "content": "Extract name and city as JSON."}, {"role": "user", "content": "Ada lives in London."}], "ideal": "{\"name\":\"Ada\",\"city\":\"London\"}"}
{"input": [{"role": "user", "content": "Alan moved to Manchester."}], "ideal": "{\"name\":\"Alan\",\"city\":\"Manchester\"}"}
{"input": "Grace was born in New York.", "ideal": {"name": "Grace", "city": "New York"}}
"#;

#[tokio::test]
async fn an_openai_evals_file_with_json_ideals_is_graded_field_by_field_and_the_grader_can_be_changed() {
    let app = spawn_app().await;
    let preview = upload(
        &app,
        "people.jsonl",
        OPENAI_JSON_IDEALS,
        &[("format", "auto"), ("task", "extraction")],
    )
    .await;
    assert_eq!(preview.status, 200, "{}", preview.text("main"));
    assert_eq!(preview.text(".grader-proposal .grader-chosen"), "json-fields");
    let why = preview.text(".grader-proposal .grader-why");
    assert!(
        why.contains("ideal values are JSON objects in 3 of 3 cases → json-fields"),
        "{why}"
    );
    assert_eq!(
        preview.attr("select[name=grader] option[selected]", "value").as_deref(),
        Some("json-fields")
    );
    assert_eq!(preview.count("select[name=grader] option"), 4);

    // The user picks another grader: the preview is read again with it, and says so.
    let text = preview
        .select(".grader-change textarea[name=text]")
        .first()
        .map(|e| e.text().collect::<String>())
        .expect("the change form carries the source text");
    let field = |name: &str| {
        preview
            .attr(&format!(".grader-change input[name={name}]"), "value")
            .unwrap()
    };
    let (format, name, task) = (field("format"), field("name"), field("task"));
    let exact = page_of(
        post_multipart(
            &app,
            "/evalsets/import",
            &[
                ("text", None, text.as_bytes()),
                ("format", None, format.as_bytes()),
                ("name", None, name.as_bytes()),
                ("task", None, task.as_bytes()),
                ("grader", None, b"exact"),
            ],
        )
        .await,
    )
    .await;
    assert_eq!(exact.status, 200, "{}", exact.text("main"));
    assert_eq!(exact.text(".grader-proposal .grader-chosen"), "exact");
    assert!(exact.text(".grader-proposal").contains("proposed: json-fields"));

    // Saved as proposed: right answers pass field by field whatever their whitespace or order.
    let version = save_preview(&app, &preview).await;
    let file = file_of(&app, version).await;
    assert_eq!(file.header.name, "people");
    let answers = [
        "{\"name\": \"Ada\", \"city\": \"London\"}",
        "```json\n{\n  \"city\" : \"Manchester\",\n  \"name\" : \"Alan\"\n}\n```",
        "{ \"name\":\"Grace\" ,\"city\":\"New  York\" }",
    ];
    for (case, answer) in file.cases.iter().zip(answers) {
        let graders = file.graders_for(case);
        assert_eq!(graders.len(), 1);
        let grade = graders[0].grade(answer, case.expected.as_ref());
        assert!(grade.passed, "{}: {answer:?} → {}", case.id, grade.reason);
    }
    // And a wrong field still fails.
    let wrong = file.graders_for(&file.cases[0])[0].grade(
        "{\"name\": \"Ada\", \"city\": \"Paris\"}",
        file.cases[0].expected.as_ref(),
    );
    assert!(!wrong.passed && wrong.reason.contains("city"), "{}", wrong.reason);
}

#[tokio::test]
async fn csv_imports_propose_label_or_numeric_graders_from_their_expected_values() {
    let app = spawn_app().await;
    let labels =
        "input,expected\ncharged twice,billing\napp crashes,technical\nrefund,billing\nlogin fails,technical\n";
    let page = upload(&app, "tickets.csv", labels, &[("task", "classification")]).await;
    assert_eq!(
        page.text(".grader-proposal .grader-chosen"),
        "label",
        "{}",
        page.text("main")
    );
    assert!(
        page.text(".grader-why")
            .contains("2 distinct expected values (billing, technical)")
    );
    let numbers = "input,expected\n2+2,4\n10/4,2.5\n";
    let page = upload(&app, "maths.csv", numbers, &[("task", "generation")]).await;
    assert_eq!(page.text(".grader-proposal .grader-chosen"), "numeric");
    // A bakeoff file states its own graders: nothing is proposed.
    let page = upload(&app, "tiny.jsonl", TINY_EVALSET, &[]).await;
    assert_eq!(page.count(".grader-proposal"), 0);
}
