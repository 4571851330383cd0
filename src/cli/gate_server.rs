//! `bakeoff run start --server URL`: the run submitted to a team server through its JSON API
//! (`/api/v1`) instead of run here. The files on the command line are read and checked here
//! first (a bad file is exit 3 before anything is sent), names are checked on the server before
//! anything is uploaded (a wrong name changes nothing), then files are uploaded (candidates and
//! profile as their TOML, the eval set as its normalised bakeoff JSONL), the run is created
//! and watched with the same progress display, and the server's verdict (`bakeoff.gate/1`, the
//! report a local run builds) is written with the same report writers and exit codes.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::gate::{
    Inputs, QUIET_EVERY, StartArgs, Stop, candidate_values, config, counts, print_summary, progress_bar, read_inputs,
    show, write_reports,
};
use crate::app::api::{Problem, RunCreate, RunStatusView};
use crate::app::gate::{Exit, GateReport};

/// How often the run's status is asked for while waiting.
const POLL_EVERY: Duration = Duration::from_millis(500);

fn run_error(error: impl Into<anyhow::Error>) -> Stop {
    Stop {
        exit: Exit::RunError,
        error: error.into(),
    }
}

/// The team server's API, called with the token.
struct Server {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Server {
    fn new(url: &str, token: &str) -> Result<Server, Stop> {
        let parsed = url::Url::parse(url.trim()).map_err(|e| config(anyhow!("--server {url:?} is not a URL ({e})")))?;
        if parsed.scheme() != "http" && parsed.scheme() != "https" {
            return Err(config(anyhow!("--server {url:?} must start with http:// or https://")));
        }
        // No redirect is followed: the token goes to --server and nowhere else.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(run_error)?;
        Ok(Server {
            base: url.trim().trim_end_matches('/').to_string(),
            token: token.to_string(),
            http,
        })
    }

    /// Sends one request and reads its JSON answer. A refusal of the input, the token or the
    /// role (4xx) is a configuration error (exit 3); an unreachable or failing server a run
    /// error (exit 4). A problem detail's words (and wrong fields) become the error's.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<T, Stop> {
        let what = format!("{method} {path}");
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some((content_type, bytes)) = body {
            request = request.header(reqwest::header::CONTENT_TYPE, content_type).body(bytes);
        }
        let response = request.send().await.map_err(|e| {
            run_error(anyhow!(
                "the server at {} could not be reached ({what}): {e}",
                self.base
            ))
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| run_error(anyhow!("reading the server's answer to {what}: {e}")))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                run_error(anyhow!(
                    "the server's answer to {what} is not what this bakeoff reads: {e}"
                ))
            });
        }
        let text = match serde_json::from_slice::<Problem>(&bytes) {
            Ok(p) => {
                let mut text = p.detail.clone();
                for f in &p.field_errors {
                    text.push_str(&format!(
                        "\n  {}{}: {}",
                        f.field,
                        f.line.map(|l| format!(" (line {l})")).unwrap_or_default(),
                        f.message
                    ));
                }
                text
            }
            Err(_) => String::from_utf8_lossy(&bytes).chars().take(300).collect(),
        };
        let error = anyhow!("the server refused {what} ({status}): {text}");
        // Wrong input, a bad token or too low a role: the pipeline's configuration.
        let configuration = status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS;
        Err(if configuration { config(error) } else { run_error(error) })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Stop> {
        self.call(Method::GET, path, None).await
    }
}

/// The id of the item named `name` in a list answer (`{"items": [{"id", "name"}, …]}`).
fn id_named(list: &serde_json::Value, name: &str) -> Option<i64> {
    list["items"]
        .as_array()?
        .iter()
        .find(|i| i["name"].as_str() == Some(name))
        .and_then(|i| i["id"].as_i64())
}

pub async fn start(args: &StartArgs, url: &str) -> Result<GateReport, Stop> {
    let Some(token) = args.token.as_deref().filter(|t| !t.trim().is_empty()) else {
        return Err(config(anyhow!(
            "--server needs an API token: set BAKEOFF_TOKEN (or pass --token; a flag is visible in process lists)"
        )));
    };
    let inputs = read_inputs(args)?;
    let server = Server::new(url, token.trim())?;

    // Names first: a wrong one stops here, before any file is uploaded.
    let named = Named::resolve(&server, args, &inputs).await?;
    // Then the files, each stored as its import command would store it.
    let candidate_ids = upload_candidates(&server, args, &inputs, &named.candidates).await?;
    let profile_id = match named.profile {
        Some(id) => id,
        None => upload_profile(&server, args).await?,
    };
    let evalset_version_id = match (named.evalset, &inputs.evalset) {
        (Some(id), _) => id,
        (None, Ok(file)) => upload_evalset(&server, file).await?,
        (None, Err(_)) => unreachable!("a name was resolved above"),
    };
    let settings = read_settings(args)?;
    let request = RunCreate {
        evalset_version_id: Some(evalset_version_id),
        candidate_ids,
        settings,
        ..RunCreate::default()
    };
    let body = serde_json::to_vec(&request).map_err(run_error)?;
    let created: RunStatusView = server
        .call(Method::POST, "/api/v1/runs", Some(("application/json", body)))
        .await?;
    let run_id = created.progress.run_id;
    eprintln!("run #{run_id} started on {}", server.base);
    watch(&server, run_id).await?;

    let mut verdict = format!("/api/v1/runs/{run_id}/verdict?profile={profile_id}");
    if let Some(b) = args.baseline {
        verdict.push_str(&format!("&baseline={b}"));
    }
    let report: GateReport = server.get(&verdict).await.map_err(|stop| Stop {
        exit: Exit::RunError,
        error: stop.error.context(format!("judging run #{run_id}")),
    })?;
    write_reports(args, &report).map_err(run_error)?;
    print_summary(&report);
    Ok(report)
}

/// What the server has under the names given: its candidates (to find them by name), the
/// profile and the eval set named (None: a file was given). A name it lacks stops the gate.
struct Named {
    candidates: serde_json::Value,
    profile: Option<i64>,
    evalset: Option<i64>,
}

impl Named {
    async fn resolve(server: &Server, args: &StartArgs, inputs: &Inputs) -> Result<Named, Stop> {
        let candidates: serde_json::Value = server.get("/api/v1/candidates").await?;
        for (value, read) in candidate_values(args).zip(&inputs.candidates) {
            if read.is_err() && id_named(&candidates, value).is_none() {
                return Err(config(anyhow!("the server has no candidate {value:?}")));
            }
        }
        let named_profile = match &inputs.profile {
            Ok(_) => None,
            Err(name) => {
                let profiles: serde_json::Value = server.get("/api/v1/profiles").await?;
                Some(
                    id_named(&profiles, name)
                        .ok_or_else(|| config(anyhow!("the server has no threshold profile {name:?}")))?,
                )
            }
        };
        let named_evalset = match &inputs.evalset {
            Ok(_) => None,
            Err(name) => {
                let sets: serde_json::Value = server.get("/api/v1/evalsets").await?;
                let set = sets["items"]
                    .as_array()
                    .and_then(|items| items.iter().find(|s| s["name"].as_str() == Some(name.as_str())))
                    .ok_or_else(|| config(anyhow!("the server has no eval set {name:?}")))?;
                Some(set["latest_version_id"].as_i64().unwrap_or_default())
            }
        };
        if let Some(b) = args.baseline {
            let run: RunStatusView = server.get(&format!("/api/v1/runs/{b}")).await?;
            if run.progress.status != "finished" {
                return Err(config(anyhow!(
                    "baseline run #{b} is {}; only a finished run can be a baseline",
                    run.progress.status
                )));
            }
        }
        Ok(Named {
            candidates,
            profile: named_profile,
            evalset: named_evalset,
        })
    }
}

/// The candidates' ids: each file uploaded (its candidates), each name looked up.
async fn upload_candidates(
    server: &Server,
    args: &StartArgs,
    inputs: &Inputs,
    candidates: &serde_json::Value,
) -> Result<Vec<i64>, Stop> {
    let values: Vec<&str> = candidate_values(args).collect();
    let mut candidate_ids: Vec<i64> = Vec::new();
    for (value, read) in values.iter().zip(&inputs.candidates) {
        let ids = match read {
            Ok(_) => {
                let text = super::files::read_text(Path::new(value)).map_err(config)?;
                let imported: serde_json::Value = server
                    .call(
                        Method::POST,
                        "/api/v1/candidates",
                        Some(("application/toml", text.into_bytes())),
                    )
                    .await?;
                imported["items"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|i| i["candidate"]["id"].as_i64())
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            }
            Err(name) => id_named(candidates, name).into_iter().collect(),
        };
        for id in ids {
            if !candidate_ids.contains(&id) {
                candidate_ids.push(id);
            }
        }
    }
    Ok(candidate_ids)
}

/// The profile file uploaded as a new version; its id.
async fn upload_profile(server: &Server, args: &StartArgs) -> Result<i64, Stop> {
    let text = super::files::read_text(Path::new(&args.profile)).map_err(config)?;
    let rationale = url::form_urlencoded::Serializer::new(String::new())
        .append_pair(
            "rationale",
            &format!("imported by bakeoff run start from {}", args.profile),
        )
        .finish();
    let imported: serde_json::Value = server
        .call(
            Method::POST,
            &format!("/api/v1/profiles?{rationale}"),
            Some(("application/toml", text.into_bytes())),
        )
        .await?;
    imported["profile"]["id"]
        .as_i64()
        .ok_or_else(|| run_error(anyhow!("the server's answer names no profile")))
}

/// The eval-set file uploaded (stored content answers its version); the version's id.
async fn upload_evalset(server: &Server, file: &crate::domain::evalset::EvalSetFile) -> Result<i64, Stop> {
    let uploaded: serde_json::Value = server
        .call(
            Method::POST,
            "/api/v1/evalsets",
            Some(("application/jsonl", file.normalised().into_bytes())),
        )
        .await?;
    uploaded["version"]["id"]
        .as_i64()
        .ok_or_else(|| run_error(anyhow!("the server's answer names no eval-set version")))
}

/// The --settings file as the API takes it (None: the defaults).
fn read_settings(args: &StartArgs) -> Result<Option<serde_json::Value>, Stop> {
    let Some(path) = &args.settings else {
        return Ok(None);
    };
    let text = super::files::read_text(path).map_err(config)?;
    toml::from_str::<serde_json::Value>(&text)
        .with_context(|| format!("reading {}", path.display()))
        .map(Some)
        .map_err(config)
}

/// Waits for the run to end on the server, showing its progress as a local run does. Ctrl-C
/// asks the server to cancel it (it then ends as cancelled: exit 4).
async fn watch(server: &Server, run_id: i64) -> Result<(), Stop> {
    let (bar, tty) = progress_bar(run_id);
    let path = format!("/api/v1/runs/{run_id}");
    let mut tick = tokio::time::interval(POLL_EVERY);
    let mut last_line = Instant::now();
    let mut cancelled = false;
    let stop = crate::app::shutdown::signal();
    tokio::pin!(stop);
    let last = loop {
        tokio::select! {
            _ = &mut stop, if !cancelled => {
                cancelled = true;
                bar.println("stopping: cancelling the run on the server (finished records are kept)");
                server.call::<RunStatusView>(Method::POST, &format!("{path}/cancel"), None).await?;
            }
            _ = tick.tick() => {
                let status: RunStatusView = server.get(&path).await?;
                // A run paused because the server's database stayed away waits for someone to
                // resume it: the pipeline reports it (exit 4, status paused) instead of waiting.
                if status.progress.terminal || status.progress.status == "paused" {
                    break status;
                }
                if tty {
                    show(&bar, &status.progress, true);
                } else if last_line.elapsed() >= QUIET_EVERY {
                    last_line = Instant::now();
                    show(&bar, &status.progress, false);
                }
            }
        }
    };
    bar.finish_and_clear();
    eprintln!("run #{run_id} {}: {}", last.progress.status, counts(&last.progress));
    Ok(())
}
