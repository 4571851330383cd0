//! How a profile's rules changed between two versions.
use super::ThresholdRule;

/// How one rule changed between two versions.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleChange {
    Added(ThresholdRule),
    Removed(ThresholdRule),
    Changed { old: ThresholdRule, new: ThresholdRule },
}

impl RuleChange {
    /// One line in words: `accuracy ≥ 95 % → ≥ 97 %`, `added TTFT p95 ≤ 1000 ms`.
    pub fn describe(&self) -> String {
        match self {
            RuleChange::Added(r) => format!("added {}", r.describe()),
            RuleChange::Removed(r) => format!("removed {}", r.describe()),
            RuleChange::Changed { old, new } => {
                let (o, n) = (old.describe(), new.describe());
                if o == n {
                    format!("{o}: rationale changed")
                } else {
                    format!("{o} → {n}")
                }
            }
        }
    }
    pub fn kind(&self) -> &'static str {
        match self {
            RuleChange::Added(_) => "added",
            RuleChange::Removed(_) => "removed",
            RuleChange::Changed { .. } => "changed",
        }
    }
}

/// Rule-by-rule differences from `old` to `new`, matched by metric key, in `new`'s order
/// followed by removals.
pub fn diff_rules(old: &[ThresholdRule], new: &[ThresholdRule]) -> Vec<RuleChange> {
    let mut changes = Vec::new();
    for n in new {
        match old.iter().find(|o| o.metric == n.metric) {
            None => changes.push(RuleChange::Added(n.clone())),
            Some(o) if o != n => changes.push(RuleChange::Changed {
                old: o.clone(),
                new: n.clone(),
            }),
            Some(_) => {}
        }
    }
    for o in old {
        if !new.iter().any(|n| n.metric == o.metric) {
            changes.push(RuleChange::Removed(o.clone()));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thresholds::Comparator;
    use crate::thresholds::templates::{batch_default_rules, rule};

    #[test]
    fn diffs_match_rules_by_metric() {
        let old = batch_default_rules();
        let mut new = old.clone();
        new[1].value = 0.97;
        new.remove(2);
        new.push(rule("ttft_p95_ms", Comparator::AtMost, 800.0, "dashboards"));
        let d = diff_rules(&old, &new);
        let lines: Vec<String> = d.iter().map(RuleChange::describe).collect();
        assert_eq!(
            lines,
            [
                "accuracy ≥ 95 % → accuracy ≥ 97 %",
                "added TTFT p95 ≤ 800 ms",
                "removed failure rate < 2 %"
            ]
        );
        assert!(diff_rules(&old, &old).is_empty());
    }
}
