//! The candidates file: `bakeoff_candidates = 1` and one `[[candidate]]` table per candidate,
//! the fields of the browser's candidate form. A key is never in a file: `api_key_env` names the
//! `BAKEOFF_KEY_…` variable holding it, and an export leaves a stored key out.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{FileError, FileProblem, Located, Step, check_version, dotted, parse_toml, to_toml};
use crate::AppError;
use crate::candidates::{self, Actor, Saved, Source};
use crate::domain::candidate::{Candidate, CandidateDraft, CandidateSpec, HeaderText, KEY_ENV_PREFIX};
use crate::domain::reasoning::ReasoningInContent;
use crate::store::DynStore;

/// The format version this code reads and writes.
pub const VERSION: u32 = 1;

/// A file of candidates, e.g. `candidates.toml` beside a pipeline definition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "bakeoff candidates file",
    description = "Candidates (one model behind one endpoint each) as `bakeoff candidate import` reads and \
                   `bakeoff candidate export` writes them, in TOML. API keys are never part of the file: \
                   `api_key_env` names the environment variable (BAKEOFF_KEY_…) that holds the key."
)]
pub struct CandidatesFile {
    /// Format version; 1.
    pub bakeoff_candidates: u32,
    /// The candidates, each one `[[candidate]]` table.
    #[serde(default)]
    pub candidate: Vec<CandidateEntry>,
}

/// One candidate, with the fields of the candidate form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateEntry {
    /// Unique name; importing a file updates the stored candidate of the same name.
    pub name: String,
    /// The wire protocol.
    #[schemars(extend("enum" = ["openai-chat", "openai-completions", "anthropic", "openai-responses", "azure-openai"]))]
    pub provider: String,
    /// Base URL up to and including the API version, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// The environment variable holding the API key; must start with `BAKEOFF_KEY_`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^BAKEOFF_KEY_[A-Za-z0-9_]+$"))]
    pub api_key_env: Option<String>,
    /// max_tokens for this candidate's requests (the run's or the eval set's wins when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Extra JSON body fields merged into every request, e.g. `{ top_p = 0.9 }`.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Serving conditions the team declares (part of every figure's provenance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<ConditionsEntry>,
    /// USD per million tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<PricingEntry>,
    /// A vendor's headline figure with its caliber, checked against the measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<ClaimedEntry>,
    /// The server's own tokenize endpoint, for counting output tokens when streams carry no usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenize: Option<TokenizeEntry>,
    /// An absolute path to a PEM file of CA certificates trusted for this candidate's `https`
    /// besides the system's (an in-house server with a self-signed certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<String>,
    /// Telemetry source: the server's Prometheus endpoint, scraped during runs (absent: not
    /// scraped), e.g. `http://127.0.0.1:8000/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_url: Option<String>,
    /// Telemetry source: a GPU exporter's Prometheus endpoint (DCGM exporter or any endpoint with
    /// GPU series), e.g. `http://gpu-node:9400/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_metrics_url: Option<String>,
    /// Series kept from the scrapes beyond the ones bakeoff recognises: metric family names, or
    /// prefixes ending in `*`, e.g. `["vllm:num_requests_swapped", "vllm:spec_decode_*"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_keep: Vec<String>,
    /// Self-hosted cost: GPUs (or instances) the deployment runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<u32>,
    /// Their kind, e.g. "H100 80GB".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_kind: Option<String>,
    /// USD per GPU-hour (per instance-hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hour_price: Option<f64>,
    /// Reasoning the server leaves in the content (`<think>…</think>`): `auto` (the default)
    /// recognises a reasoning tag at the start of the content, `always` takes the content as
    /// reasoning up to a closing tag (servers whose chat template puts the opening tag in the
    /// prompt), `never` takes it all as answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["auto", "always", "never"]))]
    pub reasoning_in_content: Option<String>,
    /// Headers sent with every request, e.g. `headers = { "X-Team" = "search" }`. Secret ones (a
    /// gateway's token) are never in a file: set them on the candidate form, where they are sealed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConditionsEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub context_length: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PricingEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub input_per_mtok: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub output_per_mtok: Option<f64>,
    /// Prompt tokens read from the server's prompt cache, $ per million; omitted: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub cached_input_per_mtok: Option<f64>,
    /// Prompt tokens written to the cache (Anthropic), $ per million; omitted: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub cache_write_per_mtok: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimedEntry {
    #[schemars(range(min = 0.0))]
    pub tokens_per_second: f64,
    /// e.g. "per-stream decode", "aggregate @c=64".
    pub caliber: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenizeEntry {
    #[schemars(extend("enum" = ["llama-cpp", "vllm", "llama-cpp-python"]))]
    pub kind: String,
    /// Path on the candidate's own server; omitted: the kind's usual path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl CandidateEntry {
    /// The candidate form as this entry fills it (numbers written as the form would hold them).
    pub fn to_draft(&self) -> CandidateDraft {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let num = |v: Option<f64>| v.map(|n| n.to_string()).unwrap_or_default();
        let int = |v: Option<u32>| v.map(|n| n.to_string()).unwrap_or_default();
        let conditions = self.conditions.clone().unwrap_or_default();
        let pricing = self.pricing.clone().unwrap_or_default();
        CandidateDraft {
            name: self.name.clone(),
            provider: self.provider.clone(),
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key: String::new(),
            api_key_env: text(&self.api_key_env),
            max_tokens: int(self.max_tokens),
            temperature: num(self.temperature),
            extra_body: if self.extra_body.is_empty() {
                String::new()
            } else {
                serde_json::Value::Object(self.extra_body.clone()).to_string()
            },
            hardware: text(&conditions.hardware),
            framework: text(&conditions.framework),
            quantization: text(&conditions.quantization),
            context_length: int(conditions.context_length),
            price_input: num(pricing.input_per_mtok),
            price_output: num(pricing.output_per_mtok),
            price_cached_input: num(pricing.cached_input_per_mtok),
            price_cache_write: num(pricing.cache_write_per_mtok),
            claimed_tps: num(self.claimed.as_ref().map(|c| c.tokens_per_second)),
            claimed_caliber: self.claimed.as_ref().map(|c| c.caliber.clone()).unwrap_or_default(),
            claimed_conditions: self
                .claimed
                .as_ref()
                .and_then(|c| c.conditions.clone())
                .unwrap_or_default(),
            notes: text(&self.notes),
            tokenize_kind: self.tokenize.as_ref().map(|t| t.kind.clone()).unwrap_or_default(),
            tokenize_path: self.tokenize.as_ref().and_then(|t| t.path.clone()).unwrap_or_default(),
            tls_ca_file: text(&self.tls_ca_file),
            metrics_url: text(&self.metrics_url),
            gpu_metrics_url: text(&self.gpu_metrics_url),
            metrics_keep: self.metrics_keep.join("\n"),
            gpu_count: int(self.gpu_count),
            gpu_kind: text(&self.gpu_kind),
            gpu_hour_price: num(self.gpu_hour_price),
            reasoning_in_content: text(&self.reasoning_in_content),
            headers: self.headers.iter().map(|(k, v)| format!("{k}: {v}\n")).collect(),
            secret_headers: String::new(),
        }
    }

    /// The entry for a stored candidate, without its key.
    pub fn from_spec(spec: &CandidateSpec) -> CandidateEntry {
        let c = &spec.conditions;
        let conditions =
            (c.hardware.is_some() || c.framework.is_some() || c.quantization.is_some() || c.context_length.is_some())
                .then(|| ConditionsEntry {
                    hardware: c.hardware.clone(),
                    framework: c.framework.clone(),
                    quantization: c.quantization.clone(),
                    context_length: c.context_length,
                });
        let p = &spec.pricing;
        let pricing = (p.input_per_mtok.is_some()
            || p.output_per_mtok.is_some()
            || p.cached_input_per_mtok.is_some()
            || p.cache_write_per_mtok.is_some())
        .then_some(PricingEntry {
            input_per_mtok: p.input_per_mtok,
            output_per_mtok: p.output_per_mtok,
            cached_input_per_mtok: p.cached_input_per_mtok,
            cache_write_per_mtok: p.cache_write_per_mtok,
        });
        CandidateEntry {
            name: spec.name.clone(),
            provider: spec.provider.as_str().to_string(),
            base_url: spec.base_url.clone(),
            model: spec.model.clone(),
            api_key_env: spec.api_key_env.clone(),
            max_tokens: spec.max_tokens,
            temperature: spec.temperature,
            notes: spec.notes.clone(),
            extra_body: spec.extra_body.clone(),
            conditions,
            pricing,
            claimed: spec.claimed.as_ref().map(|c| ClaimedEntry {
                tokens_per_second: c.tokens_per_second,
                caliber: c.caliber.clone(),
                conditions: c.conditions.clone(),
            }),
            tokenize: spec.tokenize.as_ref().map(|t| TokenizeEntry {
                kind: t.kind.as_str().to_string(),
                path: Some(t.path.clone()),
            }),
            tls_ca_file: spec.tls_ca_file.clone(),
            metrics_url: spec.metrics_url.clone(),
            gpu_metrics_url: spec.gpu_metrics_url.clone(),
            metrics_keep: spec.metrics_keep.clone(),
            gpu_count: spec.gpu_count,
            gpu_kind: spec.gpu_kind.clone(),
            gpu_hour_price: spec.gpu_hour_price,
            reasoning_in_content: (spec.wire.reasoning_in_content != ReasoningInContent::Auto)
                .then(|| spec.wire.reasoning_in_content.as_str().to_string()),
            // Plain headers only: a secret one never leaves the server.
            headers: spec
                .wire
                .headers
                .iter()
                .filter_map(|h| match &h.value {
                    HeaderText::Plain(v) => Some((h.name.clone(), v.clone())),
                    HeaderText::Secret(_) => None,
                })
                .collect(),
        }
    }
}

/// Where a candidate form field is in an entry.
fn field_path(field: &str) -> Vec<Step> {
    let k = |s: &str| Step::Key(s.to_string());
    match field {
        "hardware" | "framework" | "quantization" | "context_length" => vec![k("conditions"), k(field)],
        "price_input" => vec![k("pricing"), k("input_per_mtok")],
        "price_output" => vec![k("pricing"), k("output_per_mtok")],
        "price_cached_input" => vec![k("pricing"), k("cached_input_per_mtok")],
        "price_cache_write" => vec![k("pricing"), k("cache_write_per_mtok")],
        "claimed_tps" => vec![k("claimed"), k("tokens_per_second")],
        "claimed_caliber" => vec![k("claimed"), k("caliber")],
        "claimed_conditions" => vec![k("claimed"), k("conditions")],
        "tokenize_kind" => vec![k("tokenize"), k("kind")],
        "tokenize_path" => vec![k("tokenize"), k("path")],
        other => vec![k(other)],
    }
}

/// Reads and checks a whole candidates file: every candidate valid by the form's rules, names
/// unique in the file, no key in it. Every problem is reported at once, with its line.
pub fn parse(file: &str, text: &str) -> Result<Vec<CandidateSpec>, FileError> {
    let text = text.trim_start_matches('\u{feff}');
    let located = Located::new(text);
    let candidate_path = |i: usize| vec![Step::Key("candidate".into()), Step::Index(i)];
    // Said before serde would call it an unknown field: a key in a file is refused on purpose.
    let mut problems: Vec<FileProblem> = Vec::new();
    for i in 0..located.len(&[Step::Key("candidate".into())]) {
        if located.keys(&candidate_path(i)).iter().any(|k| k == "api_key") {
            let mut path = candidate_path(i);
            path.push(Step::Key("api_key".into()));
            problems.push(FileProblem {
                line: located.line(&path),
                field: Some(dotted(&path)),
                message: format!(
                    "API keys are never read from files (they would end up in a repository); put the key in an \
                     environment variable named {KEY_ENV_PREFIX}… and write api_key_env = \"{KEY_ENV_PREFIX}…\""
                ),
            });
        }
    }
    if !problems.is_empty() {
        return Err(FileError {
            file: file.to_string(),
            problems,
        });
    }
    let parsed: CandidatesFile = parse_toml(file, text)?;
    check_version(file, &located, "bakeoff_candidates", parsed.bakeoff_candidates, VERSION)?;
    if parsed.candidate.is_empty() {
        return Err(FileError::one(
            file,
            None,
            Some("candidate".into()),
            "the file holds no [[candidate]] table",
        ));
    }
    let mut specs = Vec::new();
    for (i, entry) in parsed.candidate.iter().enumerate() {
        match entry.to_draft().validate(None) {
            Ok(spec) => {
                if specs.iter().any(|s: &CandidateSpec| s.name == spec.name) {
                    let mut path = candidate_path(i);
                    path.push(Step::Key("name".into()));
                    problems.push(FileProblem {
                        line: located.line(&path),
                        field: Some(dotted(&path)),
                        message: format!("{:?} is the name of an earlier candidate in this file", spec.name),
                    });
                }
                specs.push(spec);
            }
            Err(errors) => problems.extend(located.problems(&candidate_path(i), &errors, field_path)),
        }
    }
    if problems.is_empty() {
        Ok(specs)
    } else {
        Err(FileError {
            file: file.to_string(),
            problems,
        })
    }
}

/// The candidates as a file, without keys. Fails only for `extra_body` holding a JSON `null`,
/// which TOML cannot write.
pub fn export(candidates: &[&CandidateSpec]) -> Result<String, AppError> {
    let file = CandidatesFile {
        bakeoff_candidates: VERSION,
        candidate: candidates.iter().map(|c| CandidateEntry::from_spec(c)).collect(),
    };
    let body =
        to_toml(&file).map_err(|e| AppError::Invalid(format!("the candidates cannot be written as TOML: {e}")))?;
    Ok(format!(
        "# bakeoff candidates ({} candidate{}). API keys are never exported: set the variable each\n\
         # api_key_env names, or add the key in the browser.\n{body}",
        candidates.len(),
        if candidates.len() == 1 { "" } else { "s" }
    ))
}

/// Stores checked candidates through [`crate::candidates::save`]: a new name is created, a
/// known one updated to match the file (its stored key kept unless the candidate moves to another
/// server, which also drops a key variable the file left as it was). A file that sets or changes
/// a key variable needs an admin `actor`; then nothing of the file is stored. Returns what
/// happened to each candidate, in file order.
pub async fn import(store: &DynStore, specs: &[CandidateSpec], actor: &Actor) -> Result<Vec<Saved>, AppError> {
    let known = store.list_candidates().await?;
    let existing = |spec: &CandidateSpec| known.iter().find(|c| c.spec.name == spec.name);
    // Every candidate is checked before any is stored, so a refusal changes nothing.
    for spec in specs {
        let next = with_stored_key(spec, existing(spec));
        candidates::check_credentials(actor, existing(spec).map(|c| &c.spec), &next, false)?;
    }
    let mut out = Vec::new();
    for spec in specs {
        let before = existing(spec);
        let next = with_stored_key(spec, before);
        out.push(candidates::save(store, actor, Source::File, before, next, false).await?);
    }
    Ok(out)
}

/// A file never holds a key: an update keeps the stored one.
fn with_stored_key(spec: &CandidateSpec, before: Option<&Candidate>) -> CandidateSpec {
    let mut next = CandidateSpec {
        api_key: before.and_then(|c| c.spec.api_key.clone()),
        ..spec.clone()
    };
    // Nor a secret header: an update keeps the stored ones.
    if let Some(c) = before {
        let kept: Vec<_> = c
            .spec
            .wire
            .headers
            .iter()
            .filter(|h| {
                matches!(h.value, HeaderText::Secret(_))
                    && !next.wire.headers.iter().any(|p| p.name.eq_ignore_ascii_case(&h.name))
            })
            .cloned()
            .collect();
        next.wire.headers.extend(kept);
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"bakeoff_candidates = 1

[[candidate]]
name = "local"
provider = "openai-chat"
base_url = "http://127.0.0.1:8080/v1/"
model = "qwen"
api_key_env = "BAKEOFF_KEY_LOCAL"
temperature = 0.2
extra_body = { top_p = 0.9, stop = ["\n\n"] }

[candidate.pricing]
input_per_mtok = 0.1
output_per_mtok = 0.4

[candidate.tokenize]
kind = "llama-cpp"

[[candidate]]
name = "hosted"
provider = "anthropic"
base_url = "https://api.anthropic.com/v1"
model = "claude"
[candidate.claimed]
tokens_per_second = 120.5
caliber = "per-stream decode"
"#;

    #[test]
    fn a_file_reads_into_the_specs_the_form_would_make_and_writes_back_the_same() {
        let specs = parse("c.toml", FILE).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(specs[0].tokenize.as_ref().unwrap().path, "/tokenize");
        assert_eq!(specs[0].extra_body["top_p"], serde_json::json!(0.9));
        let text = export(&specs.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(parse("back.toml", &text).unwrap(), specs, "{text}");
        assert!(!text.contains("api_key ="), "{text}");
    }

    #[test]
    fn bad_entries_are_reported_with_line_and_field_all_at_once() {
        let bad = FILE
            .replace("temperature = 0.2", "temperature = 7")
            .replace("input_per_mtok = 0.1", "input_per_mtok = -1.0")
            .replace("model = \"claude\"", "model = \"\"");
        let e = parse("c.toml", &bad).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("c.toml:9: field `candidate[0].temperature`"), "{text}");
        assert!(
            text.contains("c.toml:13: field `candidate[0].pricing.input_per_mtok`"),
            "{text}"
        );
        assert!(
            text.contains("c.toml:23: field `candidate[1].model`: is required"),
            "{text}"
        );
        let typo = FILE.replace("temperature = 0.2", "temprature = 0.2");
        let e = parse("c.toml", &typo).unwrap_err();
        assert_eq!(e.problems[0].line, Some(9), "{e}");
        assert_eq!(e.problems[0].field.as_deref(), Some("temprature"), "{e}");
        let syntax = parse("c.toml", "bakeoff_candidates = 1\n[[candidate]\n").unwrap_err();
        assert_eq!(syntax.problems[0].line, Some(2), "{syntax}");
    }

    #[test]
    fn a_key_in_a_file_is_refused_and_names_the_env_reference_instead() {
        let with_key = FILE.replace("model = \"claude\"", "model = \"claude\"\napi_key = \"sk-ant-secret\"");
        let e = parse("c.toml", &with_key).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("c.toml:24: field `candidate[1].api_key`"), "{text}");
        assert!(text.contains("BAKEOFF_KEY_"), "{text}");
        assert!(!text.contains("sk-ant-secret"), "{text}");
        let env = FILE.replace("BAKEOFF_KEY_LOCAL", "HOME");
        assert!(parse("c.toml", &env).unwrap_err().to_string().contains("api_key_env"));
        let dup = FILE.replace("name = \"hosted\"", "name = \"local\"");
        assert!(
            parse("c.toml", &dup)
                .unwrap_err()
                .to_string()
                .contains("earlier candidate")
        );
    }
}
