//! The verdict in a pipeline: candidates and profiles as files round-tripping with the browser,
//! and `bakeoff run start` (the built binary) against the built-in mock for every exit code,
//! with its JUnit, JSON and Markdown reports.
use std::path::PathBuf;
use std::process::Output;

use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::mock::{MockConfig, MockServer, ModelProfile};

use crate::support::app::spawn_app_on;
use crate::support::db::{TEST_SERVER_KEY, TestStore, each_backend_pair, postgres_test_store, sqlite_test_store};
use crate::support::runs::start_mock;

/// `bakeoff ARGS --database-url URL` with the test server key; waits for it to exit.
pub fn bakeoff(args: &[&str], database_url: &str) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(args)
        .args(["--database-url", database_url])
        .env("BAKEOFF_SECRET_KEY", hex::encode(TEST_SERVER_KEY))
        .env("BAKEOFF_LOG", "warn")
        .env_remove("BAKEOFF_KEY_GATE")
        .output()
        .expect("running bakeoff")
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn browser_candidates_and_profiles_round_trip(from: TestStore, to: TestStore) {
    let app = spawn_app_on(from).await;
    let r = app
        .post_form(
            "/candidates",
            &[
                ("name", "round-trip"),
                ("provider", "openai-chat"),
                ("base_url", "http://127.0.0.1:9/v1/"),
                ("model", "m-1"),
                ("api_key", "sk-round-trip-secret-1234"),
                ("api_key_env", "BAKEOFF_KEY_GATE"),
                ("max_tokens", "128"),
                ("temperature", "0.3"),
                (
                    "extra_body",
                    r#"{"top_p": 0.9, "stop": ["\n"], "nested": {"a": [1, 2.5, true]}}"#,
                ),
                ("hardware", "1× L4"),
                ("framework", "vLLM 0.6"),
                ("quantization", "awq"),
                ("context_length", "8192"),
                ("price_input", "0.15"),
                ("price_output", "0.6"),
                ("claimed_tps", "2158"),
                ("claimed_caliber", "per-stream decode"),
                ("claimed_conditions", "H100, batch 1"),
                ("notes", "line one\nline \"two\" <b>"),
                ("tokenize_kind", "vllm"),
                ("tokenize_path", ""),
            ],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());
    let r = app
        .post_form(
            "/thresholds",
            &[
                ("name", "gate profile"),
                ("description", "for CI"),
                ("changed_by", "ana"),
                ("change_rationale", "first cut"),
                ("rule0_metric", "accuracy"),
                ("rule0_comparator", ">="),
                ("rule0_value", "92.5"),
                ("rule0_rationale", "reviewers check the rest"),
                ("rule1_metric", "ttft_p95_ms"),
                ("rule1_concurrency", "8"),
                ("rule1_comparator", "<="),
                ("rule1_value", "1200"),
                ("rule2_metric", "failure_rate"),
                ("rule2_param", "http_5xx"),
                ("rule2_comparator", "<"),
                ("rule2_value", "0.7"),
            ],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());

    let dir = tempfile::tempdir().unwrap();
    let cfile = dir.path().join("candidates.toml");
    let pfile = dir.path().join("profile.toml");
    let out = bakeoff(
        &["candidate", "export", "round-trip", "--output", cfile.to_str().unwrap()],
        &app_url(&app),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&cfile).unwrap();
    assert!(!text.contains("sk-round-trip"), "an export never carries a key: {text}");
    assert!(text.contains("api_key_env = \"BAKEOFF_KEY_GATE\""), "{text}");
    let out = bakeoff(
        &["profile", "export", "gate profile", "--output", pfile.to_str().unwrap()],
        &app_url(&app),
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let out = bakeoff(&["candidate", "import", cfile.to_str().unwrap()], &to.url);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("created candidate"), "{}", stdout(&out));
    let out = bakeoff(
        &["profile", "import", pfile.to_str().unwrap(), "--changed-by", "ci"],
        &to.url,
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let original = app.store.list_candidates().await.unwrap().remove(0).spec;
    let copied = to.store.list_candidates().await.unwrap().remove(0).spec;
    assert!(original.api_key.is_some() && copied.api_key.is_none());
    assert_eq!(
        copied,
        bakeoff::domain::candidate::CandidateSpec {
            api_key: None,
            ..original
        },
        "{} → {}",
        app.backend,
        to.backend
    );
    let p1 = app.store.list_threshold_profiles().await.unwrap();
    let p2 = to.store.list_threshold_profiles().await.unwrap();
    let (a, b) = (
        p1.iter().find(|p| p.name == "gate profile").unwrap(),
        p2.iter().find(|p| p.name == "gate profile").unwrap(),
    );
    assert_eq!((&a.rules, &a.description), (&b.rules, &b.description));

    // Importing the same files again changes nothing.
    let out = bakeoff(&["candidate", "import", cfile.to_str().unwrap()], &to.url);
    assert!(stdout(&out).contains("unchanged candidate"), "{}", stdout(&out));
    let out = bakeoff(&["profile", "import", pfile.to_str().unwrap()], &to.url);
    assert!(stdout(&out).contains("unchanged threshold profile"), "{}", stdout(&out));
    assert_eq!(to.store.list_threshold_profiles().await.unwrap()[0].version, 1);
}
each_backend_pair!(browser_candidates_and_profiles_round_trip);

/// The URL of the database behind a test app opened on a `TestStore`.
fn app_url(app: &crate::support::app::TestApp) -> String {
    app.db_url().expect("an app over a TestStore knows its URL")
}

#[tokio::test]
async fn a_bad_file_names_file_line_and_field_and_changes_nothing() {
    let db = sqlite_test_store().await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "bakeoff_candidates = 1\n[[candidate]]\nname = \"a\"\nprovider = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "bakeoff_candidates = 1\n[[candidate]]\nname = \"b\"\nprovider = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\n[[candidate]]\nname = \"c\"\nprovider = \"grpc\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"HOME\"\n",
    )
    .unwrap();
    let out = bakeoff(&["candidate", "import", bad.to_str().unwrap()], &db.url);
    assert!(!out.status.success());
    let err = stderr(&out);
    let name = bad.display().to_string();
    assert!(
        err.contains(&format!("{name}:10: field `candidate[1].provider`")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{name}:13: field `candidate[1].api_key_env`")),
        "{err}"
    );
    assert_eq!(
        db.store.list_candidates().await.unwrap().len(),
        0,
        "nothing stored: {err}"
    );
    let with_key = dir.path().join("key.toml");
    std::fs::write(
        &with_key,
        std::fs::read_to_string(&good).unwrap() + "api_key = \"sk-live-1234567890\"\n",
    )
    .unwrap();
    let out = bakeoff(&["candidate", "import", with_key.to_str().unwrap()], &db.url);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains(":7: field `candidate[0].api_key`"),
        "{err}"
    );
    assert!(!err.contains("sk-live"), "{err}");
    assert_eq!(db.store.list_candidates().await.unwrap().len(), 0);
}

// ------------------------------------------------------------------ bakeoff run start

const CASES: usize = 12;

pub(crate) fn evalset_text() -> String {
    let mut text = String::from(
        r#"{"bakeoff_evalset":1,"name":"gate-set","task":"generation","prompt":"Say {{n}}","graders":[{"kind":"exact"}],"max_tokens":16}"#,
    );
    for i in 0..CASES {
        text.push_str(&format!(
            "\n{{\"id\":\"c{i:02}\",\"vars\":{{\"n\":{i}}},\"expected\":\"answer {i}\"}}"
        ));
    }
    text.push('\n');
    text
}

pub(crate) async fn mock() -> MockServer {
    let key = EvalSetFile::parse("gate-set.jsonl", &evalset_text()).unwrap();
    let fast = |name: &str, accuracy: f64| ModelProfile {
        ttft_ms: 2.0,
        inter_token_ms: Some(0.5),
        jitter: 0.0,
        accuracy,
        ..ModelProfile::named(name)
    };
    start_mock(MockConfig {
        profiles: vec![fast("right", 1.0), fast("wrong", 0.0)],
        answer_keys: vec![key],
        seed: 5,
    })
    .await
}

/// A directory with the eval set, settings, profiles and a candidates file per model.
pub(crate) struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    pub(crate) fn new(mock: &MockServer) -> Workspace {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace { dir };
        ws.write("gate-set.jsonl", &evalset_text());
        ws.write(
            "settings.toml",
            "bakeoff_settings = 1\nconcurrency = 4\nwarmup_requests = 0\nretries = 0\ntimeout_secs = 10\n",
        );
        for (file, model) in [("right.toml", "right"), ("wrong.toml", "wrong")] {
            ws.candidate(file, "main", &mock.base_url(), model);
        }
        ws.candidate("down.toml", "down", "http://127.0.0.1:1/v1", "right");
        ws.profile("accuracy.toml", "accuracy", ">=", "50");
        // A rule nothing in a plain run measures: an endpoint probe never run.
        ws.profile_rule(
            "unmeasured.toml",
            "unmeasured",
            "metric = \"probe\"\nparam = \"usage_in_stream\"\ncomparator = \">=\"\nvalue = 100\n",
        );
        ws.profile("lenient.toml", "lenient", "<", "50");
        ws
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    fn candidate(&self, file: &str, name: &str, base_url: &str, model: &str) {
        self.write(
            file,
            &format!(
                "bakeoff_candidates = 1\n[[candidate]]\nname = \"{name}\"\nprovider = \"openai-chat\"\nbase_url = \"{base_url}\"\nmodel = \"{model}\"\n"
            ),
        );
    }

    /// `accuracy` rules compare the share right; `lenient` (comparator `<`) the failure rate.
    fn profile(&self, file: &str, name: &str, comparator: &str, value: &str) {
        let metric = if comparator == "<" { "failure_rate" } else { "accuracy" };
        self.profile_rule(
            file,
            name,
            &format!("metric = \"{metric}\"\ncomparator = \"{comparator}\"\nvalue = {value}\n"),
        );
    }

    fn profile_rule(&self, file: &str, name: &str, rule: &str) {
        self.write(
            file,
            &format!("bakeoff_profile = 1\nname = \"{name}\"\n[[rule]]\n{rule}"),
        );
    }

    /// `bakeoff run start` with the reports written into the workspace.
    fn start(&self, db: &str, candidates: &str, profile: &str, extra: &[&str]) -> Output {
        let args = self.start_args(candidates, profile, extra);
        bakeoff(&args.iter().map(String::as_str).collect::<Vec<_>>(), db)
    }

    /// The arguments of `bakeoff run start` over the workspace's eval set and settings, with the
    /// reports written into it (an earlier JSON report removed first).
    pub(crate) fn start_args(&self, candidates: &str, profile: &str, extra: &[&str]) -> Vec<String> {
        let _ = std::fs::remove_file(self.path("report.json"));
        let mut args: Vec<String> = vec![
            "run".into(),
            "start".into(),
            "--evalset".into(),
            self.arg("gate-set.jsonl"),
            "--candidates".into(),
            candidates.into(),
            "--profile".into(),
            profile.into(),
            "--settings".into(),
            self.arg("settings.toml"),
            "--report-json".into(),
            self.arg("report.json"),
            "--report-junit".into(),
            self.arg("report.xml"),
            "--report-md".into(),
            self.arg("report.md"),
        ];
        args.extend(extra.iter().map(|e| e.to_string()));
        args
    }

    pub(crate) fn report(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.path("report.json")).unwrap()).unwrap()
    }

    pub(crate) fn junit(&self) -> String {
        std::fs::read_to_string(self.path("report.xml")).unwrap()
    }
}

pub(crate) fn code(out: &Output) -> i32 {
    out.status.code().expect("bakeoff exited with a code")
}

/// The JUnit file as CI systems read it: suites of cases, each case's failure message.
struct Junit {
    /// (suite name, its cases).
    suites: Vec<(String, Vec<Case>)>,
}

/// A testcase: (name, failure message, skipped).
type Case = (String, Option<String>, bool);

fn parse_junit(xml: &str) -> Junit {
    // scraper parses XML well enough for this flat shape (lowercased names, attributes kept).
    let doc = scraper::Html::parse_fragment(xml);
    let sel = |s: &str| scraper::Selector::parse(s).unwrap();
    let roots: Vec<_> = doc.select(&sel("testsuites")).collect();
    assert_eq!(roots.len(), 1, "one <testsuites>: {xml}");
    let suites = doc
        .select(&sel("testsuites > testsuite"))
        .map(|suite| {
            let cases = suite
                .select(&sel("testcase"))
                .map(|case| {
                    let failure = case
                        .select(&sel("failure"))
                        .next()
                        .map(|f| f.value().attr("message").expect("a failure has a message").to_string());
                    let skipped = case.select(&sel("skipped")).next().is_some();
                    (case.value().attr("name").unwrap().to_string(), failure, skipped)
                })
                .collect();
            (suite.value().attr("name").unwrap().to_string(), cases)
        })
        .collect();
    Junit { suites }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_start_exits_with_the_verdict_and_writes_reports_ci_reads() {
    let mock = mock().await;
    let ws = Workspace::new(&mock);
    let db = sqlite_test_store().await;

    // 0 GO: the right model over a 50 % accuracy rule.
    let out = ws.start(&db.url, &ws.arg("right.toml"), &ws.arg("accuracy.toml"), &[]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("verdict: GO"), "{}", stdout(&out));
    let report = ws.report();
    assert_eq!(report["format"], "bakeoff.gate/1");
    assert_eq!(report["exit_code"], 0);
    let go_run = report["run_id"].as_i64().unwrap();
    let junit = parse_junit(&ws.junit());
    assert_eq!(junit.suites.len(), 1);
    assert_eq!(junit.suites[0].0, "main");
    assert_eq!(junit.suites[0].1.len(), 1, "one testcase per rule");
    assert!(junit.suites[0].1[0].1.is_none());
    let md = std::fs::read_to_string(ws.path("report.md")).unwrap();
    assert!(md.starts_with("### bakeoff: **GO**"), "{md}");
    // The run is in the archive like a browser's run, judged by the profile.
    let run = db.store.get_run(go_run).await.unwrap().unwrap();
    assert_eq!(run.status.as_str(), "finished");
    assert_eq!(db.store.count_runs().await.unwrap(), 1);

    // 1 NO-GO: the same candidate name now points at the wrong model; its failure says why.
    let out = ws.start(&db.url, &ws.arg("wrong.toml"), &ws.arg("accuracy.toml"), &[]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let junit = parse_junit(&ws.junit());
    let (name, failure, _) = &junit.suites[0].1[0];
    assert!(name.contains("accuracy"), "{name}");
    let message = failure.as_deref().expect("a failing rule is a <failure>");
    assert!(message.contains("accuracy") && message.contains('%'), "{message}");

    // 1 NO-GO by the baseline alone: every rule passes, but the GO run was significantly more
    // accurate on the same cases.
    let baseline = go_run.to_string();
    let out = ws.start(
        &db.url,
        &ws.arg("wrong.toml"),
        &ws.arg("lenient.toml"),
        &["--baseline", &baseline],
    );
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let report = ws.report();
    assert_eq!(report["candidates"][0]["verdict"], "GO", "{report}");
    assert_eq!(report["candidates"][0]["baseline"]["regression"], true, "{report}");
    let junit = parse_junit(&ws.junit());
    let regression = junit.suites[0].1.iter().find(|c| c.0.contains("regression")).unwrap();
    assert!(
        regression.1.as_deref().unwrap().contains("significantly"),
        "{:?}",
        regression
    );
    // Against itself there is no regression.
    let out = ws.start(
        &db.url,
        &ws.arg("right.toml"),
        &ws.arg("lenient.toml"),
        &["--baseline", &baseline],
    );
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));

    // 2 INCONCLUSIVE: a rule the run does not measure is skipped, and nothing fails.
    let out = ws.start(&db.url, "main", &ws.arg("unmeasured.toml"), &[]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    let junit = parse_junit(&ws.junit());
    assert!(junit.suites[0].1[0].2, "not measured is <skipped>: {}", ws.junit());

    // 3 configuration error: unknown names and bad files change nothing.
    let runs = db.store.count_runs().await.unwrap();
    let out = ws.start(&db.url, "nobody", &ws.arg("accuracy.toml"), &[]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("candidate \"nobody\""), "{}", stderr(&out));
    ws.write("bad-settings.toml", "bakeoff_settings = 1\nconcurrency = 0\n");
    let bad = ws.arg("bad-settings.toml");
    let out = bakeoff(
        &[
            "run",
            "start",
            "--evalset",
            "gate-set",
            "--candidates",
            "main",
            "--profile",
            "accuracy",
            "--settings",
            &bad,
        ],
        &db.url,
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{bad}:2: field `concurrency`")),
        "{}",
        stderr(&out)
    );
    let out = ws.start(&db.url, "main", &ws.arg("accuracy.toml"), &["--baseline", "999999"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(db.store.count_runs().await.unwrap(), runs, "no run was stored");

    // 4 run error: an unreachable server stops the staged rollout; the JUnit file has an error.
    let out = ws.start(&db.url, &ws.arg("down.toml"), &ws.arg("accuracy.toml"), &[]);
    assert_eq!(code(&out), 4, "{}{}", stdout(&out), stderr(&out));
    let xml = ws.junit();
    assert!(xml.contains("<error type=\"run\""), "{xml}");
    assert_eq!(ws.report()["status"], "failed");

    // --help documents every exit code.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"))
        .args(["run", "start", "--help"])
        .output()
        .unwrap();
    let help = stdout(&help);
    for line in [
        "0  GO",
        "1  NO-GO",
        "2  INCONCLUSIVE",
        "3  configuration error",
        "4  run error",
    ] {
        assert!(help.contains(line), "{line} in {help}");
    }
}

/// The exit codes on PostgreSQL (`--database-url postgres://…`): the gate's code is shared by
/// both backends, so the path that reads most from the store, a NO-GO by the baseline alone
/// (the archived run's records against the new run's), stands for the rest, after the GO run it
/// compares with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(bakeoff_test_postgres),
    ignore = "needs PostgreSQL: set BAKEOFF_TEST_POSTGRES_URL=postgres://…"
)]
async fn run_start_exits_with_the_verdict_on_postgresql() {
    let mock = mock().await;
    let ws = Workspace::new(&mock);
    let db = postgres_test_store().await;
    let out = ws.start(&db.url, &ws.arg("right.toml"), &ws.arg("accuracy.toml"), &[]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let go_run = ws.report()["run_id"].as_i64().unwrap();
    assert_eq!(
        db.store.get_run(go_run).await.unwrap().unwrap().status.as_str(),
        "finished"
    );
    let baseline = go_run.to_string();
    let out = ws.start(
        &db.url,
        &ws.arg("wrong.toml"),
        &ws.arg("lenient.toml"),
        &["--baseline", &baseline],
    );
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let report = ws.report();
    assert_eq!(report["candidates"][0]["baseline"]["regression"], true, "{report}");
    assert_eq!(db.store.count_runs().await.unwrap(), 2);
}

/// A run made in the browser, its settings exported as a file (`bakeoff run settings-export`)
/// and given to `bakeoff run start --settings`: the new run has the same configuration. A run
/// whose configuration a file cannot state is refused, naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_runs_settings_exported_run_the_same_way() {
    let mock = mock().await;
    let ws = Workspace::new(&mock);
    let app = spawn_app_on(sqlite_test_store().await).await;
    let url = app_url(&app);
    let out = bakeoff(&["candidate", "import", &ws.arg("right.toml")], &url);
    assert!(out.status.success(), "{}", stderr(&out));
    let candidate = app.store.list_candidates().await.unwrap()[0].id.to_string();
    let version = app
        .store
        .save_evalset_version(&EvalSetFile::parse("gate-set.jsonl", &evalset_text()).unwrap())
        .await
        .unwrap()
        .to_string();
    let form = |temperature: &'static str| {
        vec![
            ("evalset_version", version.clone()),
            ("candidate", candidate.clone()),
            ("concurrency", "2".to_string()),
            ("repetitions", "2".to_string()),
            ("warmup_requests", "1".to_string()),
            ("retries", "0".to_string()),
            ("timeout_secs", "10".to_string()),
            ("max_tokens", "16".to_string()),
            ("temperature", temperature.to_string()),
            ("case_limit", "4".to_string()),
            ("stream", "on".to_string()),
            ("error_budget_percent", "30".to_string()),
            ("error_budget_window", "5".to_string()),
            ("load_shape", "levels".to_string()),
            ("levels", "1, 2".to_string()),
        ]
    };
    let post = |fields: Vec<(&'static str, String)>| {
        let app = &app;
        async move {
            let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let r = app.post_form("/runs", &fields).await;
            assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());
            let run = app.store.list_runs(1, 0).await.unwrap().remove(0).run;
            tokio::time::timeout(std::time::Duration::from_secs(60), app.state.runner.wait(run.id))
                .await
                .expect("the browser's run ended in time");
            run
        }
    };
    let browser = post(form("0.7")).await;

    let file = ws.path("from-browser.toml");
    let id = browser.id.to_string();
    let out = bakeoff(
        &["run", "settings-export", &id, "--output", file.to_str().unwrap()],
        &url,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("bakeoff_settings = 1") && text.contains("levels = ["),
        "{text}"
    );
    let out = bakeoff(
        &[
            "run",
            "start",
            "--evalset",
            "gate-set",
            "--candidates",
            "main",
            "--profile",
            &ws.arg("lenient.toml"),
            "--settings",
            file.to_str().unwrap(),
        ],
        &url,
    );
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let from_file = app.store.list_runs(1, 0).await.unwrap().remove(0).run;
    assert_ne!(from_file.id, browser.id);
    assert_eq!(from_file.config, browser.config, "{text}");
    assert_eq!(from_file.candidate_ids, browser.candidate_ids);

    // Temperature left blank (the eval set's and candidates' own): a file cannot say so.
    let unset = post(form("")).await;
    let _ = std::fs::remove_file(&file);
    let id = unset.id.to_string();
    let out = bakeoff(
        &["run", "settings-export", &id, "--output", file.to_str().unwrap()],
        &url,
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("temperature"), "{}", stderr(&out));
    assert!(!file.exists(), "nothing written");
}
