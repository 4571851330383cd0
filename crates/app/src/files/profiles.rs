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
use crate::domain::thresholds::slo::SloDraft;
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
    /// The profile's SLO block: where set, it judges the SLO-based rules (`slo_attainment`,
    /// `capacity_at_slo`, cost at capacity) of the runs this profile judges, in place of each
    /// run's own SLO, and a find-capacity run may take it instead of an SLO of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloEntry>,
}

/// Per-request limits in milliseconds (a request meets the SLO when it meets every limit set;
/// failed requests are misses) and the share of requests that must meet them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SloEntry {
    /// Time to first token (reasoning or content), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3600000.0))]
    pub ttft_ms: Option<f64>,
    /// Time to first answer (content) token, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3600000.0))]
    pub ttfa_ms: Option<f64>,
    /// Time per output token after the first, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3600000.0))]
    pub tpot_ms: Option<f64>,
    /// Send to end of stream, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 3600000.0))]
    pub e2e_ms: Option<f64>,
    /// Percent of requests that must meet every limit (95 means 95 %); required.
    #[schemars(range(min = 0.1, max = 100.0))]
    pub target_percent: Option<f64>,
    /// Limits for conversation turns from `from_turn` on (each replaces the limit above for
    /// those turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub later_turns: Option<LaterTurnsEntry>,
}

/// Limits for the later turns of conversation cases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LaterTurnsEntry {
    /// The first turn (1-based, 2 to 64) these limits apply to.
    #[schemars(range(min = 2, max = 64))]
    pub from_turn: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfa_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

impl SloEntry {
    /// The block as the form's fields.
    fn draft(&self) -> SloDraft {
        let n = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        let later = self.later_turns.clone().unwrap_or_default();
        SloDraft {
            ttft_ms: n(self.ttft_ms),
            ttfa_ms: n(self.ttfa_ms),
            tpot_ms: n(self.tpot_ms),
            e2e_ms: n(self.e2e_ms),
            target_percent: n(self.target_percent),
            from_turn: self
                .later_turns
                .as_ref()
                .map(|t| t.from_turn.to_string())
                .unwrap_or_default(),
            later_ttft_ms: n(later.ttft_ms),
            later_ttfa_ms: n(later.ttfa_ms),
            later_tpot_ms: n(later.tpot_ms),
            later_e2e_ms: n(later.e2e_ms),
        }
    }

    pub fn of(slo: &crate::domain::run::Slo) -> SloEntry {
        SloEntry {
            ttft_ms: slo.ttft_ms,
            ttfa_ms: slo.ttfa_ms,
            tpot_ms: slo.tpot_ms,
            e2e_ms: slo.e2e_ms,
            target_percent: slo
                .target_attainment
                .map(|t| format::at_most_decimals(t * 100.0, 6).parse().unwrap_or(t * 100.0)),
            later_turns: slo.later_turns.map(|t| LaterTurnsEntry {
                from_turn: t.from_turn,
                ttft_ms: t.ttft_ms,
                ttfa_ms: t.ttfa_ms,
                tpot_ms: t.tpot_ms,
                e2e_ms: t.e2e_ms,
            }),
        }
    }
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
        "slo_target" => vec![k("slo"), k("target_percent")],
        "slo_from_turn" => vec![k("slo"), k("later_turns"), k("from_turn")],
        later if later.starts_with("slo_later_") => vec![k("slo"), k("later_turns"), k(&later["slo_later_".len()..])],
        slo if slo.starts_with("slo_") => vec![k("slo"), k(&slo["slo_".len()..])],
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
        slo: parsed.slo.as_ref().map(SloEntry::draft).unwrap_or_default(),
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
        slo: profile.slo.as_ref().map(SloEntry::of),
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
        && p.slo == save.slo
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
            slo: save.slo,
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
    fn an_slo_block_reads_writes_back_and_names_bad_fields() {
        let with_slo = format!(
            "{FILE}\n[slo]\nttft_ms = 800\ne2e_ms = 5000\ntarget_percent = 95\n\n[slo.later_turns]\nfrom_turn = 3\nttft_ms = 1500\n"
        );
        let save = parse("p.toml", &with_slo, "ana", "slo").unwrap();
        let slo = save.slo.unwrap();
        assert_eq!((slo.ttft_ms, slo.target_attainment), (Some(800.0), Some(0.95)));
        assert_eq!(
            slo.later_turns.map(|t| (t.from_turn, t.ttft_ms)),
            Some((3, Some(1500.0)))
        );
        let profile = ThresholdProfile {
            id: 1,
            name: save.name.clone(),
            description: save.description.clone(),
            version: 1,
            rules: save.rules.clone(),
            slo: save.slo,
        };
        let text = export(&profile).unwrap();
        assert!(text.contains("[slo]") && text.contains("target_percent = 95"), "{text}");
        assert_eq!(parse("back.toml", &text, "ana", "slo").unwrap(), save, "{text}");
        let bad = with_slo
            .replace("ttft_ms = 800", "ttft_ms = -5")
            .replace("target_percent = 95", "target_percent = 150");
        let e = parse("p.toml", &bad, "ana", "x").unwrap_err().to_string();
        assert!(e.contains("field `slo.ttft_ms`"), "{e}");
        assert!(e.contains("field `slo.target_percent`"), "{e}");
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
