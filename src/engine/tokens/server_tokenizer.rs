//! Output tokens counted by the candidate's own tokenize endpoint (llama.cpp's and vLLM's
//! `/tokenize`, llama-cpp-python's `/extras/tokenize`), for streams that carried no `usage`.
//!
//! Never on the hot path and never while a server is measured: `count_run` is called once every
//! candidate's measured load has ended (two candidates may share a server), before the run is
//! marked finished, and again when a run is resumed (records already counted are skipped). The
//! counts are stored beside the records (`record_token_counts`; records are append-only) and
//! every read applies them with the source `server-tokenizer`.
//!
//! A failing endpoint never loses or alters a record: the record keeps its own count (o200k,
//! source `tokenizer`, or chunks) and the run's event log says why, once per candidate.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};

use crate::domain::candidate::{Candidate, CandidateSpec, Secret, TokenizeEndpoint, TokenizeKind};
use crate::domain::run::{ServerTokenCount, UncountedRecord};
use crate::engine::cancel::Cancel;
use crate::engine::error::EngineError;
use crate::engine::wire::failure::{error_message, excerpt};
use crate::engine::wire::provider::auth_header;
use crate::store::DynStore;

/// Tokenize calls in flight at once: the server is idle by now, but it is somebody's server.
const IN_FLIGHT: usize = 4;
/// One call's limit (the text is at most one answer long).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Consecutive failed calls after which the rest of a candidate's records are not tried.
const GIVE_UP_AFTER: u32 = 5;

/// Why the endpoint could not count a text: a one-line, key-free message naming the URL and
/// the shape expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct TokenizeError(pub String);

/// A client for one candidate's declared tokenize endpoint.
pub struct ServerTokenizer {
    http: reqwest::Client,
    kind: TokenizeKind,
    url: String,
    model: String,
    auth: Option<(HeaderName, HeaderValue)>,
    key: Option<Secret>,
    /// Tokens the endpoint adds to any text (e.g. a BOS), measured by tokenizing "" once.
    added: u32,
}

impl ServerTokenizer {
    /// None when the candidate declares no tokenize endpoint.
    pub fn new(spec: &CandidateSpec) -> Result<Option<Self>, TokenizeError> {
        let Some(endpoint) = &spec.tokenize else {
            return Ok(None);
        };
        Self::for_endpoint(spec, endpoint).map(Some)
    }

    fn for_endpoint(spec: &CandidateSpec, endpoint: &TokenizeEndpoint) -> Result<Self, TokenizeError> {
        let url = endpoint
            .url(&spec.base_url)
            .ok_or_else(|| TokenizeError(format!("base URL {:?} is not a URL", spec.base_url)))?;
        let http = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(Duration::from_secs(10))
            .timeout(CALL_TIMEOUT)
            .pool_max_idle_per_host(IN_FLIGHT)
            .build()
            .map_err(|e| TokenizeError(format!("building the HTTP client for {url}: {e}")))?;
        let key = spec.resolve_api_key();
        // The same header the candidate's requests carry (the endpoint is on the same server).
        let auth = key.as_ref().and_then(|k| auth_header(spec.provider, k));
        Ok(ServerTokenizer {
            http,
            kind: endpoint.kind,
            url,
            model: spec.model.clone(),
            auth,
            key,
            added: 0,
        })
    }

    /// "vllm /tokenize at http://host:8000/tokenize": what counted, for events and the store.
    pub fn describe(&self) -> String {
        format!("{} tokenize endpoint {}", self.kind.as_str(), self.url)
    }

    /// Measures the tokens the endpoint adds to every text (tokenizing "" should give none; a
    /// server that always prepends BOS gives one), and checks the endpoint answers in its kind's
    /// shape before any record is counted.
    pub async fn calibrate(&mut self) -> Result<(), TokenizeError> {
        self.added = self.raw_count("").await?;
        if self.added > 8 {
            return Err(TokenizeError(format!(
                "POST {} counts {} tokens in an empty text: not a plain tokenize endpoint",
                self.url, self.added
            )));
        }
        Ok(())
    }

    /// Tokens of `text` under the served model's tokenizer, without added special tokens.
    pub async fn count(&self, text: &str) -> Result<u32, TokenizeError> {
        if text.is_empty() {
            return Ok(0);
        }
        let n = self.raw_count(text).await?.saturating_sub(self.added);
        if n == 0 {
            return Err(TokenizeError(format!(
                "POST {} counted 0 tokens in a non-empty text",
                self.url
            )));
        }
        Ok(n)
    }

    async fn raw_count(&self, text: &str) -> Result<u32, TokenizeError> {
        let mut request = self
            .http
            .post(&self.url)
            .header(CONTENT_TYPE, "application/json")
            .body(request_body(self.kind, &self.model, text).to_string());
        if let Some((name, value)) = &self.auth {
            request = request.header(name.clone(), value.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.redacted(format!("POST {}: {}", self.url, without_url(&e))))?;
        let status = response.status().as_u16();
        let body = response
            .text()
            .await
            .map_err(|e| self.redacted(format!("POST {}: reading the answer: {}", self.url, without_url(&e))))?;
        parse_answer(self.kind, status, &body).map_err(|problem| self.redacted(format!("POST {} {problem}", self.url)))
    }

    /// Removes the key wherever a server echoed it back.
    fn redacted(&self, message: String) -> TokenizeError {
        match &self.key {
            Some(k) if !k.expose().is_empty() => TokenizeError(message.replace(k.expose(), "****")),
            _ => TokenizeError(message),
        }
    }
}

/// A reqwest error without the URL it repeats (the message names it once already).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" ({url})"), "").replace(url.as_str(), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The JSON body each kind of server expects. Special tokens are not added where the API lets
/// us say so (llama.cpp, vLLM); llama-cpp-python may prepend BOS, which `calibrate` measures.
pub fn request_body(kind: TokenizeKind, model: &str, text: &str) -> serde_json::Value {
    match kind {
        TokenizeKind::LlamaCpp => serde_json::json!({"content": text, "add_special": false}),
        TokenizeKind::Vllm => serde_json::json!({"model": model, "prompt": text, "add_special_tokens": false}),
        TokenizeKind::LlamaCppPython => serde_json::json!({"input": text, "model": model}),
    }
}

/// The token count in one answer, or what is wrong with it (completing "POST <url> …").
pub fn parse_answer(kind: TokenizeKind, status: u16, body: &str) -> Result<u32, String> {
    let expected = || format!("expected {} ({} kind)", kind.shape(), kind.as_str());
    if status == 404 || status == 405 {
        return Err(format!(
            "answered HTTP {status}: no tokenize endpoint there; {}. Check the candidate's tokenize kind and path",
            expected()
        ));
    }
    if !(200..300).contains(&status) {
        let shown = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .as_ref()
            .and_then(error_message)
            .unwrap_or_else(|| excerpt(body));
        return Err(format!("answered HTTP {status}: {shown}"));
    }
    let json: serde_json::Value = serde_json::from_str(body).map_err(|_| {
        format!(
            "answered something that is not JSON ({}); {}",
            excerpt(body),
            expected()
        )
    })?;
    let tokens = json.get("tokens").and_then(|t| t.as_array()).map(Vec::len);
    let count = json.get("count").and_then(|c| c.as_u64());
    let n = match (kind, tokens, count) {
        (TokenizeKind::Vllm, Some(t), Some(c)) if t as u64 != c => {
            return Err(format!("answered \"count\": {c} beside {t} \"tokens\"; {}", expected()));
        }
        (TokenizeKind::Vllm, _, Some(c)) => c,
        (_, Some(t), _) => t as u64,
        _ => {
            let keys: Vec<&str> = json
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            return Err(format!(
                "answered JSON without a \"tokens\" array (keys: {}); {}. Is this a {} server?",
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys.join(", ")
                },
                expected(),
                kind.as_str()
            ));
        }
    };
    u32::try_from(n).map_err(|_| format!("answered an impossible count {n}"))
}

/// Before any load: checks that each declared endpoint answers in its kind's shape (one call,
/// tokenizing an empty text), so a wrong declaration shows in the run's events while the run can
/// still be cancelled and the candidate fixed. Counting still happens after the load.
pub async fn preflight(store: &DynStore, run_id: i64, candidates: &[Candidate]) -> Result<(), EngineError> {
    for candidate in candidates {
        let name = &candidate.spec.name;
        let checked = match ServerTokenizer::new(&candidate.spec) {
            Ok(None) => continue,
            Ok(Some(mut t)) => t.calibrate().await.map(|()| t.describe()),
            Err(e) => Err(e),
        };
        let (level, message) = match checked {
            Ok(describe) => (
                "info",
                format!(
                    "{name}: the {describe} answers; output tokens of streams without usage will be counted there \
                     after the measured load (source `server-tokenizer`)"
                ),
            ),
            Err(e) => (
                "warn",
                format!(
                    "{name}: tokenize endpoint check before the load failed: {e}. Unless it answers after the load, \
                     output tokens keep bakeoff's own count (source `tokenizer`, o200k); cancel the run to fix the \
                     candidate's tokenize kind or path"
                ),
            ),
        };
        store.append_run_event(run_id, level, &message).await?;
    }
    Ok(())
}

/// Counts every uncounted record of every candidate of the run that declares a tokenize
/// endpoint. Call only when no candidate is being measured. Errors are the store's only; an
/// endpoint's failure is logged in the run's events (once per candidate) and leaves the
/// records' own counts in place.
pub async fn count_run(
    store: &DynStore,
    run_id: i64,
    candidates: &[Candidate],
    cancel: &Cancel,
) -> Result<(), EngineError> {
    for candidate in candidates {
        if cancel.is_cancelled() {
            break;
        }
        count_candidate(store, run_id, candidate, cancel).await?;
    }
    Ok(())
}

async fn count_candidate(
    store: &DynStore,
    run_id: i64,
    candidate: &Candidate,
    cancel: &Cancel,
) -> Result<(), EngineError> {
    let name = &candidate.spec.name;
    let Some(endpoint) = &candidate.spec.tokenize else {
        return Ok(());
    };
    let records = store.uncounted_records(run_id, candidate.id).await?;
    if records.is_empty() {
        return Ok(());
    }
    let fallback = |why: &str| {
        format!(
            "{name}: output tokens of {} record(s) NOT counted by the {} tokenize endpoint ({why}); they keep \
             bakeoff's own count (source `tokenizer`, o200k) or the chunk count",
            records.len(),
            endpoint.kind.as_str()
        )
    };
    let mut tokenizer = match ServerTokenizer::new(&candidate.spec) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(()),
        Err(e) => {
            store.append_run_event(run_id, "warn", &fallback(&e.0)).await?;
            return Ok(());
        }
    };
    if let Err(e) = tokenizer.calibrate().await {
        store.append_run_event(run_id, "warn", &fallback(&e.0)).await?;
        return Ok(());
    }
    let started = Instant::now();
    let (counts, failed, first_error) = count_records(&tokenizer, &records, cancel).await;
    let stored = store.save_server_token_counts(run_id, &counts).await?;
    if stored > 0 {
        let added = match tokenizer.added {
            0 => String::new(),
            n => format!("; {n} special token(s) it adds to every text not counted"),
        };
        let msg = format!(
            "{name}: output tokens of {stored} record(s) counted by the {} in {:.2} s (source `server-tokenizer`{added})",
            tokenizer.describe(),
            started.elapsed().as_secs_f64()
        );
        store.append_run_event(run_id, "info", &msg).await?;
    }
    if failed > 0 {
        let why = first_error.unwrap_or_else(|| "stopped".to_string());
        let msg = format!(
            "{name}: {failed} record(s) NOT counted by the {} (first problem: {why}); they keep bakeoff's own \
             count (source `tokenizer`, o200k) or the chunk count",
            tokenizer.describe()
        );
        store.append_run_event(run_id, "warn", &msg).await?;
    }
    Ok(())
}

/// Counts each distinct text once (answers repeat: "yes", "no"…), a few calls at a time, and
/// gives up after `GIVE_UP_AFTER` consecutive failures. Returns the counts of records whose every
/// text was counted, how many records were not, and the first problem.
async fn count_records(
    tokenizer: &ServerTokenizer,
    records: &[UncountedRecord],
    cancel: &Cancel,
) -> (Vec<ServerTokenCount>, usize, Option<String>) {
    let mut texts: Vec<&str> = Vec::new();
    let mut seen: HashMap<&str, ()> = HashMap::new();
    for r in records {
        for text in [Some(r.output.as_str()), r.reasoning.as_deref()].into_iter().flatten() {
            if !text.is_empty() && seen.insert(text, ()).is_none() {
                texts.push(text);
            }
        }
    }
    let mut first_error = None;
    let mut counted: HashMap<&str, u32> = HashMap::with_capacity(texts.len());
    let mut consecutive_failures = 0;
    // A few calls at a time, in plain batches (no stream combinators: the run's future must
    // stay `Send` for `tokio::spawn`).
    for batch in texts.chunks(IN_FLIGHT) {
        if cancel.is_cancelled() {
            first_error.get_or_insert_with(|| "the run was cancelled".to_string());
            break;
        }
        if consecutive_failures >= GIVE_UP_AFTER {
            break;
        }
        let mut calls = Vec::with_capacity(batch.len());
        for text in batch {
            calls.push(tokenizer.count(text));
        }
        let results = futures_util::future::join_all(calls).await;
        for (text, result) in batch.iter().zip(results) {
            match result {
                Ok(n) => {
                    counted.insert(text, n);
                    consecutive_failures = 0;
                }
                Err(e) => {
                    first_error.get_or_insert(e.0);
                    consecutive_failures += 1;
                }
            }
        }
    }
    let count_of = |text: &str| {
        if text.is_empty() {
            Some(0)
        } else {
            counted.get(text).copied()
        }
    };
    let describe = tokenizer.describe();
    let mut counts = Vec::with_capacity(records.len());
    let mut failed = 0;
    for r in records {
        let output = count_of(&r.output);
        let reasoning = r.reasoning.as_deref().map(count_of);
        match (output, reasoning) {
            (Some(o), None) => counts.push(ServerTokenCount {
                record_id: r.record_id,
                output_tokens: o,
                reasoning_tokens: None,
                tokenizer: describe.clone(),
            }),
            (Some(o), Some(Some(reasoning))) => counts.push(ServerTokenCount {
                record_id: r.record_id,
                output_tokens: o.saturating_add(reasoning),
                reasoning_tokens: Some(reasoning),
                tokenizer: describe.clone(),
            }),
            _ => failed += 1,
        }
    }
    (counts, failed, first_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_sends_its_own_shape() {
        assert_eq!(
            request_body(TokenizeKind::LlamaCpp, "m", "hi"),
            serde_json::json!({"content": "hi", "add_special": false})
        );
        assert_eq!(
            request_body(TokenizeKind::Vllm, "m", "hi"),
            serde_json::json!({"model": "m", "prompt": "hi", "add_special_tokens": false})
        );
        assert_eq!(
            request_body(TokenizeKind::LlamaCppPython, "m", "hi"),
            serde_json::json!({"input": "hi", "model": "m"})
        );
    }

    #[test]
    fn answers_are_read_in_their_kinds_shape_and_anything_else_is_named() {
        use TokenizeKind::*;
        assert_eq!(parse_answer(LlamaCpp, 200, r#"{"tokens":[1,2,3]}"#), Ok(3));
        assert_eq!(
            parse_answer(
                LlamaCpp,
                200,
                r#"{"tokens":[{"id":1,"piece":"a"},{"id":2,"piece":"b"}]}"#
            ),
            Ok(2)
        );
        assert_eq!(
            parse_answer(Vllm, 200, r#"{"count":4,"max_model_len":2048,"tokens":[1,2,3,4]}"#),
            Ok(4)
        );
        assert_eq!(parse_answer(Vllm, 200, r#"{"count":4}"#), Ok(4));
        assert!(
            parse_answer(Vllm, 200, r#"{"count":5,"tokens":[1]}"#)
                .unwrap_err()
                .contains("count")
        );
        assert_eq!(parse_answer(LlamaCppPython, 200, r#"{"tokens":[]}"#), Ok(0));
        let e = parse_answer(LlamaCppPython, 404, r#"{"detail":"Not Found"}"#).unwrap_err();
        assert!(e.contains("404") && e.contains("\"input\""), "{e}");
        let e = parse_answer(LlamaCpp, 200, r#"{"n_tokens":3}"#).unwrap_err();
        assert!(e.contains("keys: n_tokens") && e.contains("llama-cpp"), "{e}");
        let e = parse_answer(LlamaCpp, 200, "<html>hi</html>").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = parse_answer(Vllm, 400, r#"{"error":{"message":"model x does not exist"}}"#).unwrap_err();
        assert!(e.contains("400") && e.contains("model x does not exist"), "{e}");
    }
}
