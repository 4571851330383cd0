//! Pipeline impact (Amdahl's law): how much faster the whole pipeline gets when only the model
//! stage gets faster, so "3× faster model" is read as the end-to-end speed-up it really buys.
use serde::{Deserialize, Serialize};

use super::validation::{FieldErrors, optional_number, optional_text};

/// Most stages the form accepts besides the model.
pub const MAX_STAGES: usize = 6;

/// A pipeline stage other than the model, with its time per item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub name: String,
    pub seconds_per_item: f64,
}

/// What the user states about the rest of their pipeline.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PipelineSpec {
    /// Other stages with their time per item (data prep, post-processing, error handling…).
    pub stages: Vec<Stage>,
    /// Alternatively: the model's share of today's end-to-end time, in (0, 1].
    pub model_share: Option<f64>,
}

impl PipelineSpec {
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty() && self.model_share.is_none()
    }

    /// Seconds per item spent outside the model.
    pub fn other_seconds(&self) -> f64 {
        self.stages.iter().map(|s| s.seconds_per_item).sum()
    }

    /// End-to-end speed-up when the model stage goes from `baseline_model_s` to
    /// `candidate_model_s` seconds per item. None when nothing is stated or the times are unusable.
    pub fn speedup(&self, baseline_model_s: f64, candidate_model_s: f64) -> Option<f64> {
        if !(baseline_model_s > 0.0 && candidate_model_s > 0.0) {
            return None;
        }
        if !self.stages.is_empty() {
            return Some(stage_speedup(self.other_seconds(), baseline_model_s, candidate_model_s));
        }
        self.model_share
            .map(|share| amdahl(share, baseline_model_s / candidate_model_s))
    }

    /// The model's share of today's pipeline time (with the baseline model).
    pub fn baseline_share(&self, baseline_model_s: f64) -> Option<f64> {
        if !self.stages.is_empty() {
            let total = self.other_seconds() + baseline_model_s;
            (total > 0.0).then(|| baseline_model_s / total)
        } else {
            self.model_share
        }
    }
}

/// Amdahl's law: the overall speed-up when a part taking `share` of the time gets `factor`
/// times faster: 1 / ((1 − share) + share / factor).
pub fn amdahl(share: f64, factor: f64) -> f64 {
    let share = share.clamp(0.0, 1.0);
    1.0 / ((1.0 - share) + share / factor)
}

/// Speed-up of a pipeline whose other stages take `other_s` per item, when the model stage goes
/// from `baseline_s` to `candidate_s`.
pub fn stage_speedup(other_s: f64, baseline_s: f64, candidate_s: f64) -> f64 {
    (other_s + baseline_s) / (other_s + candidate_s)
}

/// The pipeline form as typed: stage names and seconds (parallel lists) or a model share in %.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipelineDraft {
    pub stage_names: Vec<String>,
    pub stage_seconds: Vec<String>,
    pub model_share_percent: String,
}

impl PipelineDraft {
    pub fn from_spec(spec: &PipelineSpec) -> PipelineDraft {
        PipelineDraft {
            stage_names: spec.stages.iter().map(|s| s.name.clone()).collect(),
            stage_seconds: spec.stages.iter().map(|s| s.seconds_per_item.to_string()).collect(),
            model_share_percent: spec.model_share.map(|s| (s * 100.0).to_string()).unwrap_or_default(),
        }
    }

    pub fn validate(&self) -> Result<PipelineSpec, FieldErrors> {
        let mut e = FieldErrors::default();
        let mut stages = Vec::new();
        let rows = self.stage_names.len().max(self.stage_seconds.len());
        for i in 0..rows {
            let name = self.stage_names.get(i).map(String::as_str).unwrap_or("");
            let secs = self.stage_seconds.get(i).map(String::as_str).unwrap_or("");
            if name.trim().is_empty() && secs.trim().is_empty() {
                continue;
            }
            let name_field = format!("stage{i}_name");
            let secs_field = format!("stage{i}_seconds");
            let name = optional_text(&mut e, &name_field, name, 100).unwrap_or_else(|| format!("stage {}", i + 1));
            match optional_number::<f64>(&mut e, &secs_field, secs, 0.0, 1e7) {
                Some(s) => stages.push(Stage {
                    name,
                    seconds_per_item: s,
                }),
                None if secs.trim().is_empty() => e.add(secs_field, "is required for a named stage"),
                None => {}
            }
        }
        if stages.len() > MAX_STAGES {
            e.add("stages", format!("at most {MAX_STAGES} stages"));
        }
        let model_share =
            optional_number::<f64>(&mut e, "model_share", &self.model_share_percent, 0.0, 100.0).map(|p| p / 100.0);
        if model_share == Some(0.0) {
            e.add("model_share", "must be more than 0 %");
        }
        e.into_result(PipelineSpec { stages, model_share })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_three_times_faster_model_is_a_1_4_times_faster_pipeline_at_43_percent() {
        // 1 / (0.57 + 0.43 / 3) = 1 / 0.71333 = 1.4019
        assert!((amdahl(0.43, 3.0) - 1.4019).abs() < 1e-4);
        assert_eq!(crate::format::factor(amdahl(0.43, 3.0)), "1.4×");
        // Half the time in the model, model twice as fast: 1 / (0.5 + 0.25) = 4/3.
        assert!((amdahl(0.5, 2.0) - 4.0 / 3.0).abs() < 1e-12);
        // All the time in the model: the model's own factor.
        assert!((amdahl(1.0, 3.0) - 3.0).abs() < 1e-12);
        // A slower model slows the pipeline: 1 / (0.5 + 0.5 × 2) = 0.667.
        assert!((amdahl(0.5, 0.5) - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn stated_stages_give_the_same_answer_as_the_share() {
        // Prep 2 s + post 1 s; model 3 s → 1 s per item: (3 + 3) / (3 + 1) = 1.5.
        let spec = PipelineSpec {
            stages: vec![
                Stage {
                    name: "prep".into(),
                    seconds_per_item: 2.0,
                },
                Stage {
                    name: "post".into(),
                    seconds_per_item: 1.0,
                },
            ],
            model_share: None,
        };
        assert_eq!(spec.speedup(3.0, 1.0), Some(1.5));
        assert_eq!(spec.baseline_share(3.0), Some(0.5));
        assert!((amdahl(0.5, 3.0) - 1.5).abs() < 1e-12);
        let share_only = PipelineSpec {
            stages: vec![],
            model_share: Some(0.5),
        };
        assert!((share_only.speedup(3.0, 1.0).unwrap() - 1.5).abs() < 1e-12);
        assert_eq!(PipelineSpec::default().speedup(3.0, 1.0), None);
        assert_eq!(spec.speedup(0.0, 1.0), None);
    }

    #[test]
    fn the_form_validates_rows_and_share() {
        let d = PipelineDraft {
            stage_names: vec!["prep".into(), "".into(), "post".into()],
            stage_seconds: vec!["1.5".into(), "".into(), "x".into()],
            model_share_percent: "140".into(),
        };
        let e = d.validate().unwrap_err();
        assert!(e.get("stage2_seconds").unwrap().contains("number"));
        assert!(e.get("model_share").is_some());
        let ok = PipelineDraft {
            stage_names: vec!["prep".into()],
            stage_seconds: vec!["1.5".into()],
            model_share_percent: "".into(),
        }
        .validate()
        .unwrap();
        assert_eq!(ok.other_seconds(), 1.5);
        let named_without_time = PipelineDraft {
            stage_names: vec!["prep".into()],
            ..Default::default()
        };
        assert!(
            named_without_time
                .validate()
                .unwrap_err()
                .get("stage0_seconds")
                .is_some()
        );
    }
}
