//! The threshold-profile file: `bakeoff_profile = 1`, the profile's name and description and one
//! `[[rule]]` per metric, with values in the unit the Thresholds page shows (percent for
//! proportions: `value = 95` is 95 %).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{FileError, FileProblem, Located, Step, check_version, dotted, parse_toml, to_toml};
use crate::AppError;
use crate::domain::format;
use crate::domain::thresholds::ThresholdProfile;
use crate::domain::thresholds::form::{ProfileDraft, ProfileSave, RuleDraft};
use crate::domain::thresholds::key::MetricKey;
use crate::store::DynStore;

/// The format version this code reads and writes.
pub const VERSION: u32 = 1;

/// One threshold profile: the team's minimum acceptable values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "bakeoff threshold profile file",
    description = "A threshold profile as `bakeoff profile import` reads and `bakeoff profile export` writes it, \
                   in TOML. Importing a profile whose name is stored appends a version when the rules or the \
                   description differ (history kept, signed by --changed-by)."
)]
pub struct ProfileFile {
    /// Format version; 1.
    pub bakeoff_profile: u32,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// One rule per metric and load condition.
    #[serde(default)]
    pub rule: Vec<RuleEntry>,
}

/// One rule: `metric comparator value`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    /// A metric of the catalog ("How we measure"), e.g. `accuracy`, `aggregate_tok_s`, `ttft_p95_ms`,
    /// `failure_rate`, `grader_score`; `blind_win_rate` (people) or `judge_win_rate` (LLM judge, both
    /// orders) with `value = 40` is "not worse than the incumbent at 95 %" (10-point margin).
    pub metric: String,
    /// The grader, error class, probe or checklist item the metric takes, e.g. `exact`, `http_5xx`;
    /// for a win rate, the incumbent's candidate name (omitted: the incumbent chosen for the
    /// scorecard or the gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// The load the figure must be measured at (`@c=N`); omitted: the run's own concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub at_concurrency: Option<u32>,
    #[schemars(extend("enum" = [">=", ">", "<=", "<"]))]
    pub comparator: String,
    /// In the unit shown: percent for proportions (95 means 95 %), ms, tok/s, req/s or USD.
    #[schemars(range(min = 0.0))]
    pub value: f64,
    /// The unit of `value` as shown (`%`, `ms`, `tok/s`, `req/s`, `USD`); checked when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Why the team chose this threshold.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rationale: String,
}

/// Where a profile form field is in the file.
fn field_path(field: &str) -> Vec<Step> {
    let k = |s: &str| Step::Key(s.to_string());
    if let Some(rest) = field.strip_prefix("rule")
        && let Some((i, part)) = rest.split_once('_')
        && let Ok(i) = i.parse::<usize>()
    {
        let part = if part == "concurrency" { "at_concurrency" } else { part };
        return vec![k("rule"), Step::Index(i), k(part)];
    }
    match field {
        "rules" => vec![k("rule")],
        other => vec![k(other)],
    }
}

/// Reads and checks a profile file by the form's rules; `changed_by` and `rationale` sign the
/// version it will store. Every problem is reported at once, with its line.
pub fn parse(file: &str, text: &str, changed_by: &str, rationale: &str) -> Result<ProfileSave, FileError> {
    let text = text.trim_start_matches('\u{feff}');
    let parsed: ProfileFile = parse_toml(file, text)?;
    let located = Located::new(text);
    check_version(file, &located, "bakeoff_profile", parsed.bakeoff_profile, VERSION)?;
    let mut problems: Vec<FileProblem> = Vec::new();
    for (i, rule) in parsed.rule.iter().enumerate() {
        let (Some(unit), Some(def)) = (
            &rule.unit,
            crate::domain::thresholds::catalog::metric_def(rule.metric.trim()),
        ) else {
            continue;
        };
        if unit.trim() != def.unit.symbol() {
            let path = vec![Step::Key("rule".into()), Step::Index(i), Step::Key("unit".into())];
            problems.push(FileProblem {
                line: located.line(&path),
                field: Some(dotted(&path)),
                message: format!(
                    "{} is measured in {}; write the value in {} (or leave the unit out)",
                    def.label,
                    def.unit.symbol(),
                    def.unit.symbol()
                ),
            });
        }
    }
    let draft = ProfileDraft {
        name: parsed.name.clone(),
        description: parsed.description.clone(),
        changed_by: changed_by.to_string(),
        change_rationale: rationale.to_string(),
        rules: parsed
            .rule
            .iter()
            .map(|r| RuleDraft {
                metric: r.metric.clone(),
                param: r.param.clone().unwrap_or_default(),
                concurrency: r.at_concurrency.map(|c| c.to_string()).unwrap_or_default(),
                comparator: r.comparator.clone(),
                value: r.value.to_string(),
                rationale: r.rationale.clone(),
            })
            .collect(),
    };
    match draft.validate() {
        Ok(save) if problems.is_empty() => Ok(save),
        Ok(_) => Err(FileError {
            file: file.to_string(),
            problems,
        }),
        Err(errors) => {
            for e in errors.0 {
                let problem = match e.field.as_str() {
                    "changed_by" | "change_rationale" => FileProblem {
                        line: None,
                        field: None,
                        message: format!(
                            "{} {} (give it with --{})",
                            e.field.replace('_', " "),
                            e.message,
                            if e.field == "changed_by" {
                                "changed-by"
                            } else {
                                "rationale"
                            }
                        ),
                    },
                    field => {
                        let path = field_path(field);
                        FileProblem {
                            line: located.line(&path),
                            field: Some(dotted(&path)),
                            message: e.message,
                        }
                    }
                };
                problems.push(problem);
            }
            Err(FileError {
                file: file.to_string(),
                problems,
            })
        }
    }
}

/// The profile at its stored version in the file's shape (also the JSON API's).
pub fn to_file(profile: &ThresholdProfile) -> ProfileFile {
    let rule = profile
        .rules
        .iter()
        .map(|r| match MetricKey::parse(&r.metric) {
            Ok(key) => {
                let unit = key.def().unit;
                RuleEntry {
                    metric: key.base.to_string(),
                    param: key.param.clone(),
                    at_concurrency: key.concurrency,
                    comparator: r.comparator.as_str().to_string(),
                    // As the form shows it: 95 for 0.95, without float noise (7.000000000000001).
                    value: format::at_most_decimals(unit.to_display(r.value), 6)
                        .parse()
                        .unwrap_or(unit.to_display(r.value)),
                    unit: Some(unit.symbol().to_string()),
                    rationale: r.rationale.clone(),
                }
            }
            // A metric no longer in the catalog: written as stored, so the file says what it held.
            Err(_) => RuleEntry {
                metric: r.metric.clone(),
                comparator: r.comparator.as_str().to_string(),
                value: r.value,
                rationale: r.rationale.clone(),
                ..RuleEntry::default()
            },
        })
        .collect();
    ProfileFile {
        bakeoff_profile: VERSION,
        name: profile.name.clone(),
        description: profile.description.clone(),
        rule,
    }
}

/// The profile at its stored version as a file.
pub fn export(profile: &ThresholdProfile) -> Result<String, AppError> {
    let file = to_file(profile);
    let body = to_toml(&file).map_err(|e| AppError::Invalid(format!("the profile cannot be written as TOML: {e}")))?;
    Ok(format!(
        "# bakeoff threshold profile {:?}, version {}. Values are in the unit shown (95 = 95 %).\n{body}",
        profile.name, profile.version
    ))
}

/// What importing did to the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileImported {
    Created,
    /// A new version was appended.
    NewVersion,
    /// The current version already has these rules and this description.
    Unchanged,
}

impl ProfileImported {
    pub fn as_str(&self) -> &'static str {
        match self {
            ProfileImported::Created => "created",
            ProfileImported::NewVersion => "new version",
            ProfileImported::Unchanged => "unchanged",
        }
    }
}

/// Stores a checked profile: created, a new version of the stored profile of that name, or
/// nothing when the current version already says the same. Audited as `actor`.
pub async fn import(
    store: &DynStore,
    save: &ProfileSave,
    actor: &str,
) -> Result<(ThresholdProfile, ProfileImported), AppError> {
    let existing = store
        .list_threshold_profiles()
        .await?
        .into_iter()
        .find(|p| p.name == save.name);
    if let Some(p) = &existing
        && p.rules == save.rules
        && p.description == save.description
    {
        return Ok((p.clone(), ProfileImported::Unchanged));
    }
    let how = if existing.is_none() {
        "created, imported from a file, "
    } else {
        "imported from a file, "
    };
    let (id, version) = crate::profiles::save(store, save, actor, how).await?;
    let stored = store
        .get_threshold_profile(id, Some(version))
        .await?
        .ok_or_else(|| AppError::NotFound(format!("threshold profile #{id}")))?;
    let outcome = if existing.is_some() {
        ProfileImported::NewVersion
    } else {
        ProfileImported::Created
    };
    Ok((stored, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"bakeoff_profile = 1
name = "batch summarisation"
description = "the article's example"

[[rule]]
metric = "aggregate_tok_s"
at_concurrency = 8
comparator = ">="
value = 500
unit = "tok/s"

[[rule]]
metric = "accuracy"
comparator = ">="
value = 95
rationale = "reviewers check 5 %"

[[rule]]
metric = "failure_rate"
param = "http_5xx"
comparator = "<"
value = 2
"#;

    #[test]
    fn a_profile_file_reads_in_shown_units_and_writes_back_the_same() {
        let save = parse("p.toml", FILE, "ana", "from the repo").unwrap();
        let keys: Vec<&str> = save.rules.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(keys, ["aggregate_tok_s@c=8", "accuracy", "failure_rate:http_5xx"]);
        assert!((save.rules[1].value - 0.95).abs() < 1e-12);
        let profile = ThresholdProfile {
            id: 1,
            name: save.name.clone(),
            description: save.description.clone(),
            version: 3,
            rules: save.rules.clone(),
        };
        let text = export(&profile).unwrap();
        assert!(text.contains("value = 95"), "{text}");
        assert_eq!(
            parse("back.toml", &text, "ana", "from the repo").unwrap(),
            save,
            "{text}"
        );
    }

    #[test]
    fn bad_rules_name_their_line_and_field() {
        let bad = FILE
            .replace("value = 95\n", "value = 120\n")
            .replace("unit = \"tok/s\"", "unit = \"%\"")
            .replace("param = \"http_5xx\"", "param = \"teapot\"");
        let e = parse("p.toml", &bad, "ana", "x").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("p.toml:10: field `rule[0].unit`"), "{text}");
        assert!(
            text.contains("p.toml:15: field `rule[1].value`: is a percentage"),
            "{text}"
        );
        assert!(text.contains("p.toml:20: field `rule[2].param`"), "{text}");
        let unsigned = parse("p.toml", FILE, "", "").unwrap_err().to_string();
        assert!(
            unsigned.contains("--changed-by") && unsigned.contains("--rationale"),
            "{unsigned}"
        );
        let none = parse("p.toml", "bakeoff_profile = 1\nname = \"x\"\n", "a", "b").unwrap_err();
        assert!(none.to_string().contains("field `rule`"), "{none}");
    }
}
