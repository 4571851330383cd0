//! Why an attempt failed: `Failure`, classified into `ErrorClass` from a status, a body, an
//! error inside a stream or a transport error, with a short, secret-free detail.
use crate::domain::candidate::Secret;
use crate::domain::run::ErrorClass;
use crate::domain::validation::truncate;

/// Longest `error_detail` stored with a record, in characters.
pub const DETAIL_MAX_CHARS: usize = 300;

/// A failed attempt: its class and a short, secret-free description.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub class: ErrorClass,
    pub detail: String,
}

impl Failure {
    pub fn new(class: ErrorClass, detail: impl AsRef<str>) -> Self {
        Failure {
            class,
            detail: truncate(detail.as_ref(), DETAIL_MAX_CHARS - 1),
        }
    }

    /// Removes the API key wherever a server or library echoed it back.
    pub fn redact(mut self, key: Option<&Secret>) -> Self {
        if let Some(key) = key
            && !key.expose().is_empty()
        {
            self.detail = self.detail.replace(key.expose(), "****");
        }
        self
    }
}

/// A body fragment fit for a one-line detail: whitespace collapsed.
pub fn excerpt(body: &str) -> String {
    truncate(&body.split_whitespace().collect::<Vec<_>>().join(" "), 200)
}

/// Classifies a non-2xx response from its status and (possibly partial) body.
///
/// The status decides the class (a gateway's HTML 502 is still a server error); the detail says
/// when the body was not JSON. 4xx bodies that say the prompt is too long become
/// `ContextLengthExceeded`, because that is a property of the model, not a broken request.
pub fn classify_status(status: u16, content_type: Option<&str>, body: &str) -> Failure {
    let json = serde_json::from_str::<serde_json::Value>(body).ok();
    let class = match status {
        429 => ErrorClass::RateLimited,
        400..=499 if is_context_length_error(json.as_ref(), body) => ErrorClass::ContextLengthExceeded,
        400..=499 => ErrorClass::HttpClientError,
        500..=599 => ErrorClass::HttpServerError,
        _ => ErrorClass::Other,
    };
    let what = match (&json, content_type) {
        (Some(_), _) => String::new(),
        (None, Some(ct)) => format!(" ({}, not JSON)", ct.split(';').next().unwrap_or(ct).trim()),
        (None, None) => " (not JSON)".to_string(),
    };
    let message = json.as_ref().and_then(error_message);
    let shown = message.unwrap_or_else(|| excerpt(body));
    Failure::new(class, format!("HTTP {status}{what}: {shown}"))
}

/// The `error.message` (OpenAI, Anthropic) or top-level `message`/`detail` of an error body.
pub fn error_message(json: &serde_json::Value) -> Option<String> {
    let err = json.get("error").unwrap_or(json);
    let text = err
        .get("message")
        .or_else(|| err.get("detail"))
        .and_then(|m| m.as_str())
        .or_else(|| err.as_str())?;
    Some(excerpt(text))
}

/// Whether an error body says the input does not fit the model's context window.
/// OpenAI sets `error.code = "context_length_exceeded"`; vLLM, SGLang, TGI, llama.cpp and
/// Anthropic only say so in the message.
pub fn is_context_length_error(json: Option<&serde_json::Value>, raw: &str) -> bool {
    if let Some(err) = json.and_then(|j| j.get("error")) {
        for field in ["code", "type"] {
            if err.get(field).and_then(|c| c.as_str()) == Some("context_length_exceeded") {
                return true;
            }
        }
    }
    let text = raw.to_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "prompt is too long",
        "exceeds the context",
        "exceed_context_size",
        "input is too long",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Classifies an error reported with status 200: inside a stream (`{"error": …}` from vLLM/SGLang,
/// Anthropic's `event: error`) or as a whole JSON body.
pub fn classify_stream_error(json: &serde_json::Value, raw: &str) -> Failure {
    let err = json.get("error").unwrap_or(json);
    let kind = err
        .get("type")
        .or_else(|| err.get("code"))
        .and_then(|t| t.as_str())
        .unwrap_or_default()
        .to_lowercase();
    let class = if is_context_length_error(Some(json), raw) {
        ErrorClass::ContextLengthExceeded
    } else if kind.contains("rate_limit") {
        ErrorClass::RateLimited
    } else if kind.contains("invalid_request") {
        ErrorClass::HttpClientError
    } else {
        // overloaded, api_error, server_error and anything unnamed: the server gave up.
        ErrorClass::HttpServerError
    };
    let message = error_message(json).unwrap_or_else(|| excerpt(raw));
    Failure::new(class, format!("server reported an error: {message}"))
}

/// Classifies a transport error from reqwest (connect, TLS, DNS, or the body breaking off).
pub fn classify_transport(err: &reqwest::Error) -> Failure {
    let chain = error_chain(err);
    let lower = chain.to_lowercase();
    let refused = source_io_kind(err) == Some(std::io::ErrorKind::ConnectionRefused);
    let class = if refused {
        ErrorClass::ConnectRefused
    } else if err.is_dns() {
        ErrorClass::Dns
    } else if err.is_connect() && err.is_timeout() {
        ErrorClass::ConnectTimeout
    } else if err.is_connect()
        && ["tls", "ssl", "certificate", "handshake"]
            .iter()
            .any(|w| lower.contains(w))
    {
        ErrorClass::Tls
    } else if err.is_body() || err.is_decode() {
        ErrorClass::StreamCut
    } else {
        ErrorClass::Other
    };
    Failure::new(class, chain)
}

/// "outer: inner: innermost", skipping repeats, so the root cause is visible.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

fn source_io_kind(err: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_classes() {
        let c = |status, body: &str| classify_status(status, Some("application/json"), body).class;
        assert_eq!(c(429, r#"{"error":{"message":"slow down"}}"#), ErrorClass::RateLimited);
        assert_eq!(
            c(401, r#"{"error":{"message":"bad key"}}"#),
            ErrorClass::HttpClientError
        );
        assert_eq!(c(404, "not found"), ErrorClass::HttpClientError);
        assert_eq!(c(500, "{}"), ErrorClass::HttpServerError);
        assert_eq!(c(503, ""), ErrorClass::HttpServerError);
        assert_eq!(
            c(529, r#"{"type":"error","error":{"type":"overloaded_error"}}"#),
            ErrorClass::HttpServerError
        );
    }

    #[test]
    fn context_length_errors_are_recognised_from_code_or_message() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens","type":"BadRequestError","code":400}"#;
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        for body in [openai, vllm, anthropic] {
            let f = classify_status(400, Some("application/json"), body);
            assert_eq!(f.class, ErrorClass::ContextLengthExceeded, "{body}");
        }
        let f = classify_status(400, None, r#"{"error":{"message":"temperature must be ≤ 2"}}"#);
        assert_eq!(f.class, ErrorClass::HttpClientError);
        assert_eq!(f.detail, "HTTP 400: temperature must be ≤ 2");
    }

    #[test]
    fn an_html_error_page_keeps_its_status_class_and_a_short_excerpt() {
        let page = format!(
            "<html>\r\n<head><title>502 Bad Gateway</title></head>\n<body>{}</body></html>",
            "x".repeat(2000)
        );
        let f = classify_status(502, Some("text/html; charset=utf-8"), &page);
        assert_eq!(f.class, ErrorClass::HttpServerError);
        assert!(
            f.detail
                .starts_with("HTTP 502 (text/html, not JSON): <html> <head><title>502 Bad Gateway")
        );
        assert!(f.detail.chars().count() <= DETAIL_MAX_CHARS, "{}", f.detail.len());
    }

    #[test]
    fn errors_inside_streams_are_classified() {
        let j = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        let over = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(classify_stream_error(&j(over), over).class, ErrorClass::HttpServerError);
        let rate = r#"{"type":"error","error":{"type":"rate_limit_error","message":"later"}}"#;
        assert_eq!(classify_stream_error(&j(rate), rate).class, ErrorClass::RateLimited);
        let ctx = r#"{"error":{"message":"maximum context length is 10 tokens","code":400}}"#;
        let f = classify_stream_error(&j(ctx), ctx);
        assert_eq!(f.class, ErrorClass::ContextLengthExceeded);
        assert_eq!(
            f.detail,
            "server reported an error: maximum context length is 10 tokens"
        );
    }

    #[test]
    fn details_never_carry_the_key() {
        let key = Secret::new("sk-live-abcdef");
        let f = classify_status(
            401,
            None,
            r#"{"error":{"message":"Incorrect API key provided: sk-live-abcdef"}}"#,
        )
        .redact(Some(&key));
        assert_eq!(f.detail, "HTTP 401: Incorrect API key provided: ****");
    }
}
