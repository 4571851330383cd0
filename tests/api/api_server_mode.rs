//! `bakeoff run start --server URL` (the built binary, token from BAKEOFF_TOKEN) against a
//! served app: the files are uploaded, the run is measured by the server against the mock, and
//! the command exits with the verdict's code and writes the same reports a local run writes.
//! Every verdict's exit code (0 GO, 1 NO-GO, also by `--baseline` alone, 2 INCONCLUSIVE); wrong
//! names, tokens and baselines are configuration errors (exit 3) that change nothing on the server.
use std::process::Output;

use bakeoff::domain::accounts::Role;

use crate::api_v1::Api;
use crate::gate::{Workspace, code, mock, stderr, stdout};
use crate::support::app::spawn_app_on;
use crate::support::db::{TestStore, each_backend};

/// `bakeoff ARGS` with BAKEOFF_TOKEN set (when given) and no database; runs off the test's
/// runtime threads so the served app keeps answering.
async fn bakeoff(args: Vec<String>, token: Option<&str>) -> Output {
    let token = token.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bakeoff"));
        command
            .args(&args)
            .env("BAKEOFF_LOG", "warn")
            .env_remove("BAKEOFF_TOKEN")
            .env_remove("BAKEOFF_DATABASE_URL");
        if let Some(t) = token {
            command.env("BAKEOFF_TOKEN", t);
        }
        command.output().expect("running bakeoff")
    })
    .await
    .unwrap()
}

each_backend!(
    run_start_on_a_server_exits_with_the_verdict,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn run_start_on_a_server_exits_with_the_verdict(db: TestStore) {
    let mock = mock().await;
    let ws = Workspace::new(&mock);
    let app = spawn_app_on(db).await;
    let api = Api::new(&app, "ci", Role::Editor).await;
    let server = ["--server".to_string(), app.base_url.clone()];
    let with_server = |candidates: &str, profile: &str, extra: &[&str]| {
        let mut args = ws.start_args(candidates, profile, extra);
        args.extend(server.iter().cloned());
        args
    };

    // 0 GO: files uploaded, the server measures the right model.
    let out = bakeoff(
        with_server(&ws.arg("right.toml"), &ws.arg("accuracy.toml"), &[]),
        Some(&api.token),
    )
    .await;
    assert_eq!(code(&out), 0, "{}: {}{}", app.backend, stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("verdict: GO"), "{}", stdout(&out));
    let report = ws.report();
    assert_eq!(report["format"], "bakeoff.gate/1");
    assert_eq!(report["exit_code"], 0);
    let go_run = report["run_id"].as_i64().unwrap();
    let run = app
        .store
        .get_run(go_run)
        .await
        .unwrap()
        .expect("the run is the server's");
    assert_eq!(run.status.as_str(), "finished");
    assert!(ws.junit().contains("<testsuite"), "{}", ws.junit());
    let md = std::fs::read_to_string(ws.path("report.md")).unwrap();
    assert!(md.starts_with("### bakeoff: **GO**"), "{md}");
    // The report is the one the API gives for the run.
    let verdict = api
        .ok(&format!(
            "/api/v1/runs/{go_run}/verdict?profile={}",
            report["profile_id"]
        ))
        .await;
    assert_eq!(verdict, report);

    // 1 NO-GO: the same candidate name now points at the wrong model (the file updates it); the
    // profile and eval set are named this time, resolved on the server.
    let mut args = with_server(&ws.arg("wrong.toml"), "accuracy", &[]);
    let at = args.iter().position(|a| a == "--evalset").unwrap();
    args[at + 1] = "gate-set".to_string();
    let out = bakeoff(args, Some(&api.token)).await;
    assert_eq!(code(&out), 1, "{}: {}{}", app.backend, stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("verdict: NO-GO"), "{}", stdout(&out));
    assert_eq!(ws.report()["exit_code"], 1);

    // 1 NO-GO by --baseline alone: every rule passes, but the GO run, archived on the server,
    // was significantly more accurate on the same cases (the server's paired test).
    let baseline = go_run.to_string();
    let out = bakeoff(
        with_server(
            &ws.arg("wrong.toml"),
            &ws.arg("lenient.toml"),
            &["--baseline", &baseline],
        ),
        Some(&api.token),
    )
    .await;
    assert_eq!(code(&out), 1, "{}: {}{}", app.backend, stdout(&out), stderr(&out));
    let report = ws.report();
    assert_eq!(report["candidates"][0]["verdict"], "GO", "{report}");
    assert_eq!(report["candidates"][0]["baseline"]["regression"], true, "{report}");
    assert_eq!(report["baseline_run"], go_run, "{report}");
    assert!(ws.junit().contains("significantly"), "{}", ws.junit());
    // Against itself there is no regression: GO.
    let out = bakeoff(
        with_server(
            &ws.arg("right.toml"),
            &ws.arg("lenient.toml"),
            &["--baseline", &baseline],
        ),
        Some(&api.token),
    )
    .await;
    assert_eq!(code(&out), 0, "{}: {}{}", app.backend, stdout(&out), stderr(&out));
    assert_eq!(ws.report()["candidates"][0]["baseline"]["regression"], false);

    // 2 INCONCLUSIVE: a rule the run does not measure (an endpoint probe) is not decided.
    let out = bakeoff(with_server("main", &ws.arg("unmeasured.toml"), &[]), Some(&api.token)).await;
    assert_eq!(code(&out), 2, "{}: {}{}", app.backend, stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("verdict: INCONCLUSIVE"), "{}", stdout(&out));
    assert_eq!(ws.report()["exit_code"], 2);

    // 3: an unknown name, a missing token and a viewer's token change nothing on the server.
    let runs = app.store.count_runs().await.unwrap();
    let candidates = app.store.list_candidates().await.unwrap().len();
    let out = bakeoff(with_server("nobody", "accuracy", &[]), Some(&api.token)).await;
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("nobody"), "{}", stderr(&out));
    let out = bakeoff(with_server(&ws.arg("right.toml"), "accuracy", &[]), None).await;
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("BAKEOFF_TOKEN"), "{}", stderr(&out));
    let viewer = Api::new(&app, "reader", Role::Viewer).await;
    let out = bakeoff(with_server(&ws.arg("down.toml"), "accuracy", &[]), Some(&viewer.token)).await;
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("403"), "{}", stderr(&out));
    assert_eq!(app.store.count_runs().await.unwrap(), runs);
    assert_eq!(app.store.list_candidates().await.unwrap().len(), candidates);
    // The token never appears in what the command prints.
    assert!(!stderr(&out).contains(&viewer.token) && !stdout(&out).contains(&viewer.token));

    // 3: a baseline the server does not have is refused before anything is uploaded or run.
    let runs = app.store.count_runs().await.unwrap();
    let out = bakeoff(
        with_server(&ws.arg("right.toml"), "accuracy", &["--baseline", "999999"]),
        Some(&api.token),
    )
    .await;
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("999999"), "{}", stderr(&out));
    assert_eq!(app.store.count_runs().await.unwrap(), runs);

    // 4: an unreachable server is a run error.
    let mut args = ws.start_args(&ws.arg("right.toml"), "accuracy", &[]);
    args.extend(["--server".to_string(), "http://127.0.0.1:1".to_string()]);
    let out = bakeoff(args, Some(&api.token)).await;
    assert_eq!(code(&out), 4, "{}{}", stdout(&out), stderr(&out));
}
