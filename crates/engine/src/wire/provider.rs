//! Dispatch by provider kind: builds a candidate's request, picks its stream decoder, parses
//! its whole response and writes its credential header, each through the provider's own
//! module (`openai`, `anthropic`) and in the shapes of `protocol`.
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::failure::{Failure, classify_stream_error, excerpt};
use super::protocol::{Completion, PreparedRequest, RequestParams, StreamDecoder, is_error_object, parse_json_object};
use super::{anthropic, openai, responses, tools};
use crate::domain::candidate::{CandidateSpec, HeaderText, ProviderKind, Secret};
use crate::domain::evalset::{EvalCase, EvalSetFile};
use crate::domain::run::ErrorClass;

/// Body keys the engine owns: `extra_body` may not change them, or the measurement would lie
/// (e.g. `"stream": false` inside a streamed run).
const ENGINE_OWNED_KEYS: [&str; 7] = [
    "model",
    "messages",
    "prompt",
    "system",
    "stream",
    "stream_options",
    "input",
];

/// Builds the request for one case. Fails (class `Other`) only when the key cannot be put in a
/// header; the key itself is never part of the message.
pub fn prepare(
    spec: &CandidateSpec,
    key: Option<&Secret>,
    file: &EvalSetFile,
    case: &EvalCase,
    params: &RequestParams,
) -> Result<PreparedRequest, Failure> {
    let (path, mut body) = match spec.provider {
        ProviderKind::OpenAiChat | ProviderKind::AzureOpenAi => (
            "chat/completions",
            openai::chat_body(spec, &file.messages_for(case), params),
        ),
        ProviderKind::OpenAiCompletions => (
            "completions",
            openai::completions_body(spec, &file.prompt_text_for(case), params),
        ),
        ProviderKind::Anthropic => ("messages", anthropic::body(spec, &file.messages_for(case), params)),
        ProviderKind::OpenAiResponses => ("responses", responses::body(spec, &file.messages_for(case), params)),
    };
    merge_extra_body(&mut body, &spec.extra_body);
    // A tool case's own tools win over any the candidate's extra body sets.
    tools::add_tools(spec.provider, &mut body, case);
    tools::add_response_format(spec.provider, &mut body, case);
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let accept = if params.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static(accept));
    if let Some(key) = key {
        let (name, value) = auth_header(spec.provider, key).ok_or_else(|| {
            Failure::new(
                ErrorClass::Other,
                "the API key contains characters that are not allowed in an HTTP header",
            )
        })?;
        headers.insert(name, value);
    }
    if spec.provider == ProviderKind::Anthropic {
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(anthropic::API_VERSION),
        );
    }
    // The candidate's own headers (a secret one's value marked sensitive, as the key is).
    for h in &spec.wire.headers {
        let secret = matches!(h.value, HeaderText::Secret(_));
        let (Ok(name), Ok(mut value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_str(h.value.expose()),
        ) else {
            return Err(Failure::new(
                ErrorClass::Other,
                format!("the header {} cannot be sent as it is stored", h.name),
            ));
        };
        value.set_sensitive(secret);
        headers.insert(name, value);
    }
    Ok(PreparedRequest {
        url: endpoint_url(&spec.base_url, path),
        headers,
        body: Bytes::from(Value::Object(body).to_string()),
        stream: params.stream,
        session: None,
    })
}

/// `path` under the base URL, before its query (an Azure deployment's `?api-version=…`).
pub fn endpoint_url(base_url: &str, path: &str) -> String {
    let (base, query) = match base_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (base_url, None),
    };
    let base = base.trim_end_matches('/');
    match query {
        Some(q) => format!("{base}/{path}?{q}"),
        None => format!("{base}/{path}"),
    }
}

fn merge_extra_body(body: &mut Map<String, Value>, extra: &Map<String, Value>) {
    for (k, v) in extra {
        if !ENGINE_OWNED_KEYS.contains(&k.as_str()) {
            body.insert(k.clone(), v.clone());
        }
    }
}

pub fn stream_decoder(kind: ProviderKind) -> Box<dyn StreamDecoder> {
    match kind {
        ProviderKind::OpenAiChat | ProviderKind::AzureOpenAi => Box::new(openai::Decoder::chat()),
        ProviderKind::OpenAiCompletions => Box::new(openai::Decoder::completions()),
        ProviderKind::Anthropic => Box::new(anthropic::Decoder),
        ProviderKind::OpenAiResponses => Box::new(responses::Decoder),
    }
}

/// Parses a non-streamed 2xx body.
pub fn parse_completion(kind: ProviderKind, body: &str) -> Result<Completion, Failure> {
    let json = parse_json_object(body).map_err(|_| {
        Failure::new(
            ErrorClass::NonJsonResponse,
            format!("response is not JSON: {}", excerpt(body)),
        )
    })?;
    if is_error_object(&json) {
        return Err(classify_stream_error(&json, body));
    }
    match kind {
        ProviderKind::OpenAiChat | ProviderKind::AzureOpenAi => Ok(openai::parse_chat(&json)),
        ProviderKind::OpenAiCompletions => Ok(openai::parse_completions(&json)),
        ProviderKind::Anthropic => Ok(anthropic::parse_message(&json)),
        ProviderKind::OpenAiResponses => responses::parse_response(&json),
    }
}

/// The header that carries `key` for `provider` (Anthropic's `x-api-key`, Azure's `api-key`,
/// otherwise a bearer token), marked sensitive so it never reaches a log; None when the key
/// holds characters an HTTP header cannot carry.
pub fn auth_header(provider: ProviderKind, key: &Secret) -> Option<(HeaderName, HeaderValue)> {
    let (name, value) = match provider {
        ProviderKind::Anthropic => (HeaderName::from_static("x-api-key"), key.expose().to_string()),
        ProviderKind::AzureOpenAi => (HeaderName::from_static("api-key"), key.expose().to_string()),
        _ => (reqwest::header::AUTHORIZATION, format!("Bearer {}", key.expose())),
    };
    let mut value = HeaderValue::from_str(&value).ok()?;
    value.set_sensitive(true);
    Some((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::candidate::{Conditions, Pricing};
    use crate::domain::run::RunConfig;
    use serde_json::json;

    pub(crate) fn spec(provider: ProviderKind) -> CandidateSpec {
        CandidateSpec {
            name: "c".into(),
            provider,
            base_url: "http://h:1/v1/".into(),
            model: "m".into(),
            api_key: Some(Secret::new("sk-test")),
            api_key_env: None,
            max_tokens: Some(10),
            temperature: Some(0.9),
            extra_body: Map::new(),
            conditions: Conditions::default(),
            pricing: Pricing::default(),
            claimed: None,
            notes: None,
            tokenize: None,
            tls_ca_file: None,
            wire: Default::default(),
            metrics_url: None,
            gpu_metrics_url: None,
            metrics_keep: Vec::new(),
            gpu_count: None,
            gpu_kind: None,
            gpu_hour_price: None,
        }
    }

    fn evalset() -> EvalSetFile {
        EvalSetFile::parse(
            "t.jsonl",
            r#"{"bakeoff_evalset":1,"name":"s","task":"classification","system":"Be brief.","prompt":"Label: {{text}}","max_tokens":20}
{"id":"a","vars":{"text":"good"},"expected":"positive"}"#,
        )
        .unwrap()
    }

    fn body_of(r: &PreparedRequest) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn parameters_follow_run_then_evalset_then_candidate() {
        let file = evalset();
        let s = spec(ProviderKind::OpenAiChat);
        let run = RunConfig {
            max_tokens: None,
            temperature: None,
            ..RunConfig::default()
        };
        let p = RequestParams::resolve(&run, &file.header, &s);
        assert_eq!((p.max_tokens, p.temperature), (Some(20), Some(0.9)));
        let run = RunConfig {
            max_tokens: Some(5),
            temperature: Some(0.0),
            ..RunConfig::default()
        };
        let p = RequestParams::resolve(&run, &file.header, &s);
        assert_eq!((p.max_tokens, p.temperature), (Some(5), Some(0.0)));
    }

    #[test]
    fn openai_chat_request_streams_with_usage_and_bearer_auth() {
        let file = evalset();
        let mut s = spec(ProviderKind::OpenAiChat);
        s.extra_body = json!({"top_p": 0.5, "stream": false, "model": "other"})
            .as_object()
            .unwrap()
            .clone();
        let params = RequestParams {
            max_tokens: Some(20),
            temperature: Some(0.2),
            stream: true,
        };
        let r = prepare(&s, s.api_key.as_ref(), &file, &file.cases[0], &params).unwrap();
        assert_eq!(r.url, "http://h:1/v1/chat/completions");
        assert_eq!(r.headers["authorization"], "Bearer sk-test");
        assert!(r.headers["authorization"].is_sensitive());
        assert!(!format!("{:?}", r.headers).contains("sk-test"));
        assert_eq!(
            body_of(&r),
            json!({
                "model": "m",
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Label: good"}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 20,
                "temperature": 0.2,
                "top_p": 0.5,
            })
        );
    }

    #[test]
    fn openai_completions_request_sends_the_flattened_prompt() {
        let file = evalset();
        let s = spec(ProviderKind::OpenAiCompletions);
        let params = RequestParams {
            max_tokens: None,
            temperature: None,
            stream: false,
        };
        let r = prepare(&s, None, &file, &file.cases[0], &params).unwrap();
        assert_eq!(r.url, "http://h:1/v1/completions");
        assert!(r.headers.get("authorization").is_none());
        assert_eq!(
            body_of(&r),
            json!({"model": "m", "prompt": "Be brief.\n\nLabel: good", "stream": false})
        );
    }

    #[test]
    fn anthropic_request_has_its_headers_a_separate_system_and_a_max_tokens() {
        let file = evalset();
        let s = spec(ProviderKind::Anthropic);
        let params = RequestParams {
            max_tokens: None,
            temperature: Some(0.0),
            stream: true,
        };
        let r = prepare(&s, s.api_key.as_ref(), &file, &file.cases[0], &params).unwrap();
        assert_eq!(r.url, "http://h:1/v1/messages");
        assert_eq!(r.headers["x-api-key"], "sk-test");
        assert_eq!(r.headers["anthropic-version"], anthropic::API_VERSION);
        assert!(r.headers.get("authorization").is_none());
        assert_eq!(
            body_of(&r),
            json!({
                "model": "m",
                "system": "Be brief.",
                "messages": [{"role": "user", "content": "Label: good"}],
                "max_tokens": anthropic::DEFAULT_MAX_TOKENS,
                "temperature": 0.0,
                "stream": true,
            })
        );
    }

    #[test]
    fn a_tool_case_sends_its_tools_in_each_providers_shape() {
        let file = EvalSetFile::parse(
            "t.jsonl",
            r#"{"bakeoff_evalset":1,"name":"t","task":"generation","prompt":"{{q}}"}
{"id":"a","vars":{"q":"Weather?"},"tools":[{"name":"get_weather","description":"W","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],"tool_choice":"required","expected_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}}]}"#,
        )
        .unwrap();
        let params = RequestParams {
            max_tokens: None,
            temperature: None,
            stream: true,
        };
        let mut s = spec(ProviderKind::OpenAiChat);
        s.extra_body = json!({"tools": []}).as_object().unwrap().clone();
        let body = body_of(&prepare(&s, None, &file, &file.cases[0], &params).unwrap());
        assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(body["tool_choice"], "required");
        let s = spec(ProviderKind::Anthropic);
        let body = body_of(&prepare(&s, None, &file, &file.cases[0], &params).unwrap());
        assert_eq!(body["tools"][0]["input_schema"]["properties"]["city"]["type"], "string");
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        // Not a tool case: no tools key at all.
        let plain = body_of(&prepare(&s, None, &evalset(), &evalset().cases[0], &params).unwrap());
        assert!(plain.get("tools").is_none());
    }

    #[test]
    fn azure_goes_to_the_deployment_with_its_api_version_and_api_key() {
        let file = evalset();
        let mut s = spec(ProviderKind::AzureOpenAi);
        s.base_url = "https://r.openai.azure.com/openai/deployments/gpt4o?api-version=2024-10-21".into();
        let params = RequestParams {
            max_tokens: Some(5),
            temperature: None,
            stream: true,
        };
        let r = prepare(&s, s.api_key.as_ref(), &file, &file.cases[0], &params).unwrap();
        assert_eq!(
            r.url,
            "https://r.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(r.headers["api-key"], "sk-test");
        assert!(r.headers["api-key"].is_sensitive());
        assert!(r.headers.get("authorization").is_none());
        assert_eq!(body_of(&r)["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn responses_requests_send_input_and_max_output_tokens() {
        let file = evalset();
        let s = spec(ProviderKind::OpenAiResponses);
        let params = RequestParams {
            max_tokens: Some(7),
            temperature: Some(0.0),
            stream: true,
        };
        let r = prepare(&s, s.api_key.as_ref(), &file, &file.cases[0], &params).unwrap();
        assert_eq!(r.url, "http://h:1/v1/responses");
        assert_eq!(r.headers["authorization"], "Bearer sk-test");
        assert_eq!(
            body_of(&r),
            json!({
                "model": "m",
                "input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Label: good"}],
                "stream": true,
                "store": false,
                "max_output_tokens": 7,
                "temperature": 0.0,
            })
        );
    }

    #[test]
    fn custom_headers_are_sent_and_secret_ones_marked_sensitive() {
        use crate::domain::candidate::CustomHeader;
        let file = evalset();
        let mut s = spec(ProviderKind::OpenAiChat);
        s.wire.headers = vec![
            CustomHeader {
                name: "X-Team".into(),
                value: HeaderText::Plain("search".into()),
            },
            CustomHeader {
                name: "X-Gateway-Token".into(),
                value: HeaderText::Secret(Secret::new("gw-secret-123")),
            },
        ];
        let params = RequestParams {
            max_tokens: None,
            temperature: None,
            stream: true,
        };
        let r = prepare(&s, s.api_key.as_ref(), &file, &file.cases[0], &params).unwrap();
        assert_eq!(r.headers["x-team"], "search");
        assert_eq!(r.headers["x-gateway-token"], "gw-secret-123");
        assert!(r.headers["x-gateway-token"].is_sensitive() && !r.headers["x-team"].is_sensitive());
        assert!(!format!("{:?}", r.headers).contains("gw-secret"));
    }

    #[test]
    fn a_key_that_cannot_be_a_header_fails_without_showing_it() {
        let file = evalset();
        let s = spec(ProviderKind::OpenAiChat);
        let bad = Secret::new("sk-abc\nInjected: 1");
        let params = RequestParams {
            max_tokens: None,
            temperature: None,
            stream: true,
        };
        let f = prepare(&s, Some(&bad), &file, &file.cases[0], &params).unwrap_err();
        assert!(!f.detail.contains("sk-abc"));
    }

    #[test]
    fn non_streamed_bodies_parse_or_classify() {
        let ok = r#"{"choices":[{"message":{"content":"hi","reasoning_content":"hmm"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#;
        let c = parse_completion(ProviderKind::OpenAiChat, ok).unwrap();
        assert_eq!((c.content.as_str(), c.reasoning.as_str()), ("hi", "hmm"));
        assert_eq!(c.usage.unwrap().output_tokens, Some(5));
        let html = parse_completion(ProviderKind::OpenAiChat, "<html>login</html>").unwrap_err();
        assert_eq!(html.class, ErrorClass::NonJsonResponse);
        let err = parse_completion(ProviderKind::OpenAiChat, r#"{"error":{"message":"boom"}}"#).unwrap_err();
        assert_eq!(err.class, ErrorClass::HttpServerError);
    }
}
