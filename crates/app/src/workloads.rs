//! Workloads: importing a traffic log (prompts counted and blocked with o200k, the tokenizer
//! replay's text is exact in), generating a shared-prefix one, and saving a version with its
//! audit entry — the one way the web's upload, the API and `bakeoff workload` store one.
use crate::AppError;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::workload::import::{Format, ImportOptions, import};
use crate::domain::workload::{DEFAULT_BLOCK_TOKENS, WorkloadError, WorkloadFile};
use crate::engine::tokens::o200k::o200k;
use crate::store::DynStore;

/// What saving a workload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedWorkload {
    /// The version holding the content: the new one, or the identical one stored before.
    pub id: i64,
    /// A version was written (and audited); false: an identical one was stored already.
    pub stored: bool,
}

/// How a log is read.
#[derive(Debug, Clone)]
pub struct LogImport {
    pub name: String,
    pub description: String,
    /// None: detected from the first line.
    pub format: Option<Format>,
    pub keep_text: bool,
    pub block_tokens: Option<u32>,
}

/// Reads `text` (the contents of `file`) as a workload; a bad line is named with its field.
pub fn read_log(file: &str, text: &str, how: &LogImport) -> Result<WorkloadFile, WorkloadError> {
    let tokenize = |t: &str| o200k().encode(t);
    let options = ImportOptions {
        name: how.name.clone(),
        description: how.description.clone(),
        keep_text: how.keep_text,
        block_tokens: how.block_tokens.unwrap_or(DEFAULT_BLOCK_TOKENS),
        tokenize: &tokenize,
    };
    let format = how.format.unwrap_or_else(|| Format::detect(text));
    let mut workload = import(file, text, format, &options)?;
    if format == Format::Workload && !how.name.is_empty() {
        workload.header.name = how.name.clone();
    }
    Ok(workload)
}

/// Stores `workload` as a version of the workload its header names and, when one was written,
/// audits it as done by `actor`, `detail` saying how ("imported from prod.jsonl").
pub async fn save_version(
    store: &DynStore,
    workload: &WorkloadFile,
    actor: &str,
    detail: String,
) -> Result<SavedWorkload, AppError> {
    let (id, stored) = store.save_workload_version(workload).await?;
    if stored {
        store
            .append_audit(&NewAuditEntry {
                actor: actor.to_string(),
                action: Action::WorkloadSaved,
                target: format!("workload {:?} version #{id}", workload.header.name),
                detail: format!(
                    "{detail}; {} requests{}",
                    workload.requests.len(),
                    if workload.header.keeps_text {
                        ", prompts kept"
                    } else {
                        ""
                    }
                ),
            })
            .await?;
    }
    Ok(SavedWorkload { id, stored })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_imported_log_is_stored_once_and_audited_once() {
        let store = crate::store::connect("sqlite::memory:").await.unwrap();
        let log = "{\"timestamp\":1767225600,\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":9}\n";
        let how = LogImport {
            name: "prod".into(),
            description: String::new(),
            format: None,
            keep_text: false,
            block_tokens: None,
        };
        let w = read_log("log.jsonl", log, &how).unwrap();
        assert_eq!((w.requests[0].input_tokens, w.requests[0].output_tokens), (2, 9));
        let first = save_version(&store, &w, "ana", "imported".into()).await.unwrap();
        let again = save_version(&store, &w, "bob", "imported".into()).await.unwrap();
        assert!(first.stored && !again.stored && again.id == first.id);
        assert_eq!(
            crate::test_support::audit_entries(&store, Action::WorkloadSaved)
                .await
                .len(),
            1
        );
        let e = read_log("log.jsonl", "{\"timestamp\":1}\n", &how).unwrap_err();
        assert!(e.to_string().starts_with("log.jsonl:1: field `messages`"), "{e}");
    }
}
