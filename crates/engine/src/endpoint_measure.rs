//! One measurement from start to figures, shared by `bakeoff measure` and `bakeoff calibrate`:
//! the candidate, workload and run are stored (in memory, or in the app's database so the run
//! shows in the archive), executed by the same executor as every run, and summarised with the
//! domain's calibers. Also: synthetic fixed-length workloads and automatic provenance.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::cancel::Cancel;
use crate::domain::calibers::{HarnessReport, RunFigures, run_figures};
use crate::domain::candidate::{CandidateSpec, ProviderKind};
use crate::domain::credentials::NewCandidate;
use crate::domain::evalset::EvalSetFile;
use crate::domain::evalset::{PROMPT_BIN_TAG, prompt_bin};
use crate::domain::run::{NewRun, RequestRecord, RunConfig, RunStatus};
use crate::run::executor::execute;
use crate::store::DynStore;
use crate::tokens::tokenizer::{CANONICAL_TOKENIZER, synthetic_prompt};

/// What to measure.
#[derive(Debug, Clone)]
pub struct MeasureSpec {
    /// Checked like every stored candidate (`domain::credentials`).
    pub candidate: NewCandidate,
    pub evalset: EvalSetFile,
    pub config: RunConfig,
    pub run_name: String,
}

/// A finished measurement.
#[derive(Debug, Clone)]
pub struct MeasureOutcome {
    pub run_id: i64,
    pub candidate_id: i64,
    pub status: RunStatus,
    pub error: Option<String>,
    pub figures: RunFigures,
    pub harness: Option<HarnessReport>,
    pub events: Vec<EventLine>,
    pub records: Vec<RequestRecord>,
}

/// A run event as exported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventLine {
    /// Unix milliseconds.
    pub at_ms: i64,
    pub level: String,
    pub message: String,
}

/// Stores the candidate, eval set and run in `store`, executes the run and computes its figures.
/// The candidate's name is made unique in the store by a suffix when taken.
pub async fn measure(store: &DynStore, spec: MeasureSpec, cancel: Cancel) -> anyhow::Result<MeasureOutcome> {
    let mut candidate = spec.candidate.clone();
    let base_name = candidate.spec().name.clone();
    let mut candidate_id = None;
    for n in 1..=100 {
        match store.create_candidate(&candidate).await {
            Ok(id) => {
                candidate_id = Some(id);
                break;
            }
            Err(crate::store::StoreError::Conflict(_)) => {
                candidate = candidate.renamed(format!("{base_name} #{}", n + 1));
            }
            Err(e) => return Err(e).context("storing the candidate"),
        }
    }
    let candidate_id = candidate_id.context("no free candidate name after 100 tries")?;
    let version_id = store
        .save_evalset_version(&spec.evalset)
        .await
        .context("storing the workload as an eval set")?;
    let run_id = store
        .create_run(&NewRun {
            name: spec.run_name.clone(),
            evalset_version_id: version_id,
            candidate_ids: vec![candidate_id],
            config: spec.config.clone(),
        })
        .await
        .context("storing the run")?;
    let status = match execute(store.clone(), run_id, cancel).await {
        Ok(status) => status,
        Err(e) => {
            let message = e.to_string();
            store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await?;
            store
                .append_run_event(run_id, "error", &format!("failed: {message}"))
                .await?;
            RunStatus::Failed
        }
    };
    let run = store.get_run(run_id).await?.context("the run disappeared")?;
    let records = store.list_request_records(run_id).await?;
    let bins: BTreeMap<&str, Option<u32>> = spec
        .evalset
        .cases
        .iter()
        .map(|c| (c.id.as_str(), prompt_bin(&c.tags)))
        .collect();
    let figures = run_figures(&records, &spec.config, candidate_id, |case| {
        bins.get(case).copied().flatten()
    });
    let harness = store.get_run_harness(run_id).await?;
    let events = store
        .list_run_events(run_id)
        .await?
        .into_iter()
        .map(|e| EventLine {
            at_ms: e.at.0,
            level: e.level,
            message: e.message,
        })
        .collect();
    Ok(MeasureOutcome {
        run_id,
        candidate_id,
        status,
        error: run.error,
        figures,
        harness,
        events,
        records,
    })
}

/// A workload of synthetic prompts of exactly `bin` o200k tokens each (the user message; the
/// server's own tokenizer and chat template will count a little differently), `per_bin`
/// different prompts per bin so no prefix cache can answer them, tagged `prompt_tokens:N`.
pub fn synthetic_evalset(bins: &[u32], per_bin: usize, max_tokens: u32) -> anyhow::Result<EvalSetFile> {
    let header = serde_json::json!({
        "bakeoff_evalset": 1,
        "name": format!("synthetic prompts {} tokens (o200k), max_tokens {max_tokens}",
            bins.iter().map(u32::to_string).collect::<Vec<_>>().join("/")),
        "task": "generation",
        "description": format!("Synthetic prompts of exact {CANONICAL_TOKENIZER} lengths, made by bakeoff measure."),
        "prompt": "{{text}}",
        "max_tokens": max_tokens,
        "temperature": 0,
    });
    let mut text = header.to_string();
    for &bin in bins {
        for i in 0..per_bin.max(1) {
            let seed = u64::from(bin) << 32 | i as u64;
            let case = serde_json::json!({
                "id": format!("p{bin}-{i:04}"),
                "vars": {"text": synthetic_prompt(bin.max(8), seed)},
                "tags": [format!("{PROMPT_BIN_TAG}{bin}")],
            });
            text.push('\n');
            text.push_str(&case.to_string());
        }
    }
    Ok(EvalSetFile::parse("synthetic workload", &text)?)
}

/// Facts about the server, collected before the run: response headers that name software, and
/// `GET {base}/models` (the entry for the model when listed, else the whole answer).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Provenance {
    pub bakeoff_version: String,
    pub host: String,
    pub cores: u32,
    /// Headers such as `server`, `x-powered-by`, `via`, `openai-version` (values kept short).
    pub server_headers: BTreeMap<String, String>,
    pub models: Option<serde_json::Value>,
    /// Why `models` is missing, if it is.
    pub models_error: Option<String>,
}

/// Headers worth keeping: they name the serving software or the path to it.
const PROVENANCE_HEADERS: [&str; 8] = [
    "server",
    "x-powered-by",
    "via",
    "openai-version",
    "openai-organization",
    "anthropic-organization-id",
    "x-served-by",
    "x-ratelimit-limit-requests",
];

pub async fn provenance(spec: &CandidateSpec) -> Provenance {
    let mut out = Provenance {
        bakeoff_version: crate::VERSION.to_string(),
        host: crate::run::harness::host_name(),
        cores: crate::run::harness::cores(),
        ..Provenance::default()
    };
    let url = format!("{}/models", spec.base_url.trim_end_matches('/'));
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some((name, value)) = spec
        .resolve_api_key()
        .and_then(|key| crate::wire::provider::auth_header(spec.provider, &key))
    {
        headers.insert(name, value);
    }
    if spec.provider == ProviderKind::Anthropic {
        headers.insert(
            "anthropic-version",
            reqwest::header::HeaderValue::from_static(crate::wire::anthropic::API_VERSION),
        );
    }
    let fetched = if crate::wire::client::never_tls(&spec.base_url) {
        get_plain(&url, headers).await
    } else {
        get_with_reqwest(&url, headers).await
    };
    let (status, response_headers, body) = match fetched {
        Ok(answer) => answer,
        Err(detail) => {
            out.models_error = Some(format!("GET {url}: {detail}"));
            return out;
        }
    };
    for name in PROVENANCE_HEADERS {
        if let Some(v) = response_headers.get(name).and_then(|v| v.to_str().ok()) {
            out.server_headers
                .insert(name.to_string(), v.chars().take(200).collect());
        }
    }
    if !status.is_success() {
        out.models_error = Some(format!("GET {url}: HTTP {status}"));
        return out;
    }
    match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(value) => {
            let entry = value
                .get("data")
                .and_then(|d| d.as_array())
                .and_then(|list| {
                    list.iter()
                        .find(|m| m.get("id").and_then(|i| i.as_str()) == Some(&spec.model))
                })
                .cloned();
            out.models = Some(entry.unwrap_or(value));
        }
        Err(e) => out.models_error = Some(format!("GET {url}: not JSON ({e})")),
    }
    out
}

type Answer = (reqwest::StatusCode, reqwest::header::HeaderMap, String);

/// Provenance's request never waits long and follows no redirect: the key goes to the
/// candidate's own server and nowhere else.
const PROVENANCE_TIMEOUT: Duration = Duration::from_secs(10);

async fn get_with_reqwest(url: &str, headers: reqwest::header::HeaderMap) -> Result<Answer, String> {
    let client = reqwest::Client::builder()
        .timeout(PROVENANCE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    let response = client
        .get(url)
        .headers(headers)
        .send()
        .await
        .map_err(|e| crate::wire::failure::classify_transport(&e).detail)?;
    let (status, headers) = (response.status(), response.headers().clone());
    Ok((status, headers, response.text().await.unwrap_or_default()))
}

/// A plain-http GET through hyper alone: a reqwest client built for it would load the system's
/// CA bundle (native-tls does so even for an http URL), the largest part of a short
/// measurement's start-up CPU.
async fn get_plain(url: &str, headers: reqwest::header::HeaderMap) -> Result<Answer, String> {
    use http_body_util::{BodyExt, Empty};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let mut request = reqwest::Url::parse(url)
        .map_err(|e| e.to_string())
        .and_then(|u| {
            hyper::Request::get(u.as_str())
                .body(Empty::new())
                .map_err(|e| e.to_string())
        })?;
    *request.headers_mut() = headers;
    let exchange = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts.status, parts.headers, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(PROVENANCE_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {} s", PROVENANCE_TIMEOUT.as_secs()))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::tokenizer::count;

    #[test]
    fn synthetic_workloads_have_exact_lengths_and_bins() {
        let file = synthetic_evalset(&[16, 64], 3, 32).unwrap();
        assert_eq!(file.cases.len(), 6);
        for case in &file.cases {
            let bin = prompt_bin(&case.tags).unwrap();
            assert_eq!(count(&file.prompt_text_for(case)), bin, "{}", case.id);
        }
        assert_eq!(file.header.max_tokens, Some(32));
        let prompts: std::collections::HashSet<String> = file.cases.iter().map(|c| file.prompt_text_for(c)).collect();
        assert_eq!(prompts.len(), 6, "every prompt differs");
    }
}
