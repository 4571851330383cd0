//! Importing a traffic log as a workload: OpenAI-style request logs, OpenTelemetry / Langfuse
//! trace exports, and Mooncake traces. By default only what replay needs is kept (arrival
//! offsets, token counts, chained prefix block ids); the prompts only with `keep_text`.
//! Tokens are counted by the caller's tokenizer (the engine's o200k), so this stays pure.
use serde_json::Value;

use super::{
    DEFAULT_BLOCK_TOKENS, Renumber, Source, WorkloadError, WorkloadFile, WorkloadHeader, WorkloadRequest,
    chained_block_hashes,
};

/// A log's format; `detect` guesses it from the first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenaiLog,
    Traces,
    Mooncake,
    /// A bakeoff workload file itself.
    Workload,
}

impl Format {
    pub const NAMES: [&'static str; 4] = ["openai", "otel", "mooncake", "workload"];

    pub fn parse(name: &str) -> Option<Format> {
        match name.trim() {
            "openai" | "openai-log" => Some(Format::OpenaiLog),
            "otel" | "langfuse" | "traces" => Some(Format::Traces),
            "mooncake" => Some(Format::Mooncake),
            "workload" | "bakeoff" => Some(Format::Workload),
            _ => None,
        }
    }

    /// The format of `text`, from its first non-empty line's fields.
    pub fn detect(text: &str) -> Format {
        let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
        let has = |k: &str| first.contains(&format!("\"{k}\""));
        if has("bakeoff_workload") {
            Format::Workload
        } else if has("hash_ids") || has("input_length") {
            Format::Mooncake
        } else if has("resourceSpans")
            || has("scopeSpans")
            || has("startTimeUnixNano")
            || has("observations")
            || has("startTime")
            || first.contains("gen_ai.")
        {
            Format::Traces
        } else {
            Format::OpenaiLog
        }
    }
}

/// How to import.
pub struct ImportOptions<'a> {
    /// The workload's name (its versions share it).
    pub name: String,
    pub description: String,
    /// Keep the prompts (an explicit choice, stated on the workload).
    pub keep_text: bool,
    /// Tokens per prefix block for logs with text (Mooncake traces state theirs: 512).
    pub block_tokens: u32,
    /// The tokenizer that counts and blocks prompt text (o200k in the engine).
    pub tokenize: &'a dyn Fn(&str) -> Vec<u32>,
}

/// One request read from a log, before offsets and ids are settled.
struct Read {
    line: usize,
    at_ms: f64,
    input_tokens: u32,
    output_tokens: u32,
    raw_blocks: Vec<u64>,
    text: Option<String>,
}

/// Imports `text` (the contents of `file`) as a workload in `format`; the first bad line is
/// reported by line and field, and nothing is returned but the error.
pub fn import(file: &str, text: &str, format: Format, options: &ImportOptions) -> Result<WorkloadFile, WorkloadError> {
    if text.len() > super::MAX_FILE_BYTES {
        return Err(WorkloadError::at(file, None, None, "file too large"));
    }
    let (source, block_tokens) = match format {
        Format::Workload => return WorkloadFile::parse(file, text),
        Format::OpenaiLog => (Source::OpenaiLog, options.block_tokens),
        Format::Traces => (Source::Traces, options.block_tokens),
        Format::Mooncake => (Source::Mooncake, DEFAULT_BLOCK_TOKENS),
    };
    let mut reads = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| WorkloadError::at(file, Some(n), None, format!("not JSON: {e}")))?;
        let bad = |field: &str, message: String| WorkloadError::at(file, Some(n), Some(field), message);
        match format {
            Format::Mooncake => reads.push(mooncake(&value, n, &bad)?),
            Format::OpenaiLog => reads.push(openai(&value, n, options, block_tokens, &bad)?),
            Format::Traces => traces(&value, n, options, block_tokens, &bad, &mut reads)?,
            Format::Workload => unreachable!(),
        }
    }
    if reads.is_empty() {
        return Err(WorkloadError::at(file, None, None, "no requests found"));
    }
    // Logs are not always in order: arrival order, ties in file order.
    reads.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
    let start = reads[0].at_ms;
    let mut ids = Renumber::default();
    let lines: Vec<usize> = reads.iter().map(|r| r.line).collect();
    let workload = WorkloadFile {
        header: WorkloadHeader {
            bakeoff_workload: super::FORMAT_VERSION,
            name: options.name.clone(),
            description: options.description.clone(),
            source,
            block_tokens,
            keeps_text: options.keep_text,
        },
        requests: reads
            .into_iter()
            .map(|r| WorkloadRequest {
                // Microsecond resolution: what a log's timestamps carry at best.
                at_ms: ((r.at_ms - start) * 1000.0).round() / 1000.0,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                blocks: ids.ids(&r.raw_blocks),
                text: r.text.filter(|_| options.keep_text),
            })
            .collect(),
    };
    workload.validate(file, &|i| lines[i], None)?;
    Ok(workload)
}

type Bad<'a> = dyn Fn(&str, String) -> WorkloadError + 'a;

fn mooncake(v: &Value, line: usize, bad: &Bad) -> Result<Read, WorkloadError> {
    let at_ms = number(v, "timestamp", bad)?;
    let input = count(v, "input_length", bad)?;
    let output = count(v, "output_length", bad)?;
    let raw_blocks = match v.get("hash_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, h)| {
                h.as_u64()
                    .ok_or_else(|| bad(&format!("hash_ids[{i}]"), "must be a whole number >= 0".into()))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("hash_ids", "must be an array of whole numbers".into())),
    };
    Ok(Read {
        line,
        at_ms,
        input_tokens: input,
        output_tokens: output,
        raw_blocks,
        text: None,
    })
}

/// `{"timestamp", "request": {…}, "response": {…}}` or a flat body with `created`/`timestamp`.
fn openai(v: &Value, line: usize, options: &ImportOptions, block: u32, bad: &Bad) -> Result<Read, WorkloadError> {
    let (request, prefix) = match v.get("request").or_else(|| v.get("body")) {
        Some(r @ Value::Object(_)) => (
            r,
            if v.get("request").is_some() {
                "request."
            } else {
                "body."
            },
        ),
        _ => (v, ""),
    };
    let at_ms = ["timestamp", "created", "created_at", "time", "start_time", "startTime"]
        .iter()
        .find_map(|k| v.get(*k).or_else(|| request.get(*k)).map(|t| (*k, t)))
        .ok_or_else(|| bad("timestamp", "missing: each line needs `timestamp` or `created`".into()))
        .and_then(|(k, t)| {
            time_ms(t).ok_or_else(|| bad(k, "must be Unix seconds or milliseconds, or an RFC 3339 time".into()))
        })?;
    let text = prompt_text(request).ok_or_else(|| {
        bad(
            &format!("{prefix}messages"),
            "missing: each request needs `messages` or `prompt`".into(),
        )
    })?;
    let tokens = (options.tokenize)(&text);
    let response = v.get("response");
    let usage = response.and_then(|r| r.get("usage")).or_else(|| v.get("usage"));
    let output = usage
        .and_then(|u| u.get("completion_tokens").or_else(|| u.get("output_tokens")))
        .and_then(Value::as_u64)
        .or_else(|| {
            ["max_completion_tokens", "max_tokens", "max_output_tokens"]
                .iter()
                .find_map(|k| request.get(*k).and_then(Value::as_u64))
        })
        .ok_or_else(|| {
            bad(
                "response.usage.completion_tokens",
                "missing: the output length comes from the logged usage or the request's max_tokens".into(),
            )
        })?;
    finish(line, at_ms, tokens, output, text, block, bad)
}

fn finish(
    line: usize,
    at_ms: f64,
    tokens: Vec<u32>,
    output: u64,
    text: String,
    block: u32,
    bad: &Bad,
) -> Result<Read, WorkloadError> {
    if tokens.is_empty() {
        return Err(bad("messages", "the prompt is empty".into()));
    }
    Ok(Read {
        line,
        at_ms,
        input_tokens: u32::try_from(tokens.len()).unwrap_or(u32::MAX),
        output_tokens: u32::try_from(output).unwrap_or(u32::MAX).max(1),
        raw_blocks: chained_block_hashes(&tokens, block),
        text: Some(text),
    })
}

/// An OTLP JSON export (`resourceSpans[].scopeSpans[].spans[]`), one flattened span, or a Langfuse
/// observation (`startTime`, `usage`/`usageDetails`); spans that are not LLM calls are skipped.
fn traces(
    v: &Value,
    line: usize,
    options: &ImportOptions,
    block: u32,
    bad: &Bad,
    out: &mut Vec<Read>,
) -> Result<(), WorkloadError> {
    if let Some(resource_spans) = v.get("resourceSpans").and_then(Value::as_array) {
        for (r, rs) in resource_spans.iter().enumerate() {
            let scopes = rs.get("scopeSpans").and_then(Value::as_array).into_iter().flatten();
            for (s, scope) in scopes.enumerate() {
                let spans = scope.get("spans").and_then(Value::as_array).into_iter().flatten();
                for (k, span) in spans.enumerate() {
                    let place = format!("resourceSpans[{r}].scopeSpans[{s}].spans[{k}].");
                    let bad = |f: &str, m: String| bad(&format!("{place}{f}"), m);
                    if let Some(read) = span_or_observation(span, line, options, block, &bad)? {
                        out.push(read);
                    }
                }
            }
        }
        return Ok(());
    }
    let items: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        _ => match v
            .get("observations")
            .or_else(|| v.get("data"))
            .and_then(Value::as_array)
        {
            Some(a) => a.iter().collect(),
            None => vec![v],
        },
    };
    for item in items {
        if let Some(read) = span_or_observation(item, line, options, block, bad)? {
            out.push(read);
        }
    }
    Ok(())
}

fn span_or_observation(
    v: &Value,
    line: usize,
    options: &ImportOptions,
    block: u32,
    bad: &Bad,
) -> Result<Option<Read>, WorkloadError> {
    let attrs = attributes(v);
    let attr = |k: &str| attrs.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let usage = v.get("usageDetails").or_else(|| v.get("usage"));
    let from_usage = |keys: &[&str]| usage.and_then(|u| keys.iter().find_map(|k| u.get(*k).and_then(as_u64)));
    let input = attr("gen_ai.usage.input_tokens")
        .or_else(|| attr("gen_ai.usage.prompt_tokens"))
        .and_then(|v| as_u64(&v))
        .or_else(|| from_usage(&["input", "promptTokens", "input_tokens", "prompt_tokens"]))
        .or_else(|| v.get("promptTokens").and_then(as_u64));
    let output = attr("gen_ai.usage.output_tokens")
        .or_else(|| attr("gen_ai.usage.completion_tokens"))
        .and_then(|v| as_u64(&v))
        .or_else(|| from_usage(&["output", "completionTokens", "output_tokens", "completion_tokens"]))
        .or_else(|| v.get("completionTokens").and_then(as_u64));
    let is_llm = input.is_some()
        || output.is_some()
        || attr("gen_ai.system").is_some()
        || attr("gen_ai.operation.name").is_some()
        || v.get("type").and_then(Value::as_str) == Some("GENERATION");
    if !is_llm {
        return Ok(None);
    }
    let (time_field, time) = ["startTimeUnixNano", "start_time", "startTime", "timestamp"]
        .iter()
        .find_map(|k| v.get(*k).map(|t| (*k, t)))
        .ok_or_else(|| bad("startTimeUnixNano", "missing: an LLM call needs its start time".into()))?;
    let at_ms = if time_field == "startTimeUnixNano" {
        as_u64(time).map(|ns| ns as f64 / 1e6)
    } else {
        time_ms(time)
    }
    .ok_or_else(|| bad(time_field, "must be a Unix time or an RFC 3339 time".into()))?;
    let output = output.ok_or_else(|| {
        bad(
            "attributes.gen_ai.usage.output_tokens",
            "missing: an LLM call needs its output tokens (`gen_ai.usage.output_tokens`, Langfuse `usage.output`)"
                .into(),
        )
    })?;
    // The prompt, where the export carries it: blocks (and a count when usage has none).
    let text = attr("gen_ai.prompt")
        .or_else(|| attr("gen_ai.input.messages"))
        .or_else(|| v.get("input").cloned())
        .and_then(|p| match p {
            Value::String(s) => serde_json::from_str::<Value>(&s)
                .ok()
                .and_then(|j| prompt_text(&serde_json::json!({ "messages": j })))
                .or(Some(s)),
            Value::Array(_) => prompt_text(&serde_json::json!({ "messages": p })),
            other => prompt_text(&other),
        })
        .filter(|t| !t.is_empty());
    match (text, input) {
        (Some(text), input) => {
            let tokens = (options.tokenize)(&text);
            let mut read = finish(line, at_ms, tokens, output, text, block, bad)?;
            // The usage is the server's count: the length replay sends; blocks cover what they can.
            if let Some(n) = input.filter(|&n| n > 0) {
                read.input_tokens = u32::try_from(n).unwrap_or(u32::MAX);
                let most = read.input_tokens.div_ceil(block) as usize;
                read.raw_blocks.truncate(most);
            }
            Ok(Some(read))
        }
        (None, Some(input)) if input > 0 => Ok(Some(Read {
            line,
            at_ms,
            input_tokens: u32::try_from(input).unwrap_or(u32::MAX),
            output_tokens: u32::try_from(output).unwrap_or(u32::MAX).max(1),
            raw_blocks: Vec::new(),
            text: None,
        })),
        _ => Err(bad(
            "attributes.gen_ai.usage.input_tokens",
            "missing: an LLM call needs its input tokens or its prompt".into(),
        )),
    }
}

/// A span's attributes as (key, value): OTLP's `[{key, value: {intValue|stringValue…}}]` or a
/// plain object.
fn attributes(v: &Value) -> Vec<(String, Value)> {
    match v.get("attributes") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|kv| {
                let key = kv.get("key")?.as_str()?.to_string();
                let value = kv.get("value")?;
                let inner = ["intValue", "stringValue", "doubleValue", "boolValue"]
                    .iter()
                    .find_map(|k| value.get(*k).cloned())
                    .unwrap_or_else(|| value.clone());
                Some((key, inner))
            })
            .collect(),
        Some(Value::Object(o)) => o.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Vec::new(),
    }
}

/// Whole numbers, also as strings (OTLP writes 64-bit integers as strings).
fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f as u64))
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

fn number(v: &Value, field: &str, bad: &Bad) -> Result<f64, WorkloadError> {
    v.get(field)
        .and_then(Value::as_f64)
        .filter(|f| f.is_finite() && *f >= 0.0)
        .ok_or_else(|| bad(field, "missing or not a number >= 0".into()))
}

fn count(v: &Value, field: &str, bad: &Bad) -> Result<u32, WorkloadError> {
    v.get(field)
        .and_then(as_u64)
        .filter(|n| (1..=u64::from(super::MAX_TOKENS_PER_REQUEST)).contains(n))
        .map(|n| n as u32)
        .ok_or_else(|| {
            bad(
                field,
                format!(
                    "missing or not a whole number from 1 to {}",
                    super::MAX_TOKENS_PER_REQUEST
                ),
            )
        })
}

/// Unix seconds (up to 1e11), milliseconds (up to 1e14) or microseconds, or RFC 3339 text; in
/// milliseconds.
fn time_ms(v: &Value) -> Option<f64> {
    if let Some(f) = v.as_f64() {
        return Some(match f {
            f if f < 1e11 => f * 1000.0,
            f if f < 1e14 => f,
            f => f / 1000.0,
        })
        .filter(|f| f.is_finite() && *f >= 0.0);
    }
    let s = v.as_str()?.trim();
    if let Ok(f) = s.parse::<f64>() {
        return time_ms(&serde_json::json!(f));
    }
    let t: jiff::Timestamp = s.parse().ok()?;
    Some(t.as_microsecond() as f64 / 1000.0)
}

/// The text a request's prompt is made of: message contents (strings or text parts) joined by
/// blank lines, or a completions `prompt`.
fn prompt_text(request: &Value) -> Option<String> {
    if let Some(messages) = request.get("messages").and_then(Value::as_array) {
        let mut parts = Vec::new();
        if let Some(system) = request.get("system") {
            parts.push(content_text(system));
        }
        for m in messages {
            parts.push(content_text(m.get("content").unwrap_or(&Value::Null)));
        }
        return Some(parts.join("\n\n"));
    }
    match request.get("prompt") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(a)) => Some(a.iter().map(content_text).collect::<Vec<_>>().join("\n\n")),
        _ => request.get("input").map(content_text),
    }
}

fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                p => p.get("text").and_then(Value::as_str).map(str::to_string),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other
            .get("text")
            .and_then(Value::as_str)
            .map_or_else(|| other.to_string(), str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per whitespace-separated word: enough to test blocks.
    fn words(text: &str) -> Vec<u32> {
        text.split_whitespace()
            .map(|w| {
                w.bytes()
                    .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
            })
            .collect()
    }

    fn options(keep_text: bool) -> ImportOptions<'static> {
        ImportOptions {
            name: "prod".into(),
            description: String::new(),
            keep_text,
            block_tokens: 2,
            tokenize: &words,
        }
    }

    #[test]
    fn openai_logs_of_both_shapes_give_lengths_offsets_and_shared_blocks() {
        let log = r#"{"timestamp":"2026-01-01T00:00:01.5Z","request":{"model":"m","messages":[{"role":"system","content":"be very brief"},{"role":"user","content":"hello"}]},"response":{"usage":{"prompt_tokens":20,"completion_tokens":7}}}
{"created":1767225600,"model":"m","messages":[{"role":"system","content":"be very brief"},{"role":"user","content":[{"type":"text","text":"bye now"}]}],"max_tokens":30}
"#;
        let w = import("log.jsonl", log, Format::detect(log), &options(false)).unwrap();
        assert_eq!(w.header.source, Source::OpenaiLog);
        assert!(!w.header.keeps_text);
        // Sorted by arrival: the flat body (00:00:00) first.
        let r: Vec<_> = w
            .requests
            .iter()
            .map(|r| (r.at_ms, r.input_tokens, r.output_tokens))
            .collect();
        assert_eq!(r, [(0.0, 5, 30), (1500.0, 4, 7)]);
        // "be very" is one shared block; then they differ.
        assert_eq!(w.requests[0].blocks[0], w.requests[1].blocks[0]);
        assert_ne!(w.requests[0].blocks[1], w.requests[1].blocks[1]);
        assert!(w.requests.iter().all(|r| r.text.is_none()));
        let kept = import("log.jsonl", log, Format::OpenaiLog, &options(true)).unwrap();
        assert!(kept.header.keeps_text);
        assert_eq!(kept.requests[1].text.as_deref(), Some("be very brief\n\nhello"));
    }

    #[test]
    fn openai_log_errors_name_the_line_and_field() {
        let log = "{\"timestamp\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":3}\n\
                   {\"timestamp\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n";
        let e = import("log.jsonl", log, Format::OpenaiLog, &options(false)).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("log.jsonl", Some(2)), "{e}");
        assert_eq!(e.field.as_deref(), Some("response.usage.completion_tokens"));
        let e = import("log.jsonl", "{\"messages\":[]}\n", Format::OpenaiLog, &options(false)).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("timestamp")), "{e}");
        let e = import("log.jsonl", "{oops\n", Format::OpenaiLog, &options(false)).unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn otel_and_langfuse_exports_give_llm_calls_only() {
        let otlp = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"chat","startTimeUnixNano":"1767225600000000000","attributes":[{"key":"gen_ai.system","value":{"stringValue":"openai"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"120"}},{"key":"gen_ai.usage.output_tokens","value":{"intValue":"40"}}]},{"name":"db","startTimeUnixNano":"1767225600100000000","attributes":[]}]}]}]}
{"type":"GENERATION","startTime":"2026-01-01T00:00:00.250Z","input":[{"role":"user","content":"one two three"}],"usage":{"input":3,"output":9}}
"#;
        assert_eq!(Format::detect(otlp), Format::Traces);
        let w = import("t.jsonl", otlp, Format::Traces, &options(false)).unwrap();
        let r: Vec<_> = w
            .requests
            .iter()
            .map(|r| (r.at_ms, r.input_tokens, r.output_tokens, r.blocks.len()))
            .collect();
        assert_eq!(r, [(0.0, 120, 40, 0), (250.0, 3, 9, 2)]);
        let bad = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"1","attributes":[{"key":"gen_ai.usage.input_tokens","value":{"intValue":"3"}}]}]}]}]}"#;
        let e = import("t.jsonl", bad, Format::Traces, &options(false)).unwrap_err();
        assert_eq!(
            e.field.as_deref(),
            Some("resourceSpans[0].scopeSpans[0].spans[0].attributes.gen_ai.usage.output_tokens"),
            "{e}"
        );
    }

    #[test]
    fn mooncake_traces_keep_their_blocks_renumbered() {
        let trace = r#"{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}
{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2366]}
"#;
        assert_eq!(Format::detect(trace), Format::Mooncake);
        let w = import("m.jsonl", trace, Format::Mooncake, &options(false)).unwrap();
        assert_eq!((w.header.block_tokens, w.requests[1].at_ms), (512, 3053.0));
        assert_eq!(w.requests[0].blocks[..3], [0, 1, 2]);
        assert_eq!(w.requests[1].blocks[12], 14);
        let e = import(
            "m.jsonl",
            &trace.replace("\"output_length\": 26", "\"output_length\": -2"),
            Format::Mooncake,
            &options(false),
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("output_length")), "{e}");
        let e = import(
            "m.jsonl",
            &trace.replace("6472", "100"),
            Format::Mooncake,
            &options(false),
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("blocks"), "{e}");
    }
}
