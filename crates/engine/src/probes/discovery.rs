//! What the endpoint says about itself: its model list and context length, health and
//! metrics endpoints, and the rate-limit, model and version headers of its answers.
use serde_json::Value;

use super::prober::{Fetched, Prober, redact, result};
use crate::domain::candidate::ProviderKind;
use crate::domain::operability::{Evidence, ProbeKind, ProbeOutcome, ProbeResult};

impl Prober<'_> {
    /// `/v1/models` lists the model; also the context length the server states, if any.
    pub(super) async fn models(&mut self) -> (ProbeResult, Option<u32>) {
        let kind = ProbeKind::ModelsListsModel;
        if self.spec.provider == ProviderKind::AzureOpenAi && self.spec.base_url.contains("/deployments/") {
            let summary = "an Azure deployment URL serves one deployment; the resource's model list names base \
                           models, not deployments";
            return (
                result(kind, ProbeOutcome::NotApplicable, summary, Evidence::default()),
                None,
            );
        }
        let url = crate::wire::provider::endpoint_url(&self.spec.base_url, "models");
        let f = self.get(&url).await;
        let mut ev = f.evidence(self.key.as_ref());
        if !f.ok() {
            return (
                result(kind, ProbeOutcome::Fail, format!("no model list: {}", f.describe()), ev),
                None,
            );
        }
        let json: Option<Value> = serde_json::from_str(&f.body).ok();
        let entries: Vec<Value> = json
            .as_ref()
            .and_then(|j| j.get("data").or_else(|| j.get("models")))
            .and_then(|d| d.as_array())
            .cloned()
            .unwrap_or_default();
        let id_of = |e: &Value| {
            e.get("id")
                .or_else(|| e.get("name"))
                .or_else(|| e.get("model"))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let ids: Vec<String> = entries.iter().filter_map(id_of).collect();
        let entry = entries
            .iter()
            .find(|e| id_of(e).as_deref() == Some(self.spec.model.as_str()));
        let context = entry.and_then(|e| {
            [
                "max_model_len",
                "context_length",
                "context_window",
                "max_context_length",
            ]
            .iter()
            .find_map(|k| e.get(*k).and_then(Value::as_u64))
            // llama.cpp's server: `meta.n_ctx`, the context of one slot (its -c / --parallel).
            .or_else(|| e.pointer("/meta/n_ctx").and_then(Value::as_u64))
            .and_then(|n| u32::try_from(n).ok())
        });
        if let Some(c) = context {
            ev.notes
                .push(format!("the server states a context length of {c} tokens"));
        }
        let outcome = match (json.is_some(), entry.is_some()) {
            (false, _) => {
                return (result(kind, ProbeOutcome::Fail, "the model list is not JSON", ev), None);
            }
            (true, true) => result(
                kind,
                ProbeOutcome::Pass,
                format!("{} listed among {} model(s)", self.spec.model, ids.len()),
                ev,
            ),
            (true, false) => {
                let shown: Vec<&str> = ids.iter().take(10).map(String::as_str).collect();
                result(
                    kind,
                    ProbeOutcome::Fail,
                    format!(
                        "{} is not listed; the server lists {}",
                        self.spec.model,
                        if shown.is_empty() {
                            "nothing".to_string()
                        } else {
                            shown.join(", ")
                        }
                    ),
                    ev,
                )
            }
        };
        (outcome, context)
    }

    pub(super) async fn health(&mut self) -> ProbeResult {
        let kind = ProbeKind::HealthEndpoint;
        let mut urls = vec![
            format!("{}/health", self.root),
            format!("{}/healthz", self.root),
            format!("{}/health", self.base),
            format!("{}/v1/health", self.root),
            format!("{}/ping", self.root),
        ];
        urls.dedup();
        let mut tried = Vec::new();
        let mut last = Fetched::default();
        for url in urls {
            let f = self.get(&url).await;
            if f.ok() {
                let mut ev = f.evidence(self.key.as_ref());
                ev.notes.extend(tried);
                if let Some(v) = serde_json::from_str::<Value>(&f.body)
                    .ok()
                    .and_then(|j| j.get("version").and_then(|v| v.as_str()).map(str::to_string))
                {
                    self.provenance
                        .push(("health version".into(), redact(&v, self.key.as_ref())));
                }
                return result(
                    kind,
                    ProbeOutcome::Pass,
                    format!("{} answers {}", f.request, f.describe()),
                    ev,
                );
            }
            tried.push(format!("{}: {}", f.request, f.describe()));
            let unreachable = f.status.is_none();
            last = f;
            if unreachable {
                break; // the host does not answer at all: the other paths will not either
            }
        }
        let mut ev = last.evidence(self.key.as_ref());
        ev.notes = tried;
        result(kind, ProbeOutcome::Fail, "no health endpoint answered 2xx", ev)
    }

    pub(super) async fn metrics(&mut self) -> ProbeResult {
        let kind = ProbeKind::MetricsEndpoint;
        if matches!(self.spec.provider, ProviderKind::Anthropic | ProviderKind::AzureOpenAi) {
            return result(
                kind,
                ProbeOutcome::NotApplicable,
                "a hosted API (Anthropic Messages, Azure OpenAI) exposes no Prometheus endpoint",
                Evidence::default(),
            );
        }
        let url = format!("{}/metrics", self.root);
        let f = self.get(&url).await;
        let ev = f.evidence(self.key.as_ref());
        let prometheus = f
            .body
            .lines()
            .any(|l| l.starts_with("# TYPE ") || l.starts_with("# HELP "));
        match (f.ok(), prometheus) {
            (true, true) => {
                let families = f.body.lines().filter(|l| l.starts_with("# TYPE ")).count();
                // What the telemetry catalogue recognises, and the URL to declare to scrape it.
                let engines = crate::domain::telemetry::parse(&f.body)
                    .map(|e| {
                        crate::domain::telemetry::catalogue::engines_seen(e.samples.iter().map(|s| s.name.as_str()))
                    })
                    .unwrap_or_default();
                let recognised = if engines.is_empty() {
                    String::new()
                } else {
                    let names: Vec<&str> = engines.iter().map(|e| e.label()).collect();
                    format!(" ({} series recognised)", names.join(", "))
                };
                let offer = if self.spec.metrics_url.is_none() {
                    format!("; declare {url} as the candidate's server metrics URL to scrape it during runs")
                } else {
                    String::new()
                };
                result(
                    kind,
                    ProbeOutcome::Pass,
                    format!("Prometheus text with {families} metric families{recognised}{offer}"),
                    ev,
                )
            }
            (true, false) => result(
                kind,
                ProbeOutcome::Fail,
                "/metrics answers, but not in Prometheus text format",
                ev,
            ),
            (false, _) => result(kind, ProbeOutcome::Fail, format!("no /metrics: {}", f.describe()), ev),
        }
    }

    pub(super) fn rate_limit_headers(&self, seen: &[&Fetched]) -> ProbeResult {
        let kind = ProbeKind::RateLimitHeaders;
        let answered: Vec<&&Fetched> = seen.iter().filter(|f| f.status.is_some()).collect();
        let Some(first) = answered.first() else {
            return result(
                kind,
                ProbeOutcome::Fail,
                "no completion response to inspect",
                Evidence::default(),
            );
        };
        let mut names: Vec<String> = answered
            .iter()
            .flat_map(|f| f.headers.iter())
            .filter(|(name, _)| {
                let n = name.as_str();
                n.starts_with("x-ratelimit")
                    || n.starts_with("ratelimit")
                    || n.starts_with("anthropic-ratelimit")
                    || n.starts_with("x-rate-limit")
                    || n == "retry-after"
            })
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("(binary)")))
            .collect();
        names.sort();
        names.dedup();
        let mut ev = Evidence {
            request: first.request.clone(),
            status: first.status,
            ..Default::default()
        };
        if names.is_empty() {
            result(
                kind,
                ProbeOutcome::Fail,
                "no rate-limit headers: clients cannot pace themselves before a 429",
                ev,
            )
        } else {
            let summary = format!("{} rate-limit header(s)", names.len());
            ev.notes = names;
            result(kind, ProbeOutcome::Pass, summary, ev)
        }
    }

    pub(super) fn model_field(&self, seen: &[&Fetched]) -> ProbeResult {
        let kind = ProbeKind::ModelFieldMatches;
        let mut models: Vec<String> = seen.iter().flat_map(|f| f.models.iter().cloned()).collect();
        models.sort();
        models.dedup();
        let first = seen.iter().find(|f| f.status.is_some());
        let ev = Evidence {
            request: first.map(|f| f.request.clone()).unwrap_or_default(),
            status: first.and_then(|f| f.status),
            notes: models.iter().map(|m| format!("model field: {m}")).collect(),
            ..Default::default()
        };
        let wanted = &self.spec.model;
        if models.is_empty() {
            result(kind, ProbeOutcome::Fail, "no model field in the responses", ev)
        } else if models.iter().all(|m| m == wanted) {
            result(kind, ProbeOutcome::Pass, format!("responses name {wanted}"), ev)
        } else {
            let other: Vec<&str> = models.iter().filter(|m| *m != wanted).map(String::as_str).collect();
            result(
                kind,
                ProbeOutcome::Fail,
                format!("asked for {wanted}, the response names {}", other.join(", ")),
                ev,
            )
        }
    }

    pub(super) fn version_headers(&self) -> ProbeResult {
        let kind = ProbeKind::VersionHeaders;
        let ev = Evidence {
            notes: self.provenance.iter().map(|(n, v)| format!("{n}: {v}")).collect(),
            ..Default::default()
        };
        if self.provenance.is_empty() {
            result(
                kind,
                ProbeOutcome::NotApplicable,
                "no server or version header: record the serving stack by hand",
                ev,
            )
        } else {
            result(
                kind,
                ProbeOutcome::Pass,
                format!("{} provenance value(s) recorded", self.provenance.len()),
                ev,
            )
        }
    }
}
