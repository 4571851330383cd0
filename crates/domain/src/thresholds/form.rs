//! The profile form as typed, and its validation into rules.
use super::catalog::{Param, metric_def};
use super::key::MetricKey;
use super::units::Unit;
use super::{Comparator, ThresholdProfile, ThresholdRule};
use crate::format;
use crate::operability::{ChecklistItem, ProbeKind};
use crate::run::ErrorClass;
use crate::validation::{FieldErrors, MAX_FIELD_CHARS, optional_text, required_text};

/// How many empty rule rows the form offers for new rules.
pub const BLANK_RULE_ROWS: usize = 3;
/// Most rules one profile may hold.
pub const MAX_RULES: usize = 50;

/// One rule row as typed. `value` is in the unit shown (percent for proportions).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleDraft {
    pub metric: String,
    /// Grader name or error class.
    pub param: String,
    /// Load condition: a concurrency, or blank for the run's own.
    pub concurrency: String,
    pub comparator: String,
    pub value: String,
    pub rationale: String,
}

impl RuleDraft {
    pub fn is_blank(&self) -> bool {
        self.metric.trim().is_empty()
            && self.param.trim().is_empty()
            && self.concurrency.trim().is_empty()
            && self.value.trim().is_empty()
            && self.rationale.trim().is_empty()
    }

    /// The row pre-filled from a stored rule.
    pub fn from_rule(rule: &ThresholdRule) -> RuleDraft {
        match MetricKey::parse(&rule.metric) {
            Ok(key) => RuleDraft {
                metric: key.base.to_string(),
                param: key.param.clone().unwrap_or_default(),
                concurrency: key.concurrency.map(|c| c.to_string()).unwrap_or_default(),
                comparator: rule.comparator.as_str().to_string(),
                value: format::at_most_decimals(key.def().unit.to_display(rule.value), 6),
                rationale: rule.rationale.clone(),
            },
            Err(_) => RuleDraft {
                metric: rule.metric.clone(),
                comparator: rule.comparator.as_str().to_string(),
                value: rule.value.to_string(),
                rationale: rule.rationale.clone(),
                ..Default::default()
            },
        }
    }
}

/// The profile form as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileDraft {
    pub name: String,
    pub description: String,
    /// Who is saving ("your name").
    pub changed_by: String,
    /// Why this change.
    pub change_rationale: String,
    pub rules: Vec<RuleDraft>,
    /// The SLO block as typed (all blank: none).
    pub slo: super::slo::SloDraft,
}

/// A validated profile save.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileSave {
    pub name: String,
    pub description: String,
    pub changed_by: String,
    pub change_rationale: String,
    pub rules: Vec<ThresholdRule>,
    pub slo: Option<crate::run::Slo>,
}

/// The field name of rule row `i`'s `part`, as the form and its errors use it.
pub fn rule_field(i: usize, part: &str) -> String {
    format!("rule{i}_{part}")
}

impl ProfileDraft {
    pub fn from_profile(p: &ThresholdProfile) -> ProfileDraft {
        ProfileDraft {
            name: p.name.clone(),
            description: p.description.clone(),
            changed_by: String::new(),
            change_rationale: String::new(),
            rules: p.rules.iter().map(RuleDraft::from_rule).collect(),
            slo: super::slo::SloDraft::from_slo(p.slo.as_ref()),
        }
    }

    /// Validates every field and rule row, collecting all problems. Blank rows are skipped; a
    /// row with metric "" but other text is an error (nothing typed is silently dropped).
    pub fn validate(&self) -> Result<ProfileSave, FieldErrors> {
        let mut e = FieldErrors::default();
        let name = crate::validation::name(&mut e, "name", &self.name);
        let description = optional_text(&mut e, "description", &self.description, MAX_FIELD_CHARS);
        let changed_by = crate::validation::name(&mut e, "changed_by", &self.changed_by);
        let change_rationale = required_text(&mut e, "change_rationale", &self.change_rationale, MAX_FIELD_CHARS);
        let mut rules: Vec<ThresholdRule> = Vec::new();
        for (i, row) in self.rules.iter().enumerate() {
            if row.is_blank() {
                continue;
            }
            if let Some(rule) = validate_rule(&mut e, i, row) {
                if rules.iter().any(|r| r.metric == rule.metric) {
                    e.add(
                        rule_field(i, "metric"),
                        "repeats a metric already in this profile (one rule per metric and condition)",
                    );
                } else {
                    rules.push(rule);
                }
            }
        }
        let slo = self.slo.validate(&mut e);
        if rules.is_empty() && e.is_empty() {
            e.add("rules", "a profile needs at least one rule");
        }
        if rules.len() > MAX_RULES {
            e.add("rules", format!("a profile holds at most {MAX_RULES} rules"));
        }
        e.into_result(ProfileSave {
            name: name.unwrap_or_default(),
            description: description.unwrap_or_default(),
            changed_by: changed_by.unwrap_or_default(),
            change_rationale: change_rationale.unwrap_or_default(),
            rules,
            slo,
        })
    }
}

fn validate_rule(e: &mut FieldErrors, i: usize, row: &RuleDraft) -> Option<ThresholdRule> {
    let before = e.0.len();
    let Some(def) = metric_def(row.metric.trim()) else {
        let message = if row.metric.trim().is_empty() {
            "choose a metric (or clear the row)".to_string()
        } else {
            format!("{:?} is not a metric in the catalog", row.metric.trim())
        };
        e.add(rule_field(i, "metric"), message);
        return None;
    };
    let mut key = def.base.to_string();
    let param = row.param.trim();
    match def.param {
        Param::None if !param.is_empty() => e.add(rule_field(i, "param"), format!("{} takes no parameter", def.label)),
        Param::Grader if param.is_empty() => {
            e.add(rule_field(i, "param"), "name the grader, e.g. exact or json_fields")
        }
        Param::ErrorClass if !param.is_empty() && ErrorClass::parse(param).is_none() => e.add(
            rule_field(i, "param"),
            format!("{param:?} is not an error class (e.g. http_5xx, rate_limited, stream_cut)"),
        ),
        Param::Probe if ProbeKind::parse(param).is_none() => e.add(
            rule_field(i, "param"),
            format!(
                "name a probe: {}",
                ProbeKind::ALL.iter().map(|k| k.key()).collect::<Vec<_>>().join(", ")
            ),
        ),
        Param::Turn if crate::conversation::turn_param(param).is_none() => e.add(
            rule_field(i, "param"),
            format!("{} needs a turn number from 1 to 64", def.label),
        ),
        Param::ChecklistItem if ChecklistItem::parse(param).is_none() => e.add(
            rule_field(i, "param"),
            format!(
                "name a checklist item: {}",
                ChecklistItem::ALL
                    .iter()
                    .map(|k| k.key())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Param::Incumbent if param.chars().count() > crate::validation::MAX_NAME_CHARS => {
            e.add(rule_field(i, "param"), "the incumbent's name is too long")
        }
        _ if !param.is_empty() => key.push_str(&format!(":{param}")),
        _ => {}
    }
    let concurrency = row.concurrency.trim();
    if !concurrency.is_empty() {
        match concurrency.parse::<u32>() {
            _ if !def.per_load => e.add(
                rule_field(i, "concurrency"),
                format!("{} is judged over the whole run; leave the load blank", def.label),
            ),
            Ok(n) if (1..=1024).contains(&n) => key.push_str(&format!("@c={n}")),
            _ => e.add(rule_field(i, "concurrency"), "must be a whole number from 1 to 1024"),
        }
    }
    let comparator = Comparator::parse(&row.comparator);
    if comparator.is_none() {
        e.add(rule_field(i, "comparator"), "choose one of ≥, >, ≤, <");
    }
    let value = match row.value.trim() {
        "" => {
            e.add(rule_field(i, "value"), "is required");
            None
        }
        raw => match raw.replace(['%', ',', '$'], "").trim().parse::<f64>() {
            Ok(v) if !v.is_finite() || v < 0.0 => {
                e.add(rule_field(i, "value"), "must be a number of at least 0");
                None
            }
            Ok(v) if def.unit == Unit::Percent && v > 100.0 => {
                e.add(rule_field(i, "value"), "is a percentage: at most 100");
                None
            }
            Ok(v) => Some(def.unit.from_display(v)),
            Err(_) => {
                e.add(
                    rule_field(i, "value"),
                    format!(
                        "must be a number {}, got {:?}",
                        if def.unit == Unit::Percent {
                            "from 0 to 100"
                        } else {
                            "of at least 0"
                        },
                        crate::validation::truncate(raw, 40)
                    ),
                );
                None
            }
        },
    };
    let rationale = optional_text(e, &rule_field(i, "rationale"), &row.rationale, MAX_FIELD_CHARS);
    if e.0.len() > before {
        return None;
    }
    Some(ThresholdRule {
        metric: key,
        comparator: comparator?,
        value: value?,
        unit: def.unit.stored_name().to_string(),
        rationale: rationale.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(metric: &str, cmp: &str, value: &str) -> RuleDraft {
        RuleDraft {
            metric: metric.into(),
            comparator: cmp.into(),
            value: value.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_draft_converts_percent_and_builds_keys() {
        let draft = ProfileDraft {
            name: " Batch ".into(),
            description: "".into(),
            changed_by: "ana".into(),
            change_rationale: "first cut".into(),
            slo: Default::default(),
            rules: vec![
                row("accuracy", ">=", "95"),
                RuleDraft {
                    concurrency: "8".into(),
                    rationale: "users wait".into(),
                    ..row("ttft_p95_ms", "<=", "1000")
                },
                RuleDraft {
                    param: "http_5xx".into(),
                    ..row("failure_rate", "<", "1.5 %")
                },
                RuleDraft::default(),
            ],
        };
        let save = draft.validate().unwrap();
        assert_eq!(save.name, "Batch");
        let keys: Vec<&str> = save.rules.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(keys, ["accuracy", "ttft_p95_ms@c=8", "failure_rate:http_5xx"]);
        assert!((save.rules[0].value - 0.95).abs() < 1e-12);
        assert_eq!(save.rules[0].unit, "fraction");
        assert!((save.rules[2].value - 0.015).abs() < 1e-12);
        assert_eq!(save.rules[1].rationale, "users wait");
        // Round trip through the form.
        let back = RuleDraft::from_rule(&save.rules[1]);
        assert_eq!(
            (back.metric.as_str(), back.concurrency.as_str(), back.value.as_str()),
            ("ttft_p95_ms", "8", "1000")
        );
        assert_eq!(RuleDraft::from_rule(&save.rules[0]).value, "95");
    }

    #[test]
    fn every_bad_field_is_reported_by_row() {
        let draft = ProfileDraft {
            name: "".into(),
            changed_by: "".into(),
            change_rationale: "".into(),
            rules: vec![
                row("accuracy", ">=", "120"),
                row("teapot", ">=", "1"),
                row("grader_score", "=", "abc"),
                RuleDraft {
                    concurrency: "4".into(),
                    ..row("pass_rate", ">=", "90")
                },
                row("accuracy", ">=", "90"),
                RuleDraft {
                    rationale: "forgot the metric".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let e = draft.validate().unwrap_err();
        for field in [
            "name",
            "changed_by",
            "change_rationale",
            "rule0_value",
            "rule1_metric",
            "rule2_param",
            "rule2_comparator",
            "rule2_value",
            "rule3_concurrency",
            "rule5_metric",
        ] {
            assert!(e.get(field).is_some(), "no error for {field}: {e}");
        }
        // Row 4 repeats accuracy only if row 0 was valid; row 0 was not, so no duplicate error.
        assert!(e.get("rule4_metric").is_none(), "{e}");
        let dup = ProfileDraft {
            name: "x".into(),
            changed_by: "a".into(),
            change_rationale: "b".into(),
            rules: vec![row("accuracy", ">=", "90"), row("accuracy", ">=", "95")],
            ..Default::default()
        };
        assert!(
            dup.validate()
                .unwrap_err()
                .get("rule1_metric")
                .unwrap()
                .contains("repeats")
        );
        let empty = ProfileDraft {
            name: "x".into(),
            changed_by: "a".into(),
            change_rationale: "b".into(),
            ..Default::default()
        };
        assert!(empty.validate().unwrap_err().get("rules").is_some());
    }
}
