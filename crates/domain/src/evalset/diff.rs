//! What changed between two versions of an eval set: cases matched by id, each changed case
//! with the parts that differ, and the header fields that differ.
use serde_json::Value;

use super::{EvalCase, EvalSetFile};

/// A part of a case that can change between versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CasePart {
    /// `vars` or `messages`: what is sent to the model.
    Input,
    Expected,
    Graders,
    Tags,
    Weight,
    /// `tools` or `tool_choice`.
    Tools,
    ExpectedCalls,
    /// A conversation case's `turns` or `history`.
    Turns,
}

impl CasePart {
    pub fn as_str(&self) -> &'static str {
        match self {
            CasePart::Input => "input",
            CasePart::Expected => "expected",
            CasePart::Graders => "graders",
            CasePart::Tags => "tags",
            CasePart::Weight => "weight",
            CasePart::Tools => "tools",
            CasePart::ExpectedCalls => "expected calls",
            CasePart::Turns => "turns",
        }
    }
}

/// One case present in both versions with different content.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseChange {
    pub old: EvalCase,
    pub new: EvalCase,
    /// Never empty, in `CasePart` order.
    pub parts: Vec<CasePart>,
}

impl CaseChange {
    pub fn id(&self) -> &str {
        &self.new.id
    }
}

/// The difference from `old` to `new`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VersionDiff {
    /// Cases whose id is only in `new`, in `new`'s order.
    pub added: Vec<EvalCase>,
    /// Cases whose id is only in `old`, in `old`'s order.
    pub removed: Vec<EvalCase>,
    /// Cases in both whose content differs, in `new`'s order.
    pub changed: Vec<CaseChange>,
    /// Cases in both with identical content.
    pub unchanged: usize,
    /// Header fields (as named in the file) whose value differs, sorted.
    pub header_changed: Vec<String>,
    /// Whether the cases both versions share appear in a different order.
    pub reordered: bool,
}

impl VersionDiff {
    /// No difference at all (the two versions have the same content hash).
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.header_changed.is_empty()
            && !self.reordered
    }
}

/// Compares two versions. Pure; cost is linear in the number of cases.
pub fn diff_versions(old: &EvalSetFile, new: &EvalSetFile) -> VersionDiff {
    let old_by_id: std::collections::HashMap<&str, &EvalCase> = old.cases.iter().map(|c| (c.id.as_str(), c)).collect();
    let new_ids: std::collections::HashSet<&str> = new.cases.iter().map(|c| c.id.as_str()).collect();

    let mut diff = VersionDiff {
        header_changed: header_changes(old, new),
        ..VersionDiff::default()
    };
    for case in &new.cases {
        match old_by_id.get(case.id.as_str()) {
            None => diff.added.push(case.clone()),
            Some(before) => {
                let parts = changed_parts(before, case);
                if parts.is_empty() {
                    diff.unchanged += 1;
                } else {
                    diff.changed.push(CaseChange {
                        old: (*before).clone(),
                        new: case.clone(),
                        parts,
                    });
                }
            }
        }
    }
    diff.removed = old
        .cases
        .iter()
        .filter(|c| !new_ids.contains(c.id.as_str()))
        .cloned()
        .collect();
    let shared_old: Vec<&str> = old
        .cases
        .iter()
        .map(|c| c.id.as_str())
        .filter(|id| new_ids.contains(id))
        .collect();
    let shared_new: Vec<&str> = new
        .cases
        .iter()
        .map(|c| c.id.as_str())
        .filter(|id| old_by_id.contains_key(id))
        .collect();
    diff.reordered = shared_old != shared_new;
    diff
}

fn changed_parts(old: &EvalCase, new: &EvalCase) -> Vec<CasePart> {
    let mut parts = Vec::new();
    if old.vars != new.vars || old.messages != new.messages {
        parts.push(CasePart::Input);
    }
    if old.expected != new.expected {
        parts.push(CasePart::Expected);
    }
    if old.graders != new.graders {
        parts.push(CasePart::Graders);
    }
    if old.tags != new.tags {
        parts.push(CasePart::Tags);
    }
    // 1 written out and the default of 1 are the same weight.
    if old.weight() != new.weight() {
        parts.push(CasePart::Weight);
    }
    if old.tools != new.tools || old.tool_choice != new.tool_choice {
        parts.push(CasePart::Tools);
    }
    if old.expected_calls != new.expected_calls {
        parts.push(CasePart::ExpectedCalls);
    }
    if old.turns != new.turns || old.history != new.history {
        parts.push(CasePart::Turns);
    }
    parts
}

/// Header fields that differ, compared as the JSON the file holds (absent = null).
fn header_changes(old: &EvalSetFile, new: &EvalSetFile) -> Vec<String> {
    let as_map = |f: &EvalSetFile| match serde_json::to_value(&f.header) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (a, b) = (as_map(old), as_map(new));
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| {
            let empty = |v: Option<&Value>| v.cloned().unwrap_or(Value::Null);
            // An absent list and an empty one mean the same (e.g. `graders`).
            let norm = |v: Value| match v {
                Value::Array(a) if a.is_empty() => Value::Null,
                other => other,
            };
            norm(empty(a.get(*k))) != norm(empty(b.get(*k)))
        })
        .cloned()
        .collect()
}

/// A case's tools as readable lines (one signature a tool, the tool choice, then each tool's
/// full JSON so a changed schema detail shows too); empty for a case without tools.
/// A conversation case's turns as text, one line per turn: `turn 2: user … → expected … [graders]`.
pub fn turns_text(case: &EvalCase) -> String {
    let mut lines = Vec::with_capacity(case.turns.len() + 1);
    if let Some(h) = case.history {
        lines.push(format!("history: {}", h.as_str()));
    }
    for (i, t) in case.turns.iter().enumerate() {
        let mut line = format!("turn {}: user: {}", i + 1, t.user_message(&case.vars));
        if let Some(e) = &t.expected {
            let e = match e {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            line.push_str(&format!(" → expected: {e}"));
        }
        if let Some(g) = &t.golden {
            line.push_str(&format!(" · golden: {g}"));
        }
        if !t.graders.is_empty() {
            let names: Vec<&str> = t.graders.iter().map(|g| g.name()).collect();
            line.push_str(&format!(" · graders: {}", names.join(", ")));
        }
        lines.push(line);
    }
    lines.join("\n")
}

pub fn tools_text(case: &EvalCase) -> String {
    let mut out = String::new();
    for t in &case.tools {
        out.push_str(&t.signature());
        out.push('\n');
    }
    if let Some(choice) = &case.tool_choice {
        out.push_str(&format!("tool choice: {}\n", choice.openai()));
    }
    for t in &case.tools {
        out.push_str(&serde_json::to_string_pretty(&t.openai()).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// A case's expected calls as readable lines; empty for a case without them.
pub fn expected_calls_text(case: &EvalCase) -> String {
    use crate::tool_calls::ToolExpectation;
    match &case.expected_calls {
        None => String::new(),
        Some(ToolExpectation::Calls { calls, ordered }) => {
            let mut out = String::from(if *ordered {
                "these calls, in this order:\n"
            } else {
                "these calls, in any order:\n"
            });
            for c in calls {
                out.push_str(&c.describe());
                out.push('\n');
            }
            out
        }
        Some(other) => other.describe(),
    }
}

/// One line of a before/after text diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineChange {
    Same,
    Removed,
    Added,
}

/// Lines compared past this many (before × after) are shown as all removed, then all added:
/// the LCS table would be too big for a page.
const MAX_DIFF_CELLS: usize = 250_000;

/// The lines of `old` and `new` aligned by their longest common subsequence: unchanged lines
/// once, removed lines before the added lines that replace them.
pub fn line_diff<'a>(old: &'a str, new: &'a str) -> Vec<(LineChange, &'a str)> {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    if a.len().saturating_mul(b.len()) > MAX_DIFF_CELLS {
        return a
            .iter()
            .map(|l| (LineChange::Removed, *l))
            .chain(b.iter().map(|l| (LineChange::Added, *l)))
            .collect();
    }
    // lcs[i][j]: the LCS length of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::with_capacity(a.len() + b.len()));
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push((LineChange::Same, a[i]));
            (i, j) = (i + 1, j + 1);
        } else if j == b.len() || (i < a.len() && lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push((LineChange::Removed, a[i]));
            i += 1;
        } else {
            out.push((LineChange::Added, b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"{"bakeoff_evalset":1,"name":"s","task":"classification","prompt":"Label: {{text}}"}
{"id":"a","vars":{"text":"great"},"expected":"positive"}
{"id":"b","vars":{"text":"awful"},"expected":"negative"}
{"id":"c","vars":{"text":"meh"},"expected":"neutral","tags":["x"]}
{"id":"d","vars":{"text":"fine"},"expected":"positive","weight":1}
"#;

    fn parse(text: &str) -> EvalSetFile {
        EvalSetFile::parse("t", text).unwrap()
    }

    #[test]
    fn identical_versions_have_an_empty_diff() {
        let d = diff_versions(&parse(OLD), &parse(OLD));
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(d.unchanged, 4);
    }

    #[test]
    fn added_removed_and_changed_parts_are_named() {
        let new = OLD
            .replace(r#""expected":"negative""#, r#""expected":"very negative""#)
            .replace(r#""tags":["x"]"#, r#""tags":["x","y"]"#)
            .replace(
                r#"{"id":"d","vars":{"text":"fine"},"expected":"positive","weight":1}"#,
                "",
            )
            .replace(r#""text":"great""#, r#""text":"great!""#)
            + r#"{"id":"e","vars":{"text":"ok"},"expected":"neutral","weight":2}"#;
        let d = diff_versions(&parse(OLD), &parse(&new));
        assert_eq!(d.added.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["e"]);
        assert_eq!(d.removed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["d"]);
        let changed: Vec<(&str, Vec<CasePart>)> = d.changed.iter().map(|c| (c.id(), c.parts.clone())).collect();
        assert_eq!(
            changed,
            [
                ("a", vec![CasePart::Input]),
                ("b", vec![CasePart::Expected]),
                ("c", vec![CasePart::Tags]),
            ]
        );
        assert_eq!((d.unchanged, d.reordered), (0, false));
        assert!(d.header_changed.is_empty());
        assert!(!d.is_empty());
    }

    #[test]
    fn header_graders_weight_and_order_changes() {
        let new = OLD
            .replace(
                r#""prompt":"Label: {{text}}""#,
                r#""prompt":"Label {{text}}","max_tokens":4"#,
            )
            .replace(r#""weight":1"#, r#""graders":[{"kind":"exact"}]"#);
        let d = diff_versions(&parse(OLD), &parse(&new));
        assert_eq!(d.header_changed, ["max_tokens", "prompt"]);
        // weight 1 → absent is no change; graders are.
        assert_eq!(d.changed.len(), 1);
        assert_eq!(d.changed[0].parts, [CasePart::Graders]);

        let lines: Vec<&str> = OLD.lines().collect();
        let swapped = [lines[0], lines[2], lines[1], lines[3], lines[4]].join("\n");
        let d = diff_versions(&parse(OLD), &parse(&swapped));
        assert!(d.reordered && d.changed.is_empty() && !d.is_empty());

        let weighted = OLD.replace(r#""weight":1"#, r#""weight":3"#);
        assert_eq!(
            diff_versions(&parse(OLD), &parse(&weighted)).changed[0].parts,
            [CasePart::Weight]
        );
    }

    #[test]
    fn a_conversations_turns_are_a_part_of_their_own() {
        let old = parse(
            "{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"generation\"}\n{\"id\":\"c\",\"turns\":[{\"user\":\"hi\",\"expected\":\"yo\"},{\"user\":\"again\"}]}",
        );
        let new = parse(
            "{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"generation\"}\n{\"id\":\"c\",\"turns\":[{\"user\":\"hi\",\"expected\":\"hey\"},{\"user\":\"again\"}]}",
        );
        let d = diff_versions(&old, &new);
        assert_eq!(d.changed.len(), 1);
        assert_eq!(d.changed[0].parts, [CasePart::Turns]);
        assert_eq!(
            turns_text(&new.cases[0]),
            "turn 1: user: hi → expected: hey\nturn 2: user: again"
        );
    }

    #[test]
    fn line_diff_keeps_common_lines_and_marks_the_rest() {
        use LineChange::*;
        let d = line_diff(
            "{\n  \"a\": 1,\n  \"b\": 2\n}",
            "{\n  \"a\": 1,\n  \"b\": 3,\n  \"c\": 4\n}",
        );
        assert_eq!(
            d,
            [
                (Same, "{"),
                (Same, "  \"a\": 1,"),
                (Removed, "  \"b\": 2"),
                (Added, "  \"b\": 3,"),
                (Added, "  \"c\": 4"),
                (Same, "}"),
            ]
        );
        assert_eq!(line_diff("x", "x"), [(Same, "x")]);
        assert_eq!(line_diff("", "new"), [(Added, "new")]);
        assert_eq!(line_diff("old", ""), [(Removed, "old")]);
    }
}
