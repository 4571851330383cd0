//! Operability probes: short HTTP checks of a candidate's endpoint, each bounded in time, each
//! ending pass / fail / not applicable with its evidence (request, status, body excerpt,
//! timing). Requests are built exactly as a run builds them (`wire::provider::prepare`), so the
//! credential header is the same — and, as in a run, it is never written into any evidence.
mod cancel;
mod discovery;
mod prober;
mod requests;

use std::time::Duration;

use tokio::time::Instant;

use crate::domain::candidate::CandidateSpec;
use crate::domain::operability::ProbeReport;
use prober::{Prober, ms, redact};

/// How the probes run.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// Longest any one probe may take (each HTTP exchange is bounded by it).
    pub timeout: Duration,
    /// An invalid parameter must be refused within this.
    pub quick_error: Duration,
    /// Streams opened and abandoned by the cancel probe.
    pub cancel_streams: usize,
    /// max_tokens of the abandoned streams (long enough that a server generating for nobody
    /// holds its capacity noticeably).
    pub abandoned_max_tokens: u32,
    /// Context window assumed when neither the server nor the candidate states one.
    pub default_context_length: u32,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            timeout: Duration::from_secs(10),
            quick_error: Duration::from_secs(5),
            cancel_streams: 8,
            abandoned_max_tokens: 256,
            default_context_length: 32_768,
        }
    }
}

/// Runs every probe against `spec`, one after the other (the cancel probe compares timings, so
/// nothing else of ours may load the endpoint meanwhile). Never fails: an unreachable endpoint
/// fails its probes with the transport error as evidence.
pub async fn run_probes(spec: &CandidateSpec, options: &ProbeOptions) -> ProbeReport {
    let started = Instant::now();
    let mut p = Prober::new(spec, options);
    let mut results = Vec::new();
    let (models, context) = p.models().await;
    results.push(models);
    results.push(p.health().await);
    results.push(p.metrics().await);
    let (usage, streamed) = p.usage_in_stream().await;
    results.push(usage);
    let (max_tokens, whole) = p.max_tokens().await;
    results.push(max_tokens);
    results.push(p.invalid_param().await);
    results.push(p.overlong_prompt(context).await);
    results.push(p.cancel_frees_capacity().await);
    results.push(p.rate_limit_headers(&[&streamed, &whole]));
    results.push(p.model_field(&[&streamed, &whole]));
    results.push(p.version_headers());
    // Belt and braces: whatever a server echoed back, no stored string holds the key or a
    // secret header's value.
    let secrets: Vec<_> = p.key.iter().chain(spec.wire.secrets()).cloned().collect();
    for r in &mut results {
        for key in secrets.iter().map(Some) {
            r.summary = redact(&r.summary, key);
            let ev = &mut r.evidence;
            ev.request = redact(&ev.request, key);
            ev.excerpt = redact(&ev.excerpt, key);
            for n in &mut ev.notes {
                *n = redact(n, key);
            }
        }
    }
    ProbeReport {
        results,
        provenance: p.provenance,
        base_url: spec.base_url.clone(),
        model: spec.model.clone(),
        elapsed_ms: ms(started.elapsed()),
    }
}

#[cfg(test)]
mod tests {
    use super::prober::{models_in, root_url, with_field, with_prompt};
    use bytes::Bytes;
    use serde_json::Value;

    #[test]
    fn root_strips_the_api_version() {
        assert_eq!(root_url("http://h:1/v1"), "http://h:1");
        assert_eq!(root_url("http://h:1/v1/"), "http://h:1");
        assert_eq!(root_url("http://h:1/api"), "http://h:1/api");
    }

    #[test]
    fn bodies_are_rewritten_in_place() {
        let chat = Bytes::from(
            r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"x"}],"max_tokens":1}"#,
        );
        let v: Value = serde_json::from_slice(&with_prompt(&chat, "long")).unwrap();
        assert_eq!(v["messages"][1]["content"], "long");
        assert_eq!(v["messages"][0]["content"], "s");
        let v: Value = serde_json::from_slice(&with_field(&chat, "max_tokens", serde_json::json!(-1))).unwrap();
        assert_eq!(v["max_tokens"], -1);
        let completions = Bytes::from(r#"{"model":"m","prompt":"x"}"#);
        let v: Value = serde_json::from_slice(&with_prompt(&completions, "long")).unwrap();
        assert_eq!(v["prompt"], "long");
    }

    #[test]
    fn model_fields_of_openai_and_anthropic_shapes() {
        assert_eq!(models_in(&serde_json::json!({"model": "a"})), vec!["a"]);
        assert_eq!(
            models_in(&serde_json::json!({"type": "message_start", "message": {"model": "b"}})),
            vec!["b"]
        );
        assert!(models_in(&serde_json::json!({"choices": []})).is_empty());
    }
}
