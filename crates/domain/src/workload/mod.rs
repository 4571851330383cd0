//! A **Workload** (DESIGN.md, "The workloads teams choose models for"): a versioned load
//! description beside eval sets — when each request arrived, how many tokens it sent and asked
//! for, and its prefix structure as chained block ids — imported from a team's own traffic log
//! (`import`) or generated (`generate`: shared-prefix pools), replayed by `replay`.
//!
//! The file is JSON Lines: a header line, then one request per line. A version is identified
//! by the SHA-256 of its normalised text, like an eval set's. Text is kept only when the header
//! says `keeps_text` (an explicit choice at import, shown on the workload's page).
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub mod generate;
pub mod import;
pub mod replay;
pub mod summary;

/// The file format's version, the header's `bakeoff_workload`.
pub const FORMAT_VERSION: u32 = 1;
/// Tokens per prefix block unless a source says otherwise (Mooncake's block size).
pub const DEFAULT_BLOCK_TOKENS: u32 = 512;
/// Most requests one workload holds.
pub const MAX_REQUESTS: usize = 2_000_000;
/// Longest prompt or answer a request may record, in tokens.
pub const MAX_TOKENS_PER_REQUEST: u32 = 4_000_000;

/// Where a workload came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// OpenAI-style request logs (JSONL of request bodies with timestamps).
    OpenaiLog,
    /// OpenTelemetry (`gen_ai.*`) or Langfuse trace exports of LLM calls.
    Traces,
    /// The Mooncake trace format (`timestamp`, `input_length`, `output_length`, `hash_ids`).
    Mooncake,
    /// Generated: a shared-prefix pool (`generate`).
    Generated,
}

impl Source {
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::OpenaiLog => "openai-log",
            Source::Traces => "traces",
            Source::Mooncake => "mooncake",
            Source::Generated => "generated",
        }
    }
}

/// The header line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadHeader {
    pub bakeoff_workload: u32,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub source: Source,
    /// Tokens per prefix block: request `blocks[i]` covers tokens `[i·b, (i+1)·b)`.
    pub block_tokens: u32,
    /// The real prompts are kept (`text` on each request): chosen explicitly at import.
    #[serde(default)]
    pub keeps_text: bool,
}

/// One request as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRequest {
    /// Arrival, milliseconds after the workload's first request.
    pub at_ms: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Chained prefix block ids: equal ids mean equal tokens from the prompt's start to the end
    /// of that block. At most one per `block_tokens` of input (the last may be partial).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<u64>,
    /// The prompt, only in a workload that `keeps_text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A whole workload file.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadFile {
    pub header: WorkloadHeader,
    pub requests: Vec<WorkloadRequest>,
}

/// Bad input: the place (file, line, field) and what is wrong. Nothing is stored on error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default(), field.as_ref().map(|f| format!(": field `{f}`")).unwrap_or_default())]
pub struct WorkloadError {
    pub file: String,
    /// 1-based; None for the whole file.
    pub line: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

impl WorkloadError {
    pub fn at(file: &str, line: Option<usize>, field: Option<&str>, message: impl Into<String>) -> Self {
        WorkloadError {
            file: file.to_string(),
            line,
            field: field.map(str::to_string),
            message: message.into(),
        }
    }
}

/// Largest workload file accepted, in bytes.
pub const MAX_FILE_BYTES: usize = 512 * 1024 * 1024;

impl WorkloadFile {
    /// Reads a workload file; the first problem is reported with its line and field.
    pub fn parse(file: &str, text: &str) -> Result<WorkloadFile, WorkloadError> {
        if text.len() > MAX_FILE_BYTES {
            return Err(WorkloadError::at(
                file,
                None,
                None,
                format!("file is {} bytes; at most {MAX_FILE_BYTES}", text.len()),
            ));
        }
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty());
        let (hl, head) = lines
            .next()
            .ok_or_else(|| WorkloadError::at(file, None, None, "empty file: a header line comes first"))?;
        let header: WorkloadHeader = serde_json::from_str(head).map_err(|e| serde_problem(file, hl, &e))?;
        let mut requests = Vec::new();
        for (n, line) in lines {
            let r: WorkloadRequest = serde_json::from_str(line).map_err(|e| serde_problem(file, n, &e))?;
            requests.push((n, r));
        }
        let lines: Vec<usize> = requests.iter().map(|(n, _)| *n).collect();
        let parsed = WorkloadFile {
            header,
            requests: requests.into_iter().map(|(_, r)| r).collect(),
        };
        parsed.validate(file, &|i| lines[i], Some(hl))?;
        Ok(parsed)
    }

    /// Every rule a workload keeps, each broken one named by line (`line_of(request index)`)
    /// and field; importers and the generator check what they built with it too.
    pub fn validate(
        &self,
        file: &str,
        line_of: &dyn Fn(usize) -> usize,
        header_line: Option<usize>,
    ) -> Result<(), WorkloadError> {
        let h = &self.header;
        let head = |field: &str, message: String| Err(WorkloadError::at(file, header_line, Some(field), message));
        if h.bakeoff_workload != FORMAT_VERSION {
            return head("bakeoff_workload", format!("must be {FORMAT_VERSION}"));
        }
        if let Some(problem) = crate::validation::name_problem(&h.name) {
            return head("name", problem.to_string());
        }
        if h.description.chars().count() > 2000 {
            return head("description", "at most 2000 characters".into());
        }
        if !(1..=1_048_576).contains(&h.block_tokens) {
            return head("block_tokens", "must be a whole number from 1 to 1048576".into());
        }
        if self.requests.is_empty() {
            return Err(WorkloadError::at(
                file,
                None,
                None,
                "no requests: a workload needs at least one",
            ));
        }
        if self.requests.len() > MAX_REQUESTS {
            return Err(WorkloadError::at(
                file,
                None,
                None,
                format!("{} requests; at most {MAX_REQUESTS}", self.requests.len()),
            ));
        }
        // A chained id names its whole prefix: it sits at one position, after one parent.
        let mut seen: std::collections::HashMap<u64, (usize, Option<u64>)> = std::collections::HashMap::new();
        let mut previous = 0.0;
        for (i, r) in self.requests.iter().enumerate() {
            let bad =
                |field: &str, message: String| Err(WorkloadError::at(file, Some(line_of(i)), Some(field), message));
            if !r.at_ms.is_finite() || r.at_ms < 0.0 {
                return bad("at_ms", "must be a number of milliseconds >= 0".into());
            }
            if r.at_ms < previous {
                return bad(
                    "at_ms",
                    format!(
                        "{} is before the previous request's {previous}: requests are in arrival order",
                        r.at_ms
                    ),
                );
            }
            previous = r.at_ms;
            for (field, v) in [("input_tokens", r.input_tokens), ("output_tokens", r.output_tokens)] {
                if !(1..=MAX_TOKENS_PER_REQUEST).contains(&v) {
                    return bad(
                        field,
                        format!("must be a whole number from 1 to {MAX_TOKENS_PER_REQUEST}"),
                    );
                }
            }
            let most = r.input_tokens.div_ceil(h.block_tokens) as usize;
            if r.blocks.len() > most {
                return bad(
                    "blocks",
                    format!(
                        "{} blocks of {} tokens are more than {} input tokens hold ({most})",
                        r.blocks.len(),
                        h.block_tokens,
                        r.input_tokens
                    ),
                );
            }
            for (j, &b) in r.blocks.iter().enumerate() {
                let parent = j.checked_sub(1).map(|p| r.blocks[p]);
                match seen.get(&b) {
                    Some(&(pos, par)) if pos != j || par != parent => {
                        return bad(
                            &format!("blocks[{j}]"),
                            format!(
                                "block {b} follows {} at position {j}, but elsewhere {} at position {pos}: a block id names its whole prefix",
                                describe_parent(parent),
                                describe_parent(par)
                            ),
                        );
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(b, (j, parent));
                    }
                }
            }
            match (&r.text, h.keeps_text) {
                (Some(_), false) => {
                    return bad(
                        "text",
                        "the header does not keep text (`keeps_text`: true keeps it)".into(),
                    );
                }
                (None, true) => return bad("text", "missing: the header keeps text".into()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Key-sorted compact JSON, one line each; what the content hash is of.
    pub fn normalised(&self) -> String {
        let mut out = canonical_json(&self.header);
        for r in &self.requests {
            out.push('\n');
            out.push_str(&canonical_json(r));
        }
        out.push('\n');
        out
    }

    /// The version identity: SHA-256 of the normalised text, hex.
    pub fn content_hash(&self) -> String {
        hex::encode(Sha256::digest(self.normalised().as_bytes()))
    }

    /// From the first arrival to the last, in milliseconds.
    pub fn duration_ms(&self) -> f64 {
        self.requests.last().map_or(0.0, |r| r.at_ms)
    }
}

fn describe_parent(p: Option<u64>) -> String {
    p.map_or("nothing".to_string(), |p| format!("block {p}"))
}

fn canonical_json<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value).map(|v| v.to_string()).unwrap_or_default()
}

/// A serde error on one line, with the field it names where it names one.
fn serde_problem(file: &str, line: usize, e: &serde_json::Error) -> WorkloadError {
    let msg = e.to_string();
    // serde names a field as "unknown field `x`" or "missing field `x`".
    let field = msg.split('`').nth(1).map(str::to_string);
    let message = match msg.rfind(" at line ") {
        Some(at) => msg[..at].to_string(),
        None => msg,
    };
    WorkloadError {
        file: file.to_string(),
        line: Some(line),
        field,
        message,
    }
}

/// Chained block ids of a token sequence: block `i` covers tokens `[i·b, (i+1)·b)` (the last
/// may be partial) and its id hashes its parent's id with its tokens, so an id identifies its
/// whole prefix. Raw 64-bit hashes; `Renumber` makes them small.
pub fn chained_block_hashes(tokens: &[u32], block_tokens: u32) -> Vec<u64> {
    let mut parent = [0u8; 8];
    tokens
        .chunks(block_tokens.max(1) as usize)
        .map(|block| {
            let mut h = Sha256::new();
            h.update(parent);
            for t in block {
                h.update(t.to_le_bytes());
            }
            let digest = h.finalize();
            parent.copy_from_slice(&digest[..8]);
            u64::from_le_bytes(parent)
        })
        .collect()
}

/// Dense block ids in order of first appearance (0, 1, 2 …): a workload's ids say only which
/// prefixes are equal, never anything of the text they came from.
#[derive(Debug, Default)]
pub struct Renumber(std::collections::HashMap<u64, u64>);

impl Renumber {
    pub fn id(&mut self, raw: u64) -> u64 {
        let next = self.0.len() as u64;
        *self.0.entry(raw).or_insert(next)
    }

    pub fn ids(&mut self, raw: &[u64]) -> Vec<u64> {
        raw.iter().map(|&r| self.id(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"bakeoff_workload":1,"name":"prod","source":"mooncake","block_tokens":4}
{"at_ms":0,"input_tokens":6,"output_tokens":3,"blocks":[0,1]}
{"at_ms":5.5,"input_tokens":8,"output_tokens":2,"blocks":[0,2]}
"#;

    #[test]
    fn parses_and_hashes_by_content() {
        let w = WorkloadFile::parse("w.jsonl", GOOD).unwrap();
        assert_eq!(w.requests.len(), 2);
        assert_eq!(w.duration_ms(), 5.5);
        let again = WorkloadFile::parse("w.jsonl", &w.normalised()).unwrap();
        assert_eq!(again.content_hash(), w.content_hash());
        let other =
            WorkloadFile::parse("w.jsonl", &GOOD.replace("\"output_tokens\":2", "\"output_tokens\":9")).unwrap();
        assert_ne!(other.content_hash(), w.content_hash());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e =
            WorkloadFile::parse("w.jsonl", &GOOD.replace("\"output_tokens\":2", "\"output_tokens\":0")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("output_tokens")), "{e}");
        assert!(e.to_string().starts_with("w.jsonl:3: field `output_tokens`"), "{e}");
        let e =
            WorkloadFile::parse("w.jsonl", &GOOD.replace("\"at_ms\":5.5", "\"at_ms\":5.5,\"colour\":1")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("colour")), "{e}");
        let e = WorkloadFile::parse("w.jsonl", &GOOD.replace("[0,2]", "[1,2]")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("blocks[0]")), "{e}");
        let e = WorkloadFile::parse("w.jsonl", &GOOD.replace("\"at_ms\":5.5", "\"at_ms\":-1")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("at_ms"), "{e}");
        let e = WorkloadFile::parse("w.jsonl", &GOOD.replace("[0,1]", "[0,1,7]")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("blocks")), "{e}");
        let e = WorkloadFile::parse("w.jsonl", &GOOD.replace("[0,1]}", "[0,1],\"text\":\"hi\"}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("text"), "{e}");
    }

    #[test]
    fn chained_hashes_identify_the_whole_prefix() {
        let a = chained_block_hashes(&[1, 2, 3, 4, 5, 6], 2);
        let b = chained_block_hashes(&[1, 2, 9, 9, 5, 6], 2);
        assert_eq!(a.len(), 3);
        assert_eq!(a[0], b[0]);
        // Same tokens in the last block, different prefix: a different id.
        assert_ne!(a[2], b[2]);
        let mut r = Renumber::default();
        assert_eq!((r.ids(&a), r.ids(&b)), (vec![0, 1, 2], vec![0, 3, 4]));
    }
}
