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
//!
//! Tokens per chunk (ITL, TPOT and decode read them) are attributed exactly where that is cheap
//! (`per_chunk`): one a chunk when the server's total equals the number of chunks; else the
//! cumulative text at each chunk boundary is counted and a chunk's tokens are the difference of
//! two prefixes — at most `MAX_PREFIX_COUNTS` prefixes per distinct answer (evenly spaced
//! boundaries of a longer stream, proportional to o200k within each group); a record stored
//! without its boundaries falls back to o200k proportions. The method is stored with the count.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};

use crate::cancel::Cancel;
use crate::domain::candidate::{Candidate, CandidateSpec, Secret, TokenizeEndpoint, TokenizeKind};
use crate::domain::run::{
    ChunkAttribution, MAX_PREFIX_COUNTS, ServerTokenCount, UncountedRecord, apportion, attribute_total,
};
use crate::error::EngineError;
use crate::store::DynStore;
use crate::tokens::tokenizer::prefix_ends;
use crate::wire::failure::{error_message, excerpt};
use crate::wire::provider::auth_header;

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
        if let Some(why) = crate::domain::candidate::origin_refused(&spec.base_url) {
            return Err(TokenizeError(format!("the base URL {why}")));
        }
        // No redirect is followed: the key goes to the candidate's own server and nowhere else.
        let http = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(Duration::from_secs(10))
            .timeout(CALL_TIMEOUT)
            .pool_max_idle_per_host(IN_FLIGHT)
            .redirect(reqwest::redirect::Policy::none())
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
        self.count_text(text, false).await
    }

    /// `count`, where a prefix of an answer may hold no token (leading whitespace).
    async fn count_text(&self, text: &str, may_be_empty: bool) -> Result<u32, TokenizeError> {
        if text.is_empty() {
            return Ok(0);
        }
        let n = self.raw_count(text).await?.saturating_sub(self.added);
        if n == 0 && !may_be_empty {
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
/// gives up after `GIVE_UP_AFTER` consecutive failures; then attributes each record's tokens to
/// its chunks (`per_chunk`). Returns the counts of records whose every text was counted, how
/// many records were not, and the first problem.
async fn count_records(
    tokenizer: &ServerTokenizer,
    records: &[UncountedRecord],
    cancel: &Cancel,
) -> (Vec<ServerTokenCount>, usize, Option<String>) {
    let whole: Vec<&str> = records
        .iter()
        .flat_map(|r| [Some(r.output.as_str()), r.reasoning.as_deref()])
        .flatten()
        .collect();
    let (counted, mut first_error) = count_texts(tokenizer, whole, false, cancel).await;
    let count_of = |text: &str| {
        if text.is_empty() {
            Some(0)
        } else {
            counted.get(text).copied()
        }
    };
    let mut totals: Vec<Option<(u32, Option<u32>)>> = Vec::with_capacity(records.len());
    for r in records {
        let output = count_of(&r.output);
        let reasoning = r.reasoning.as_deref().map(count_of);
        totals.push(match (output, reasoning) {
            (Some(o), None) => Some((o, None)),
            (Some(o), Some(Some(reasoning))) => Some((o.saturating_add(reasoning), Some(reasoning))),
            _ => None,
        });
    }
    // The chunk boundaries still to be counted: records whose total is not one a chunk.
    let plans: Vec<Option<PrefixPlan<'_>>> = records
        .iter()
        .zip(&totals)
        .map(|(r, t)| t.and_then(|(total, _)| PrefixPlan::of(r, total)))
        .collect();
    let prefixes: Vec<&str> = plans
        .iter()
        .flatten()
        .flat_map(|p| p.texts.iter().flat_map(|&(a, b)| [a, b]))
        .collect();
    let (prefix_counts, prefix_error) = count_texts(tokenizer, prefixes, true, cancel).await;
    if first_error.is_none() {
        first_error = prefix_error;
    }
    let describe = tokenizer.describe();
    let mut counts = Vec::with_capacity(records.len());
    let mut failed = 0;
    for ((r, total), plan) in records.iter().zip(totals).zip(plans) {
        let Some((output_tokens, reasoning_tokens)) = total else {
            failed += 1;
            continue;
        };
        let counted = |text: &str| {
            if text.is_empty() {
                Some(0)
            } else {
                prefix_counts.get(text).copied()
            }
        };
        counts.push(ServerTokenCount {
            record_id: r.record_id,
            output_tokens,
            reasoning_tokens,
            tokenizer: describe.clone(),
            chunks: per_chunk(r, output_tokens, plan.as_ref(), &counted),
        });
    }
    (counts, failed, first_error)
}

/// Counts each distinct non-empty text once, `IN_FLIGHT` calls at a time; stops after
/// `GIVE_UP_AFTER` consecutive failures or when cancelled.
async fn count_texts<'a>(
    tokenizer: &ServerTokenizer,
    all: Vec<&'a str>,
    may_be_empty: bool,
    cancel: &Cancel,
) -> (HashMap<&'a str, u32>, Option<String>) {
    let mut texts: Vec<&str> = Vec::new();
    let mut seen: HashMap<&str, ()> = HashMap::new();
    for text in all {
        if !text.is_empty() && seen.insert(text, ()).is_none() {
            texts.push(text);
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
            calls.push(tokenizer.count_text(text, may_be_empty));
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
    (counted, first_error)
}

/// The chunk boundaries of one record whose prefixes are counted: after chunk `ends[j]`, the
/// (reasoning, answer) text so far is `texts[j]`.
struct PrefixPlan<'a> {
    ends: Vec<usize>,
    texts: Vec<(&'a str, &'a str)>,
}

impl<'a> PrefixPlan<'a> {
    /// None when no prefix needs counting: no or one chunk, a total of one token a chunk, or no
    /// stored boundaries.
    fn of(r: &'a UncountedRecord, total: u32) -> Option<PrefixPlan<'a>> {
        let n = r.chunks;
        if n <= 1 || u64::from(total) == n as u64 || r.chunk_text.len() != n {
            return None;
        }
        let reasoning = r.reasoning.as_deref().unwrap_or("");
        let bytes = prefix_ends(reasoning, &r.output, &r.chunk_text);
        // Boundaries after chunks 0..n-1 (the last prefix is the whole text, counted already):
        // all of them, or MAX_PREFIX_COUNTS evenly spaced.
        let inner = n - 1;
        let ends: Vec<usize> = if inner <= MAX_PREFIX_COUNTS {
            (0..inner).collect()
        } else {
            let mut e: Vec<usize> = (1..=MAX_PREFIX_COUNTS)
                .map(|j| j * n / (MAX_PREFIX_COUNTS + 1) - 1)
                .collect();
            e.dedup();
            e
        };
        let texts = ends
            .iter()
            .map(|&i| {
                let (rb, cb) = bytes[i];
                (&reasoning[..rb], &r.output[..cb])
            })
            .collect();
        Some(PrefixPlan { ends, texts })
    }
}

/// Tokens per chunk of one record with server total `total` (see the module comment); None
/// when the record has no chunks.
fn per_chunk(
    r: &UncountedRecord,
    total: u32,
    plan: Option<&PrefixPlan<'_>>,
    counted: &dyn Fn(&str) -> Option<u32>,
) -> Option<(Vec<u32>, ChunkAttribution)> {
    let n = r.chunks;
    if n == 0 {
        return None;
    }
    let weights: Vec<u32> = if r.chunk_weights.len() == n {
        r.chunk_weights.iter().map(|&w| w.max(1)).collect()
    } else {
        vec![1; n]
    };
    let fallback = || Some(attribute_total(total, &weights));
    let Some(plan) = plan else {
        return fallback();
    };
    let mut prefix = Vec::with_capacity(plan.ends.len());
    for &(reasoning, answer) in &plan.texts {
        match (counted(reasoning), counted(answer)) {
            (Some(a), Some(b)) => prefix.push(a.saturating_add(b)),
            _ => return fallback(),
        }
    }
    // Prefix counts never fall and never pass the total (a tokenizer merging across a boundary
    // can make a prefix count one more than the tokens it holds).
    let mut at = 0u32;
    for p in prefix.iter_mut() {
        *p = (*p).clamp(at, total);
        at = *p;
    }
    let mut counts = vec![0u32; n];
    let (mut start, mut before) = (0usize, 0u32);
    for (&end, &p) in plan.ends.iter().zip(&prefix).chain(std::iter::once((&(n - 1), &total))) {
        let group = &weights[start..=end];
        for (k, c) in apportion(p - before, group).into_iter().zip(&mut counts[start..=end]) {
            *c = k;
        }
        start = end + 1;
        before = p;
    }
    let how = if plan.ends.len() == n - 1 {
        ChunkAttribution::ServerPrefixes
    } else {
        ChunkAttribution::ServerPrefixesGrouped
    };
    Some((counts, how))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uncounted(output: &str, chunk_text: Vec<(u32, u32)>, weights: Vec<u32>) -> UncountedRecord {
        UncountedRecord {
            record_id: 1,
            output: output.into(),
            reasoning: None,
            chunks: weights.len(),
            chunk_text,
            chunk_weights: weights,
        }
    }

    /// Counts a text as its words (the test's "server tokenizer").
    fn words(text: &str) -> Option<u32> {
        Some(text.split_whitespace().count() as u32)
    }

    #[test]
    fn chunks_get_one_token_each_when_the_totals_agree_and_prefix_differences_otherwise() {
        // Four one-word chunks; o200k gave them 1, 2, 0→1, 1.
        let text = "alpha betagamma delta epsilon";
        let r = uncounted(text, vec![(0, 5), (0, 10), (0, 6), (0, 8)], vec![1, 2, 1, 1]);
        assert!(PrefixPlan::of(&r, 4).is_none(), "one a chunk: no prefix to count");
        assert_eq!(
            per_chunk(&r, 4, None, &words),
            Some((vec![1, 1, 1, 1], ChunkAttribution::OnePerChunk))
        );
        // Chunks of 1, 3 and 2 words: the prefixes say so exactly.
        let text = "a b c d e f";
        let r = uncounted(text, vec![(0, 1), (0, 6), (0, 4)], vec![1, 1, 1]);
        let plan = PrefixPlan::of(&r, 6).unwrap();
        assert_eq!(plan.texts, vec![("", "a"), ("", "a b c d")]);
        assert_eq!(
            per_chunk(&r, 6, Some(&plan), &words),
            Some((vec![1, 3, 2], ChunkAttribution::ServerPrefixes))
        );
        // Without boundaries: o200k proportions, and said so.
        let bare = uncounted(text, vec![], vec![1, 1, 1]);
        assert!(PrefixPlan::of(&bare, 6).is_none());
        assert_eq!(
            per_chunk(&bare, 6, None, &words),
            Some((vec![2, 2, 2], ChunkAttribution::O200kProportional))
        );
        // A failed prefix count falls back the same way.
        assert_eq!(
            per_chunk(&r, 6, Some(&plan), &|_| None),
            Some((vec![2, 2, 2], ChunkAttribution::O200kProportional))
        );
    }

    #[test]
    fn long_streams_are_counted_at_a_bounded_number_of_boundaries() {
        // 100 chunks of two words each: at most MAX_PREFIX_COUNTS prefixes, still exact here
        // because every chunk is alike.
        let text = "w ".repeat(200);
        let r = uncounted(&text, vec![(0, 4); 100], vec![1; 100]);
        let plan = PrefixPlan::of(&r, 200).unwrap();
        assert_eq!(plan.ends.len(), MAX_PREFIX_COUNTS);
        let (counts, how) = per_chunk(&r, 200, Some(&plan), &words).unwrap();
        assert_eq!(how, ChunkAttribution::ServerPrefixesGrouped);
        assert_eq!(counts.iter().sum::<u32>(), 200);
        assert!(counts.iter().all(|&k| k == 2), "{counts:?}");
    }

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
