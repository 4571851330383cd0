//! Saving an eval-set version with its audit entry: the one way every door stores one (the web's
//! case form and import, the API's upload, `bakeoff evalset import`, `bakeoff run start`).
use crate::AppError;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::evalset::EvalSetFile;
use crate::store::DynStore;

/// What saving a file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedVersion {
    /// The version holding the file's content: the new one, or the identical one stored before.
    pub id: i64,
    /// A version was written (and audited); false: an identical version was stored already.
    pub stored: bool,
    /// No eval set of the file's name existed before.
    pub new_set: bool,
}

/// Stores `file` as a version of the eval set its header names (created when new) and, when a
/// version was written, audits it as done by `actor`, `detail` saying how (e.g. "imported").
/// Saving the content of a stored version writes and audits nothing.
pub async fn save_version(
    store: &DynStore,
    file: &EvalSetFile,
    actor: &str,
    detail: String,
) -> Result<SavedVersion, AppError> {
    let latest = store
        .list_evalsets()
        .await?
        .into_iter()
        .find(|s| s.name == file.header.name)
        .map(|s| s.latest_version_id);
    let id = store.save_evalset_version(file).await?;
    // Version ids only grow: an id past the set's latest is the version just written.
    let stored = latest.is_none_or(|latest| id > latest);
    if stored {
        store
            .append_audit(&NewAuditEntry {
                actor: actor.to_string(),
                action: Action::EvalSetSaved,
                target: format!("eval set {:?} version #{id}", file.header.name),
                detail,
            })
            .await?;
    }
    Ok(SavedVersion {
        id,
        stored,
        new_set: latest.is_none(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::audit_entries;

    fn file(expected: &str) -> EvalSetFile {
        let text = format!(
            "{{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"classification\",\"prompt\":\"{{{{t}}}}\",\"graders\":[{{\"kind\":\"exact\"}}]}}\n\
             {{\"id\":\"a\",\"vars\":{{\"t\":\"x\"}},\"expected\":\"{expected}\"}}\n"
        );
        EvalSetFile::parse("s.jsonl", &text).unwrap()
    }

    #[tokio::test]
    async fn a_version_is_audited_once_and_stored_content_is_neither_stored_nor_audited_again() {
        let store = crate::store::connect("sqlite::memory:").await.unwrap();
        let first = save_version(&store, &file("y"), "ana", "imported".into())
            .await
            .unwrap();
        assert!(first.stored && first.new_set, "{first:?}");
        let again = save_version(&store, &file("y"), "bob", "imported".into())
            .await
            .unwrap();
        assert_eq!(
            again,
            SavedVersion {
                id: first.id,
                stored: false,
                new_set: false
            }
        );
        let second = save_version(&store, &file("z"), "bob", "case edited".into())
            .await
            .unwrap();
        assert!(second.stored && !second.new_set && second.id > first.id, "{second:?}");
        // Back to the first content: that version, nothing written.
        let back = save_version(&store, &file("y"), "bob", "imported".into())
            .await
            .unwrap();
        assert_eq!((back.id, back.stored), (first.id, false));
        assert_eq!(
            audit_entries(&store, Action::EvalSetSaved).await,
            [
                (
                    "ana".to_string(),
                    format!("eval set \"s\" version #{}", first.id),
                    "imported".to_string()
                ),
                (
                    "bob".to_string(),
                    format!("eval set \"s\" version #{}", second.id),
                    "case edited".to_string()
                ),
            ]
        );
    }
}
