//! The difference between two stored versions: header fields, and cases added, removed and
//! changed (with the parts that changed, old and new side by side).
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use serde_json::Value;

use super::load;
use crate::domain::evalset::diff::{CasePart, LineChange, diff_versions, expected_calls_text, line_diff, tools_text};
use crate::domain::evalset::{EvalCase, EvalSetFile};
use crate::domain::grading::Grader;
use crate::domain::validation::truncate;
use crate::web::AppState;
use crate::web::error::WebError;
use crate::web::views::short_hash;

/// Most cases listed per section; a diff of a rewritten 100k-case set stays a readable page.
const MAX_LISTED: usize = 200;
/// Characters of one shown value.
const VALUE_EXCERPT: usize = 2_000;

#[derive(Debug, Clone)]
pub struct VersionRef {
    pub id: i64,
    pub name: String,
    pub hash_short: String,
    pub created: String,
    pub cases: usize,
}

#[derive(Debug, Clone)]
pub struct PartChange {
    pub part: String,
    /// Before and after, line by line: unchanged lines once, the rest marked.
    pub lines: Vec<DiffLine>,
}

/// One line of a before/after diff; `kind` is `same`, `del` or `ins`.
#[derive(Debug, Clone)]
pub struct DiffLine {
    pub kind: &'static str,
    pub text: String,
}

fn part_change(part: String, old: &Value, new: &Value) -> PartChange {
    let (old, new) = (show(old), show(new));
    let lines = line_diff(&old, &new)
        .into_iter()
        .map(|(change, text)| DiffLine {
            kind: match change {
                LineChange::Same => "same",
                LineChange::Removed => "del",
                LineChange::Added => "ins",
            },
            text: text.to_string(),
        })
        .collect();
    PartChange { part, lines }
}

#[derive(Debug, Clone)]
pub struct ChangedCase {
    pub id: String,
    pub parts: String,
    pub changes: Vec<PartChange>,
}

#[derive(Debug, Clone)]
pub struct ListedCase {
    pub id: String,
    pub summary: String,
}

/// An added case with what it sends and expects.
#[derive(Debug, Clone)]
pub struct AddedCase {
    pub id: String,
    /// The messages sent, `role: content` per message.
    pub input: String,
    pub expected: Option<String>,
}

fn added(file: &EvalSetFile, case: &EvalCase) -> AddedCase {
    if case.is_conversation() {
        return AddedCase {
            id: case.id.clone(),
            input: truncate(&crate::domain::evalset::diff::turns_text(case), VALUE_EXCERPT),
            expected: None,
        };
    }
    let mut input = file
        .messages_for(case)
        .iter()
        .map(|m| format!("{}: {}", m.role, m.content))
        .collect::<Vec<_>>()
        .join("\n");
    for t in &case.tools {
        input.push_str("\ntool: ");
        input.push_str(&t.signature());
    }
    // A tool case's expected outcome is its calls (its `expected`, if any, grades the text).
    let expected = match &case.expected_calls {
        Some(_) => Some(expected_calls_text(case)),
        None => case.expected_text(),
    };
    AddedCase {
        id: case.id.clone(),
        input: truncate(&input, VALUE_EXCERPT),
        expected: expected.map(|e| truncate(&e, VALUE_EXCERPT)),
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "evalsets/diff.html")]
pub struct DiffPage {
    pub nav: &'static str,
    pub old: VersionRef,
    pub new: VersionRef,
    pub same_set: bool,
    pub identical: bool,
    pub header_changes: Vec<PartChange>,
    pub added: Vec<AddedCase>,
    pub added_total: usize,
    pub removed: Vec<ListedCase>,
    pub removed_total: usize,
    pub changed: Vec<ChangedCase>,
    pub changed_total: usize,
    pub unchanged: usize,
    pub reordered: bool,
}

fn show(v: &Value) -> String {
    let text = match v {
        Value::Null => "(absent)".to_string(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    };
    truncate(&text, VALUE_EXCERPT)
}

fn part_value(case: &EvalCase, part: CasePart) -> Value {
    let graders = |g: &[Grader]| {
        if g.is_empty() {
            Value::String("(the set's default graders)".into())
        } else {
            serde_json::to_value(g).unwrap_or_default()
        }
    };
    match part {
        CasePart::Input => match &case.messages {
            Some(m) => serde_json::json!({ "messages": m }),
            None => serde_json::json!({ "vars": case.vars }),
        },
        CasePart::Expected => case.expected.clone().unwrap_or(Value::Null),
        CasePart::Graders => graders(&case.graders),
        CasePart::Tags => serde_json::to_value(&case.tags).unwrap_or_default(),
        CasePart::Weight => serde_json::json!(case.weight()),
        CasePart::Tools => Value::String(tools_text(case)),
        CasePart::ExpectedCalls => Value::String(expected_calls_text(case)),
        CasePart::Turns => Value::String(crate::domain::evalset::diff::turns_text(case)),
    }
}

fn listed(case: &EvalCase) -> ListedCase {
    if case.is_conversation() {
        return ListedCase {
            id: case.id.clone(),
            summary: format!("conversation of {} turn(s)", case.turns.len()),
        };
    }
    let summary = match (&case.messages, case.expected_text()) {
        (_, Some(e)) => format!("expected: {}", truncate(&e, 120)),
        (Some(m), None) => format!("{} message(s), no expected value", m.len()),
        (None, None) => "no expected value".to_string(),
    };
    ListedCase {
        id: case.id.clone(),
        summary,
    }
}

fn version_ref(id: i64, hash: &str, created: String, file: &EvalSetFile) -> VersionRef {
    VersionRef {
        id,
        name: file.header.name.clone(),
        hash_short: short_hash(hash).to_string(),
        created,
        cases: file.cases.len(),
    }
}

pub async fn page(
    State(state): State<AppState>,
    Path((raw_old, raw_new)): Path<(String, String)>,
) -> Result<DiffPage, WebError> {
    let old = load(&state, &raw_old).await?;
    let new = load(&state, &raw_new).await?;
    let d = diff_versions(&old.file, &new.file);
    let header_of = |f: &EvalSetFile| match serde_json::to_value(&f.header) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let (old_header, new_header) = (header_of(&old.file), header_of(&new.file));
    let header_changes = d
        .header_changed
        .iter()
        .map(|field| {
            part_change(
                field.clone(),
                old_header.get(field).unwrap_or(&Value::Null),
                new_header.get(field).unwrap_or(&Value::Null),
            )
        })
        .collect();
    let changed = d
        .changed
        .iter()
        .take(MAX_LISTED)
        .map(|c| ChangedCase {
            id: c.id().to_string(),
            parts: c.parts.iter().map(CasePart::as_str).collect::<Vec<_>>().join(", "),
            changes: c
                .parts
                .iter()
                .map(|p| part_change(p.as_str().to_string(), &part_value(&c.old, *p), &part_value(&c.new, *p)))
                .collect(),
        })
        .collect();
    Ok(DiffPage {
        nav: "evalsets",
        same_set: old.evalset_id == new.evalset_id,
        identical: d.is_empty(),
        old: version_ref(old.id, &old.content_hash, old.created_at.display(), &old.file),
        new: version_ref(new.id, &new.content_hash, new.created_at.display(), &new.file),
        header_changes,
        added: d.added.iter().take(MAX_LISTED).map(|c| added(&new.file, c)).collect(),
        added_total: d.added.len(),
        removed: d.removed.iter().take(MAX_LISTED).map(listed).collect(),
        removed_total: d.removed.len(),
        changed,
        changed_total: d.changed.len(),
        unchanged: d.unchanged,
        reordered: d.reordered,
    })
}
