//! Conversation cases: a case whose input is a list of **turns**, each a user message (a
//! template over the case's and the turn's vars) with optional graders for the reply at that
//! turn. The history sent at turn k is either the model's own earlier replies (`own`: errors
//! compound, as in a real chat) or a fixed one written in the file (`golden`: every turn is
//! judged on its own). See `docs/evalset-format.md`, "Conversation cases".
use serde::{Deserialize, Serialize};

use super::{ChatMessage, EvalCase, EvalSetFile, render_template};
use crate::grading::Grader;

/// Most turns in one conversation case.
pub const MAX_TURNS: usize = 64;

/// The separator of a turn's record key: turn 3 of case `trip` is recorded as `trip#3`.
pub const TURN_KEY_SEPARATOR: char = '#';

/// What the history sent at turn k is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryMode {
    /// The model's own earlier replies (realistic: an early mistake is carried forward).
    #[default]
    Own,
    /// The turns' `golden` replies from the file (isolates each turn).
    Golden,
}

impl HistoryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryMode::Own => "own",
            HistoryMode::Golden => "golden",
        }
    }

    pub fn parse(s: &str) -> Option<HistoryMode> {
        match s.trim() {
            "own" => Some(HistoryMode::Own),
            "golden" => Some(HistoryMode::Golden),
            _ => None,
        }
    }
}

/// One turn of a conversation case.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// The user's message: a template, `{{name}}` replaced by the turn's `vars.name`, else the
    /// case's.
    pub user: String,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub vars: serde_json::Map<String, serde_json::Value>,
    /// The expected reply at this turn (graded by the turn's graders, else the header's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<serde_json::Value>,
    /// Graders of the reply at this turn; none and no `expected`: the turn is not graded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graders: Vec<Grader>,
    /// The fixed assistant reply carried as history in `golden` mode (default: `expected`
    /// when it is a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub golden: Option<String>,
}

impl Turn {
    /// The golden reply: `golden`, else the expected value when it is text.
    pub fn golden_reply(&self) -> Option<String> {
        self.golden.clone().or_else(|| match &self.expected {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
            None => None,
        })
    }

    /// Whether the reply at this turn is graded.
    pub fn is_graded(&self) -> bool {
        !self.graders.is_empty() || self.expected.is_some()
    }

    /// The user's message with the vars filled in (the turn's over the case's).
    pub fn user_message(&self, case_vars: &serde_json::Map<String, serde_json::Value>) -> String {
        if self.vars.is_empty() {
            return render_template(&self.user, case_vars);
        }
        let mut vars = case_vars.clone();
        vars.extend(self.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        render_template(&self.user, &vars)
    }
}

/// The record key of turn `turn` (1-based) of case `case_id`: `trip#3`.
pub fn turn_key(case_id: &str, turn: usize) -> String {
    format!("{case_id}{TURN_KEY_SEPARATOR}{turn}")
}

/// (case id, turn) of a turn's record key, None for a plain case id.
pub fn split_turn_key(key: &str) -> Option<(&str, usize)> {
    let (case, turn) = key.rsplit_once(TURN_KEY_SEPARATOR)?;
    let turn: usize = turn.parse().ok()?;
    (turn >= 1 && !case.is_empty()).then_some((case, turn))
}

impl EvalCase {
    /// Whether this is a conversation case (it lists turns).
    pub fn is_conversation(&self) -> bool {
        !self.turns.is_empty()
    }
}

impl EvalSetFile {
    /// The history mode of a conversation case: its own, else the set's, else `own`.
    pub fn history_for(&self, case: &EvalCase) -> HistoryMode {
        case.history.or(self.header.history).unwrap_or_default()
    }

    /// The messages sent at turn `turn` (0-based) of a conversation case: the system message,
    /// then for every earlier turn its user message and the assistant reply from `replies`
    /// (the model's own, or the golden ones), then this turn's user message.
    pub fn turn_messages(&self, case: &EvalCase, turn: usize, replies: &[String]) -> Vec<ChatMessage> {
        let mut out = Vec::with_capacity(2 * turn + 2);
        if let Some(system) = &self.header.system {
            out.push(ChatMessage {
                role: "system".into(),
                content: system.clone(),
            });
        }
        for (j, t) in case.turns.iter().enumerate().take(turn + 1) {
            out.push(ChatMessage {
                role: "user".into(),
                content: t.user_message(&case.vars),
            });
            if j < turn {
                out.push(ChatMessage {
                    role: "assistant".into(),
                    content: replies.get(j).cloned().unwrap_or_default(),
                });
            }
        }
        out
    }

    /// The golden replies of a conversation case (empty text where a turn has none).
    pub fn golden_replies(&self, case: &EvalCase) -> Vec<String> {
        case.turns
            .iter()
            .map(|t| t.golden_reply().unwrap_or_default())
            .collect()
    }

    /// Graders of one turn: its own, else (when it has an expected value) the header's.
    pub fn graders_for_turn<'a>(&'a self, turn: &'a Turn) -> &'a [Grader] {
        if !turn.graders.is_empty() {
            &turn.graders
        } else if turn.expected.is_some() {
            &self.header.graders
        } else {
            &[]
        }
    }

    /// The single-request case a turn is sent as: its record key, the messages up to it, its
    /// expected value. `replies` are the earlier turns' replies (own or golden).
    pub fn turn_as_case(&self, case: &EvalCase, turn: usize, replies: &[String]) -> EvalCase {
        let t = &case.turns[turn];
        EvalCase {
            id: turn_key(&case.id, turn + 1),
            messages: Some(self.turn_messages(case, turn, replies)),
            expected: t.expected.clone(),
            graders: self.graders_for_turn(t).to_vec(),
            tags: case.tags.clone(),
            weight: case.weight,
            ..EvalCase::default()
        }
    }
}

/// The problems of a conversation case beyond its fields' types, as (field, message).
pub(super) fn check(case: &EvalCase, header_history: Option<HistoryMode>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if case.turns.is_empty() {
        if case.history.is_some() {
            out.push(("history".into(), "is set but the case has no `turns`".into()));
        }
        return out;
    }
    if case.turns.len() > MAX_TURNS {
        out.push((
            "turns".into(),
            format!("has {} turns; at most {MAX_TURNS}", case.turns.len()),
        ));
    }
    if case.messages.is_some() {
        out.push((
            "messages".into(),
            "cannot be given with `turns` (a conversation's messages are built from its turns)".into(),
        ));
    }
    if case.expected.is_some() {
        out.push((
            "expected".into(),
            "cannot be given with `turns`: give each turn its own `expected`".into(),
        ));
    }
    if !case.graders.is_empty() {
        out.push((
            "graders".into(),
            "cannot be given with `turns`: give each turn its own `graders`".into(),
        ));
    }
    if case.expected_calls.is_some() || !case.tools.is_empty() {
        out.push((
            "turns".into(),
            "a conversation case cannot carry tools yet (tool calls are graded on single-turn tool cases)".into(),
        ));
    }
    let golden = case.history.or(header_history) == Some(HistoryMode::Golden);
    let last = case.turns.len() - 1;
    for (i, t) in case.turns.iter().enumerate() {
        if t.user.trim().is_empty() {
            out.push((format!("turns[{i}].user"), "is required (the user's message)".into()));
        }
        let mut vars = case.vars.clone();
        vars.extend(t.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        for var in super::template_vars(&t.user)
            .into_iter()
            .filter(|v| !vars.contains_key(v))
        {
            out.push((
                format!("turns[{i}].vars.{var}"),
                "is used by the turn's message but missing (in the turn's and the case's vars)".into(),
            ));
        }
        if golden && i < last && t.golden_reply().is_none() {
            out.push((
                format!("turns[{i}].golden"),
                "is missing: with `history: \"golden\"` every turn but the last needs the reply carried as history (`golden`, or a text `expected`)".into(),
            ));
        }
        for (field, message) in super::check_graders(&t.graders) {
            out.push((format!("turns[{i}].{field}"), message));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = r#"{"bakeoff_evalset":1,"name":"chat","task":"generation","system":"Be brief.","graders":[{"kind":"contains"}]}
{"id":"trip","vars":{"city":"Lyon"},"turns":[{"user":"I am going to {{city}} with {{n}} friends.","vars":{"n":3},"expected":"noted"},{"user":"Where am I going?","expected":"Lyon"},{"user":"Thanks"}]}
{"id":"plain","messages":[{"role":"user","content":"hi"}],"expected":"hi"}
"#;

    #[test]
    fn turns_parse_render_and_carry_history() {
        let f = EvalSetFile::parse("c.jsonl", SET).unwrap();
        let trip = &f.cases[0];
        assert!(trip.is_conversation() && !f.cases[1].is_conversation());
        assert_eq!(f.history_for(trip), HistoryMode::Own);
        let m = f.turn_messages(trip, 2, &["ok".into(), "Lyon!".into()]);
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user", "assistant", "user"]);
        assert_eq!(m[1].content, "I am going to Lyon with 3 friends.");
        assert_eq!((m[2].content.as_str(), m[4].content.as_str()), ("ok", "Lyon!"));
        let sent = f.turn_as_case(trip, 1, &["ok".into()]);
        assert_eq!(sent.id, "trip#2");
        assert_eq!(
            sent.graders, f.header.graders,
            "a turn with expected takes the header's graders"
        );
        assert!(f.graders_for_turn(&trip.turns[2]).is_empty(), "turn 3 is not graded");
        assert_eq!(split_turn_key("trip#2"), Some(("trip", 2)));
        assert_eq!(split_turn_key("trip"), None);
        assert_eq!(split_turn_key("a#b"), None);
        // A plain file's hash is unchanged by the new fields (none is written when unused).
        assert!(f.cases[1].history.is_none());
        assert!(!f.normalised().lines().nth(2).unwrap().contains("turns"));
    }

    #[test]
    fn problems_name_the_turn_and_field() {
        let bad = SET
            .replace(r#""vars":{"n":3},"#, "")
            .replace(
                r#"{"user":"Thanks"}"#,
                r#"{"user":" ","graders":[{"kind":"length","min":9,"max":3}]}"#,
            )
            .replace(
                r#""system":"Be brief.","#,
                r#""system":"Be brief.","history":"golden","#,
            );
        let e = EvalSetFile::parse("c.jsonl", &bad).unwrap_err();
        let fields: Vec<&str> = e.problems.iter().filter_map(|p| p.field.as_deref()).collect();
        assert!(fields.contains(&"turns[0].vars.n"), "{e}");
        assert!(fields.contains(&"turns[2].user"), "{e}");
        assert!(fields.contains(&"turns[2].graders[0].min"), "{e}");
        assert!(e.to_string().contains("c.jsonl:2: field \"turns[0].vars.n\""), "{e}");
        // Golden mode: turn 1 has a text expected (its golden), turn 2 too; the last needs none.
        assert!(!fields.iter().any(|f| f.ends_with(".golden")), "{e}");
        let no_golden = SET.replace(r#","expected":"noted""#, "").replace(
            r#""system":"Be brief.","#,
            r#""system":"Be brief.","history":"golden","#,
        );
        let e = EvalSetFile::parse("c.jsonl", &no_golden).unwrap_err();
        assert_eq!(e.first().field.as_deref(), Some("turns[0].golden"), "{e}");
        let mixed = SET.replace(r#""id":"trip","#, r#""id":"trip","expected":"x","#);
        let e = EvalSetFile::parse("c.jsonl", &mixed).unwrap_err();
        assert_eq!(e.first().field.as_deref(), Some("expected"), "{e}");
        let typo = SET.replace(r#"{"user":"Thanks"}"#, r#"{"user":"Thanks","answer":"x"}"#);
        let e = EvalSetFile::parse("c.jsonl", &typo).unwrap_err();
        assert_eq!(e.first().field.as_deref(), Some("turns[2].answer"), "{e}");
        let mode = SET.replace(r#""id":"trip","#, r#""id":"trip","history":"mine","#);
        let e = EvalSetFile::parse("c.jsonl", &mode).unwrap_err();
        assert_eq!(e.first().field.as_deref(), Some("history"), "{e}");
        let clash = SET.replace(r#""id":"plain""#, r##""id":"trip#2""##);
        let e = EvalSetFile::parse("c.jsonl", &clash).unwrap_err();
        assert_eq!(
            (e.first().line, e.first().field.as_deref()),
            (Some(3), Some("id")),
            "{e}"
        );
    }
}
