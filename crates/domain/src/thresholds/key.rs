//! Metric keys as rules store them: `base[:param][@c=N]`.
use super::catalog::{MetricDef, Param, metric_def};
use crate::operability::{ChecklistItem, ProbeKind};
use crate::run::ErrorClass;
use crate::validation::MAX_NAME_CHARS;

/// A parsed metric key: catalog entry, parameter and load condition.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricKey {
    pub base: &'static str,
    /// Grader name, or error class string.
    pub param: Option<String>,
    /// `@c=N`: the concurrency the figure must be measured at.
    pub concurrency: Option<u32>,
}

impl MetricKey {
    /// Parses `base[:param][@c=N]`; the error says what is wrong in words.
    pub fn parse(key: &str) -> Result<MetricKey, String> {
        let key = key.trim();
        // An incumbent's name may hold `@` or `:`: everything after the first `:` is the name.
        if let Some((base, name)) = key.split_once(':')
            && let Some(def) = metric_def(base.trim()).filter(|d| d.param == Param::Incumbent)
        {
            let name = name.trim();
            if name.chars().count() > MAX_NAME_CHARS {
                return Err("the incumbent's name is too long".to_string());
            }
            return Ok(MetricKey {
                base: def.base,
                param: Some(name.to_string()).filter(|n| !n.is_empty()),
                concurrency: None,
            });
        }
        let (rest, load) = match key.split_once('@') {
            Some((rest, load)) => (rest, Some(load)),
            None => (key, None),
        };
        let (base, param) = match rest.split_once(':') {
            Some((b, p)) => (b, Some(p.trim().to_string()).filter(|p| !p.is_empty())),
            None => (rest, None),
        };
        let def = metric_def(base.trim()).ok_or_else(|| format!("{base:?} is not a metric in the catalog"))?;
        match (def.param, &param) {
            (Param::None, Some(p)) => return Err(format!("{} takes no parameter (got {p:?})", def.label)),
            (Param::Grader, None) => return Err(format!("{} needs a grader name", def.label)),
            (Param::Grader, Some(p)) if p.chars().count() > MAX_NAME_CHARS => {
                return Err("the grader name is too long".to_string());
            }
            (Param::ErrorClass, Some(p)) if ErrorClass::parse(p).is_none() => {
                return Err(format!("{p:?} is not an error class"));
            }
            (Param::Probe, None) => return Err(format!("{} needs a probe name", def.label)),
            (Param::Probe, Some(p)) if ProbeKind::parse(p).is_none() => {
                return Err(format!("{p:?} is not an endpoint probe"));
            }
            (Param::Turn, None) => return Err(format!("{} needs a turn number (turn_ttft_p95:5)", def.label)),
            (Param::Turn, Some(p)) if crate::conversation::turn_param(p).is_none() => {
                return Err(format!("{p:?} is not a turn number from 1 to 64"));
            }
            (Param::ChecklistItem, None) => return Err(format!("{} needs a checklist item", def.label)),
            (Param::ChecklistItem, Some(p)) if ChecklistItem::parse(p).is_none() => {
                return Err(format!("{p:?} is not a checklist item"));
            }
            _ => {}
        }
        let concurrency = match load {
            None => None,
            Some(_) if !def.per_load => {
                return Err(format!(
                    "{} is judged over the whole run; it takes no load condition",
                    def.label
                ));
            }
            Some(load) => {
                let n = load
                    .trim()
                    .strip_prefix("c=")
                    .and_then(|n| n.trim().parse::<u32>().ok())
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or_else(|| format!("load condition {load:?} must read c=N with N from 1 to 1024"))?;
                Some(n)
            }
        };
        Ok(MetricKey {
            base: def.base,
            param,
            concurrency,
        })
    }

    pub fn def(&self) -> &'static MetricDef {
        // `parse` only builds keys from catalog entries.
        metric_def(self.base).expect("a parsed metric key names a catalog entry")
    }

    /// The key as stored: `base[:param][@c=N]`.
    pub fn to_key(&self) -> String {
        let mut s = self.base.to_string();
        if let Some(p) = &self.param {
            s.push(':');
            s.push_str(p);
        }
        if let Some(c) = self.concurrency {
            s.push_str(&format!("@c={c}"));
        }
        s
    }

    /// Label with parameter and load: `failure rate (rate_limited)`, `TTFT p95 @c=8`; a named
    /// incumbent in place of the word: `blind win rate vs gpt-4o (humans)`.
    pub fn label(&self) -> String {
        let d = self.def();
        if d.param == Param::Incumbent {
            return match &self.param {
                Some(name) => d.label.replacen("incumbent", name, 1),
                None => d.label.to_string(),
            };
        }
        let mut s = d.label.to_string();
        if let Some(p) = &self.param {
            s.push_str(&format!(" ({p})"));
        }
        if let Some(c) = self.concurrency {
            s.push_str(&format!(" @c={c}"));
        }
        s
    }

    pub fn error_class(&self) -> Option<ErrorClass> {
        match self.def().param {
            Param::ErrorClass => self.param.as_deref().and_then(ErrorClass::parse),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thresholds::catalog::CATALOG;

    #[test]
    fn metric_keys_parse_with_params_and_loads() {
        let k = MetricKey::parse("ttft_p95_ms@c=8").unwrap();
        assert_eq!((k.base, k.concurrency), ("ttft_p95_ms", Some(8)));
        assert_eq!(k.label(), "TTFT p95 @c=8");
        assert_eq!(k.to_key(), "ttft_p95_ms@c=8");
        let k = MetricKey::parse("failure_rate:rate_limited").unwrap();
        assert_eq!(k.error_class(), Some(ErrorClass::RateLimited));
        assert_eq!(k.label(), "failure rate (rate_limited)");
        assert!(MetricKey::parse("grader_score").unwrap_err().contains("grader name"));
        assert!(MetricKey::parse("accuracy@c=4").unwrap_err().contains("whole run"));
        assert!(
            MetricKey::parse("failure_rate:teapot")
                .unwrap_err()
                .contains("not an error class")
        );
        assert!(MetricKey::parse("tok_s").unwrap_err().contains("not a metric"));
        assert!(MetricKey::parse("aggregate_tok_s@c=0").is_err());
        assert!(
            MetricKey::parse("probe:teleport")
                .unwrap_err()
                .contains("not an endpoint probe")
        );
        assert!(
            MetricKey::parse("checklist")
                .unwrap_err()
                .contains("needs a checklist item")
        );
        let k = MetricKey::parse("blind_win_rate:gpt-4o@eu:v2").unwrap();
        assert_eq!((k.param.as_deref(), k.concurrency), (Some("gpt-4o@eu:v2"), None));
        assert_eq!(k.to_key(), "blind_win_rate:gpt-4o@eu:v2");
        assert_eq!(k.label(), "blind win rate vs gpt-4o@eu:v2 (humans)");
        let k = MetricKey::parse("judge_win_rate").unwrap();
        assert_eq!(k.param, None);
        assert_eq!(k.label(), "blind win rate vs incumbent (LLM judge, both orders)");
        assert_eq!(
            MetricKey::parse("probe:usage_in_stream").unwrap().label(),
            "endpoint probe (usage_in_stream)"
        );
        for d in CATALOG {
            let key = match d.param {
                Param::Grader => format!("{}:exact", d.base),
                Param::Probe => format!("{}:usage_in_stream", d.base),
                Param::ChecklistItem => format!("{}:monitoring", d.base),
                Param::Turn => format!("{}:3", d.base),
                Param::Incumbent => format!("{}:gpt-4o@eu:v2", d.base),
                _ => d.base.to_string(),
            };
            assert!(MetricKey::parse(&key).is_ok(), "{key}");
        }
    }
}
