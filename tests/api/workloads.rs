//! Workloads (docs/workloads.md): versions stored by content on both databases and never
//! changed, each log format imported through the API (and a bad line named, nothing stored),
//! the pages, and replay against the built-in mock: every request's recorded lengths sent
//! exactly, prefix text repeated exactly where the block ids repeat, one schedule for every
//! candidate — checked against what the mock says it received.
use std::collections::HashMap;
use std::sync::Arc;

use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::workload::WorkloadFile;
use bakeoff::domain::workload::generate::{PoolPrefix, SharedPrefixSpec};
use bakeoff::engine::cancel::Cancel;
use bakeoff::engine::replay::{ReplayOptions, replay};
use bakeoff::engine::tokens::o200k::o200k;
use bakeoff::mock::{MockConfig, ModelProfile};
use serde_json::Value;

use crate::support::app::spawn_app_on;
use crate::support::db::{TestStore, each_backend};

const OPENAI_LOG: &str = r#"{"timestamp":"2026-03-02T09:00:00.000Z","request":{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are the support assistant of Acme. Answer briefly and politely."},{"role":"user","content":"Where is my order 1234?"}],"max_tokens":256},"response":{"usage":{"prompt_tokens":31,"completion_tokens":42}}}
{"timestamp":"2026-03-02T09:00:00.250Z","request":{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are the support assistant of Acme. Answer briefly and politely."},{"role":"user","content":"Can I change my address?"}]},"response":{"usage":{"prompt_tokens":30,"completion_tokens":17}}}
{"created":1772442001,"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}],"max_tokens":12}
"#;

const OTEL: &str = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"chat gpt-4o","startTimeUnixNano":"1772442000000000000","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"812"}},{"key":"gen_ai.usage.output_tokens","value":{"intValue":"96"}}]},{"name":"db.query","startTimeUnixNano":"1772442000100000000","attributes":[]}]}]}]}
{"id":"obs-1","type":"GENERATION","startTime":"2026-03-02T09:00:01.500Z","usage":{"input":120,"output":30}}
"#;

const MOONCAKE: &str = r#"{"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2]}
{"timestamp": 400, "input_length": 1500, "output_length": 8, "hash_ids": [0, 1, 3]}
{"timestamp": 900, "input_length": 300, "output_length": 50, "hash_ids": [4]}
"#;

fn pool(seed: u64) -> SharedPrefixSpec {
    SharedPrefixSpec {
        name: "support-bot".into(),
        description: String::new(),
        requests: 30,
        per_second: 200.0,
        poisson: true,
        seed,
        system_tokens: 40,
        prefixes: vec![
            PoolPrefix {
                tokens: 20,
                weight: 2.0,
            },
            PoolPrefix {
                tokens: 36,
                weight: 1.0,
            },
        ],
        suffix_min: 1,
        suffix_max: 20,
        output_tokens: 6,
        cache_bust: false,
        block_tokens: 16,
    }
}

async fn workload_versions_are_stored_by_content_and_never_change(db: TestStore) {
    let store = &db.store;
    let first = pool(1).generate("spec").unwrap();
    let (id, stored) = store.save_workload_version(&first).await.unwrap();
    assert!(stored, "{}", db.backend);
    assert_eq!(store.save_workload_version(&first).await.unwrap(), (id, false));
    let second = pool(2).generate("spec").unwrap();
    let (id2, stored2) = store.save_workload_version(&second).await.unwrap();
    assert!(stored2 && id2 > id);
    let list = store.list_workloads().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].latest_version_id, list[0].version_count), (id2, 2));
    assert_eq!(list[0].latest.requests, 30);
    let versions = store.list_workload_versions(list[0].id).await.unwrap();
    assert_eq!(versions.iter().map(|v| v.id).collect::<Vec<_>>(), [id2, id]);
    assert_eq!(versions[1].content_hash, first.content_hash());
    let back = store.get_workload_version(id).await.unwrap().unwrap();
    assert_eq!(back.file, first);
    assert!(store.get_workload_version(id2 + 100).await.unwrap().is_none());
    assert!(
        db.execute_raw("UPDATE workload_versions SET source = 'mooncake'")
            .await
            .is_err(),
        "{}: a version is immutable",
        db.backend
    );
}
each_backend!(workload_versions_are_stored_by_content_and_never_change);

async fn import(app: &crate::support::app::TestApp, query: &str, body: &str) -> (u16, Value) {
    let r = app
        .client
        .post(app.url(&format!("/api/v1/workloads?{query}")))
        .header("content-type", "application/jsonl")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn every_log_format_imports_through_the_api_and_a_bad_line_is_named(db: TestStore) {
    let backend = db.backend;
    let app = spawn_app_on(db).await;
    let mut ids = HashMap::new();
    for (name, format, body, requests) in [
        ("support-prod", "auto", OPENAI_LOG, 3),
        ("agents", "otel", OTEL, 2),
        ("moon", "mooncake", MOONCAKE, 3),
    ] {
        let (status, json) = import(&app, &format!("name={name}&format={format}"), body).await;
        assert_eq!(status, 200, "{backend} {name}: {json}");
        assert_eq!(json["requests"], requests, "{name}: {json}");
        assert_eq!(json["stored"], true);
        ids.insert(name, json["version_id"].as_i64().unwrap());
    }
    // The same log again: the stored version, nothing written.
    let (_, again) = import(&app, "name=moon&format=mooncake", MOONCAKE).await;
    assert_eq!(
        (again["stored"].as_bool(), again["version_id"].as_i64()),
        (Some(false), Some(ids["moon"]))
    );

    // A bad line: refused with its line and field, nothing stored.
    let bad = MOONCAKE.replace("\"output_length\": 8", "\"output_length\": \"eight\"");
    let (status, problem) = import(&app, "name=moon&format=mooncake", &bad).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field_errors"][0]["line"], 2, "{problem}");
    assert_eq!(problem["field_errors"][0]["field"], "output_length", "{problem}");
    let (status, problem) = import(&app, "name=x&format=openai", "{\"timestamp\":1,\"model\":\"m\"}\n").await;
    assert_eq!(
        (status, problem["field_errors"][0]["field"].as_str()),
        (422, Some("messages")),
        "{problem}"
    );
    let list: Value = app.get("/api/v1/workloads").await.json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 3, "{list}");

    // What the log said, kept without text: lengths, offsets, a shared system prompt.
    let detail: Value = app
        .get(&format!("/api/v1/workload-versions/{}", ids["support-prod"]))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["header"]["source"], "openai-log", "{detail}");
    assert_eq!(detail["header"]["keeps_text"], false);
    assert_eq!(detail["summary"]["requests"], 3);
    let moon: Value = app
        .get(&format!("/api/v1/workload-versions/{}", ids["moon"]))
        .await
        .json()
        .await
        .unwrap();
    // Two of three requests start with block 0; 1024 of 2900 prompt tokens are repeated blocks.
    let share = moon["summary"]["shared_prefix_share"].as_f64().unwrap();
    assert!((share - 2.0 / 3.0).abs() < 1e-9, "{moon}");
    let repeated = moon["summary"]["repeated_token_share"].as_f64().unwrap();
    assert!((repeated - 1024.0 / 2900.0).abs() < 1e-9, "{moon}");

    // The pages: the list, and a version with its figures and versions.
    let list = app.get_html("/workloads").await;
    assert_eq!(list.status, 200);
    assert!(list.text("main").contains("support-prod"), "{}", list.text("main"));
    let page = app.get_html(&format!("/workloads/versions/{}", ids["moon"])).await;
    assert_eq!(page.status, 200, "{}", page.text("main"));
    assert_eq!(page.text("#shared-prefix"), "66.7 %");
    assert_eq!(page.text("#repeated-tokens"), "35.3 %");
    assert!(page.text("main").contains("No prompt text is kept"));
    let download = app.get(&format!("/workloads/versions/{}/download", ids["moon"])).await;
    let text = download.text().await.unwrap();
    assert_eq!(WorkloadFile::parse("download", &text).unwrap().requests.len(), 3);
}
each_backend!(every_log_format_imports_through_the_api_and_a_bad_line_is_named);

#[tokio::test]
async fn replay_sends_recorded_lengths_repeats_prefix_text_and_gives_every_candidate_one_schedule() {
    let profile = |name: &str| ModelProfile {
        ttft_ms: 1.0,
        inter_token_ms: Some(0.5),
        ..ModelProfile::named(name)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::mock::spawn(
        MockConfig {
            profiles: vec![profile("model-a"), profile("model-b")],
            ..MockConfig::default()
        },
        listener,
    )
    .await
    .unwrap();
    let workload = pool(7).generate("spec").unwrap();
    let specs: Vec<CandidateSpec> = ["model-a", "model-b"]
        .iter()
        .map(|m| CandidateSpec::openai_chat(*m, mock.base_url(), *m))
        .collect();
    let options = ReplayOptions {
        speed: 4.0,
        seed: 11,
        exact_output: true,
        keep_prompts: true,
        ..ReplayOptions::default()
    };
    let reports = replay(&specs, Arc::new(workload.clone()), &options, Cancel::never())
        .await
        .unwrap();
    assert_eq!(reports.len(), 2);
    let n = workload.requests.len();
    for r in &reports {
        assert_eq!(r.sent.len(), n, "{}", r.model);
        assert!(r.sent.iter().all(|s| s.failure.is_none()), "{:?}", r.sent);
        let f = &r.fidelity;
        assert_eq!(
            (f.input_exact, f.output_exact, f.output_received_exact),
            (n, n, n),
            "{f:?}"
        );
    }
    // One schedule, one set of prompts, for every candidate.
    let plan = |i: usize| {
        reports[i]
            .sent
            .iter()
            .map(|s| (s.index, s.due_unix_us, s.prompt.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(plan(0), plan(1));

    // Exactly the recorded length, and the same tokens wherever the block ids agree.
    let tokens: Vec<Vec<u32>> = reports[0]
        .sent
        .iter()
        .map(|s| o200k().encode(s.prompt.as_deref().unwrap()))
        .collect();
    let block = workload.header.block_tokens as usize;
    let mut shared_pairs = 0;
    for (i, a) in workload.requests.iter().enumerate() {
        assert_eq!(tokens[i].len(), a.input_tokens as usize, "request {i}");
        for (j, b) in workload.requests.iter().enumerate().skip(i + 1) {
            let common = a.blocks.iter().zip(&b.blocks).take_while(|(x, y)| x == y).count();
            let shared = (common * block).min(tokens[i].len()).min(tokens[j].len());
            assert_eq!(
                tokens[i][..shared],
                tokens[j][..shared],
                "requests {i} and {j} share {common} blocks"
            );
            if common > 0 {
                shared_pairs += 1;
            }
            if common < a.blocks.len() && common < b.blocks.len() {
                let end = |t: &Vec<u32>| (shared + block).min(t.len());
                assert_ne!(
                    tokens[i][shared..end(&tokens[i])],
                    tokens[j][shared..end(&tokens[j])],
                    "requests {i} and {j} differ from block {common}"
                );
            }
        }
    }
    assert!(shared_pairs > 0, "the pool shares prefixes");

    // What the mock received: every request, the prompts sent, the answers of the recorded length.
    let truth: Value = reqwest::get(format!("{}/mock/requests", mock.root_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for r in &reports {
        let mut received: Vec<(u64, u64)> = truth["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["model"] == r.model.as_str())
            .map(|q| (q["prompt_tokens"].as_u64().unwrap(), q["tokens_sent"].as_u64().unwrap()))
            .collect();
        let mut sent: Vec<(u64, u64)> = r
            .sent
            .iter()
            .map(|s| {
                let prompt = s.prompt.as_deref().unwrap();
                (
                    u64::from(bakeoff::mock::tokens::count_chat_tokens([prompt])),
                    u64::from(workload.requests[s.index].output_tokens),
                )
            })
            .collect();
        received.sort_unstable();
        sent.sort_unstable();
        assert_eq!(received, sent, "{}", r.model);
    }
    mock.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_workloads_page_uploads_a_log_and_generates_a_pool_and_refuses_bad_input_naming_it() {
    let app = crate::support::app::spawn_app().await;
    // The upload: a Mooncake trace, prompts not kept.
    let boundary = "----workload-test-boundary";
    let multipart = |parts: &[(&str, Option<&str>, &str)]| {
        let mut body = String::new();
        for (name, file, content) in parts {
            body.push_str(&format!("--{boundary}\r\n"));
            match file {
                Some(f) => body.push_str(&format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n\r\n"
                )),
                None => body.push_str(&format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n")),
            }
            body.push_str(content);
            body.push_str("\r\n");
        }
        body.push_str(&format!("--{boundary}--\r\n"));
        body
    };
    let post = |body: String| {
        app.client
            .post(app.url("/workloads/import"))
            .header("content-type", format!("multipart/form-data; boundary={boundary}"))
            .body(body)
            .send()
    };
    let r = post(multipart(&[
        ("file", Some("moon.jsonl"), MOONCAKE),
        ("format", None, "auto"),
    ]))
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());
    let location = r.headers()["location"].to_str().unwrap().to_string();
    assert!(location.starts_with("/workloads/versions/"), "{location}");
    let page = app.get_html(&location).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text("h1").contains("moon"),
        "named after the file: {}",
        page.text("h1")
    );

    // A bad line: 422 naming the file, line and field; nothing stored.
    let bad = MOONCAKE.replace("\"input_length\": 300", "\"input_length\": 0");
    let r = post(multipart(&[("file", Some("bad.jsonl"), &bad)])).await.unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let text = r.text().await.unwrap();
    assert!(text.contains("bad.jsonl:3: field `input_length`"), "{text}");

    // The generator: a pool, then a bad field named.
    let mut fields = vec![
        ("name", "pool"),
        ("requests", "50"),
        ("per_second", "5"),
        ("poisson", "on"),
        ("seed", "3"),
        ("system_tokens", "600"),
        ("prefixes", "300:3, 900:1"),
        ("suffix_min", "10"),
        ("suffix_max", "90"),
        ("output_tokens", "64"),
    ];
    let r = app.post_form("/workloads/generate", &fields).await;
    assert_eq!(r.status().as_u16(), 303);
    let pool = app.get_html(r.headers()["location"].to_str().unwrap()).await;
    assert_eq!(pool.status, 200);
    assert_eq!(
        pool.text("#shared-prefix"),
        "100.0 %",
        "every request shares the system prompt"
    );
    fields[7] = ("suffix_min", "200");
    let refused = app.post_form_html("/workloads/generate", &fields).await;
    assert_eq!(refused.status, 422);
    assert!(refused.text("main").contains("suffix_min"), "{}", refused.text("main"));
    let list: Value = app.get("/api/v1/workloads").await.json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_imports_generates_and_replays_and_names_a_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _db) = crate::support::db::sqlite_url();
    let bakeoff = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
                .args(&args)
                .env("BAKEOFF_SECRET_KEY", hex::encode(crate::support::db::TEST_SERVER_KEY))
                .output()
                .expect("running bakeoff")
        })
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let log = dir.path().join("gateway.jsonl");
    std::fs::write(&log, OPENAI_LOG).unwrap();
    let path = log.display().to_string();
    let out = bakeoff(vec![
        "workload".into(),
        "import".into(),
        path.clone(),
        "--database-url".into(),
        url.clone(),
    ])
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("stored as workload \"gateway\""),
        "{}",
        text(&out.stdout)
    );

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, OPENAI_LOG.replace("\"completion_tokens\":17", "\"cached\":1")).unwrap();
    let out = bakeoff(vec![
        "workload".into(),
        "import".into(),
        bad.display().to_string(),
        "--database-url".into(),
        url.clone(),
    ])
    .await
    .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!(
            "{}:2: field `response.usage.completion_tokens`",
            bad.display()
        )),
        "{}",
        text(&out.stderr)
    );

    let spec = dir.path().join("pool.toml");
    std::fs::write(
        &spec,
        "name = \"pool\"\nrequests = 12\nper_second = 50.0\npoisson = true\nseed = 2\nsystem_tokens = 40\n\
         prefixes = [ { tokens = 20, weight = 1 } ]\nsuffix_min = 1\nsuffix_max = 9\noutput_tokens = 3\nblock_tokens = 16\n",
    )
    .unwrap();
    let file = dir.path().join("pool.workload.jsonl");
    let out = bakeoff(vec![
        "workload".into(),
        "generate".into(),
        spec.display().to_string(),
        "--out".into(),
        file.display().to_string(),
    ])
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = bakeoff::mock::spawn(
        MockConfig {
            profiles: vec![ModelProfile::named("m")],
            ..MockConfig::default()
        },
        listener,
    )
    .await
    .unwrap();
    let report = dir.path().join("replay.json");
    let out = bakeoff(vec![
        "workload".into(),
        "replay".into(),
        file.display().to_string(),
        "--base-url".into(),
        mock.base_url(),
        "--model".into(),
        "m".into(),
        "--speed".into(),
        "5".into(),
        "--exact-output".into(),
        "--json".into(),
        report.display().to_string(),
    ])
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("12/12 sent"), "{}", text(&out.stdout));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json[0]["fidelity"]["input_exact"], 12, "{json}");
    assert_eq!(json[0]["fidelity"]["output_received_exact"], 12, "{json}");
    mock.shutdown().await.unwrap();
}
