//! Operability: the endpoint probes' results (pass / fail / not applicable, with evidence), the
//! operations checklist the team answers per candidate (versioned like thresholds), and the
//! operability score that combines them with its parts visible. Pure: the probes themselves run
//! in `engine::probes`.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Timestamp;
use super::validation::{FieldErrors, optional_text, truncate};

/// Longest body excerpt kept as evidence, in characters.
pub const EXCERPT_MAX_CHARS: usize = 300;
/// Longest note per checklist item, in characters.
pub const NOTES_MAX_CHARS: usize = 2_000;

/// One automatic check of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    ModelsListsModel,
    HealthEndpoint,
    MetricsEndpoint,
    UsageInStream,
    MaxTokensHonoured,
    #[serde(rename = "invalid_param_4xx")]
    InvalidParam4xx,
    #[serde(rename = "overlong_prompt_4xx")]
    OverlongPrompt4xx,
    CancelFreesCapacity,
    RateLimitHeaders,
    ModelFieldMatches,
    VersionHeaders,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 11] = [
        ProbeKind::ModelsListsModel,
        ProbeKind::HealthEndpoint,
        ProbeKind::MetricsEndpoint,
        ProbeKind::UsageInStream,
        ProbeKind::MaxTokensHonoured,
        ProbeKind::InvalidParam4xx,
        ProbeKind::OverlongPrompt4xx,
        ProbeKind::CancelFreesCapacity,
        ProbeKind::RateLimitHeaders,
        ProbeKind::ModelFieldMatches,
        ProbeKind::VersionHeaders,
    ];

    /// The key in metric names (`probe:metrics_endpoint`) and stored JSON.
    pub fn key(&self) -> &'static str {
        match self {
            ProbeKind::ModelsListsModel => "models_lists_model",
            ProbeKind::HealthEndpoint => "health_endpoint",
            ProbeKind::MetricsEndpoint => "metrics_endpoint",
            ProbeKind::UsageInStream => "usage_in_stream",
            ProbeKind::MaxTokensHonoured => "max_tokens_honoured",
            ProbeKind::InvalidParam4xx => "invalid_param_4xx",
            ProbeKind::OverlongPrompt4xx => "overlong_prompt_4xx",
            ProbeKind::CancelFreesCapacity => "cancel_frees_capacity",
            ProbeKind::RateLimitHeaders => "rate_limit_headers",
            ProbeKind::ModelFieldMatches => "model_field_matches",
            ProbeKind::VersionHeaders => "version_headers",
        }
    }

    pub fn parse(key: &str) -> Option<ProbeKind> {
        ProbeKind::ALL.into_iter().find(|k| k.key() == key)
    }

    pub fn label(&self) -> &'static str {
        match self {
            ProbeKind::ModelsListsModel => "/v1/models lists the model",
            ProbeKind::HealthEndpoint => "health endpoint answers",
            ProbeKind::MetricsEndpoint => "Prometheus /metrics",
            ProbeKind::UsageInStream => "usage returned in streams",
            ProbeKind::MaxTokensHonoured => "max_tokens honoured",
            ProbeKind::InvalidParam4xx => "invalid parameter → quick 4xx JSON error",
            ProbeKind::OverlongPrompt4xx => "over-long prompt → clear 4xx",
            ProbeKind::CancelFreesCapacity => "cancelled stream frees capacity",
            ProbeKind::RateLimitHeaders => "rate-limit headers",
            ProbeKind::ModelFieldMatches => "response model field matches",
            ProbeKind::VersionHeaders => "server version headers (provenance)",
        }
    }

    /// What passing means, in words (shown beside the result).
    pub fn expectation(&self) -> &'static str {
        match self {
            ProbeKind::ModelsListsModel => "GET /v1/models answers 200 with the candidate's model among its ids",
            ProbeKind::HealthEndpoint => "one of /health, /healthz, /v1/health, /ping answers 2xx",
            ProbeKind::MetricsEndpoint => "GET /metrics answers 200 in Prometheus text format (# TYPE lines)",
            ProbeKind::UsageInStream => "a streamed answer ends with a usage block (prompt and completion tokens)",
            ProbeKind::MaxTokensHonoured => "asked for at most N tokens, the server returns no more than N",
            ProbeKind::InvalidParam4xx => "max_tokens = −1 is refused with a 4xx JSON error within 5 s",
            ProbeKind::OverlongPrompt4xx => {
                "a prompt longer than the context window is refused with a 4xx, not a 500, a hang or silent truncation"
            }
            ProbeKind::CancelFreesCapacity => {
                "after streams are abandoned mid-way, the next request is not slowed (vs. an idle baseline)"
            }
            ProbeKind::RateLimitHeaders => "responses carry x-ratelimit-* / ratelimit-* / retry-after style headers",
            ProbeKind::ModelFieldMatches => "the response's model field names the model asked for",
            ProbeKind::VersionHeaders => "server / version headers recorded as provenance (informational)",
        }
    }
}

/// A probe's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    Pass,
    Fail,
    NotApplicable,
}

impl ProbeOutcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            ProbeOutcome::Pass => "pass",
            ProbeOutcome::Fail => "fail",
            ProbeOutcome::NotApplicable => "n/a",
        }
    }
}

/// What a probe saw: enough to judge it by hand. Never holds a credential.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// `GET http://host/v1/models` (method and URL only).
    pub request: String,
    pub status: Option<u16>,
    /// Start of the response body (≤ [`EXCERPT_MAX_CHARS`] characters, whitespace collapsed).
    pub excerpt: String,
    pub elapsed_ms: Option<f64>,
    /// Further observations, one per line (other URLs tried, figures compared).
    pub notes: Vec<String>,
}

impl Evidence {
    /// A body excerpt fit for evidence.
    pub fn excerpt_of(body: &str) -> String {
        // `truncate` adds an ellipsis after `max` characters: leave room for it.
        truncate(
            &body.split_whitespace().collect::<Vec<_>>().join(" "),
            EXCERPT_MAX_CHARS - 1,
        )
    }
}

/// One probe's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub kind: ProbeKind,
    pub outcome: ProbeOutcome,
    /// One sentence: what happened.
    pub summary: String,
    pub evidence: Evidence,
}

/// Every probe run once against a candidate, with the provenance headers seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub results: Vec<ProbeResult>,
    /// (header, value) pairs: `server`, `x-powered-by`, `openai-version`, …
    pub provenance: Vec<(String, String)>,
    /// Base URL and model probed, as they were at the time.
    pub base_url: String,
    pub model: String,
    /// Wall time of the whole run, in milliseconds.
    pub elapsed_ms: f64,
}

impl ProbeReport {
    pub fn result(&self, kind: ProbeKind) -> Option<&ProbeResult> {
        self.results.iter().find(|r| r.kind == kind)
    }

    /// (passed, failed, not applicable).
    /// The labels of the probes that failed, in probe order.
    pub fn failed_labels(&self) -> Vec<&'static str> {
        self.results
            .iter()
            .filter(|r| r.outcome == ProbeOutcome::Fail)
            .map(|r| r.kind.label())
            .collect()
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        let count = |o: ProbeOutcome| self.results.iter().filter(|r| r.outcome == o).count();
        (
            count(ProbeOutcome::Pass),
            count(ProbeOutcome::Fail),
            count(ProbeOutcome::NotApplicable),
        )
    }
}

/// A stored probe run.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRun {
    pub id: i64,
    pub candidate_id: i64,
    pub at: Timestamp,
    pub report: ProbeReport,
}

// ------------------------------------------------------------------------ the checklist

/// One line of the operations readiness checklist (from the article's readiness table and its
/// four-dimension table: hardware, runtime, model files, ports and permissions; logging,
/// monitoring, upgrades, access control).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecklistItem {
    HardwareRecorded,
    RuntimePinned,
    ModelFilesComplete,
    PortsPermissions,
    Logging,
    Monitoring,
    UpgradeRollback,
    AccessControl,
}

impl ChecklistItem {
    pub const ALL: [ChecklistItem; 8] = [
        ChecklistItem::HardwareRecorded,
        ChecklistItem::RuntimePinned,
        ChecklistItem::ModelFilesComplete,
        ChecklistItem::PortsPermissions,
        ChecklistItem::Logging,
        ChecklistItem::Monitoring,
        ChecklistItem::UpgradeRollback,
        ChecklistItem::AccessControl,
    ];

    pub fn key(&self) -> &'static str {
        match self {
            ChecklistItem::HardwareRecorded => "hardware_recorded",
            ChecklistItem::RuntimePinned => "runtime_pinned",
            ChecklistItem::ModelFilesComplete => "model_files_complete",
            ChecklistItem::PortsPermissions => "ports_permissions",
            ChecklistItem::Logging => "logging",
            ChecklistItem::Monitoring => "monitoring",
            ChecklistItem::UpgradeRollback => "upgrade_rollback",
            ChecklistItem::AccessControl => "access_control",
        }
    }

    pub fn parse(key: &str) -> Option<ChecklistItem> {
        ChecklistItem::ALL.into_iter().find(|k| k.key() == key)
    }

    pub fn label(&self) -> &'static str {
        match self {
            ChecklistItem::HardwareRecorded => "Hardware recorded",
            ChecklistItem::RuntimePinned => "Runtime versions pinned",
            ChecklistItem::ModelFilesComplete => "Model files complete",
            ChecklistItem::PortsPermissions => "Ports and permissions",
            ChecklistItem::Logging => "Logging",
            ChecklistItem::Monitoring => "Monitoring",
            ChecklistItem::UpgradeRollback => "Upgrade and rollback path",
            ChecklistItem::AccessControl => "Access control",
        }
    }

    /// The question the team answers, with the usual trap.
    pub fn question(&self) -> &'static str {
        match self {
            ChecklistItem::HardwareRecorded => {
                "Are the GPU model, its memory and the driver version written down for this endpoint? \
                 (Too little memory means the model does not load, or silently runs at lower precision.)"
            }
            ChecklistItem::RuntimePinned => {
                "Are the Python, CUDA and inference-framework versions pinned (lock file, image digest)? \
                 (Unpinned stacks break on the next machine: missing kernels, format errors.)"
            }
            ChecklistItem::ModelFilesComplete => {
                "Are the weights, config and tokenizer/vocabulary files all present and checksummed? \
                 (A wrong path found only at start-up wastes the most time.)"
            }
            ChecklistItem::PortsPermissions => {
                "Is the service port reserved, and may the service account read the weight files? \
                 (Starts fine, then refuses calls.)"
            }
            ChecklistItem::Logging => {
                "Are requests and errors logged with request id, status and timing, so a failure can be investigated?"
            }
            ChecklistItem::Monitoring => {
                "Are throughput, latency, errors and GPU memory monitored, with alerts someone answers?"
            }
            ChecklistItem::UpgradeRollback => {
                "Can a new model or framework version be rolled out, and rolled back, without surprises?"
            }
            ChecklistItem::AccessControl => {
                "Is it controlled who may call the endpoint (keys, network policy), and can keys be rotated?"
            }
        }
    }
}

/// A team's answer to one checklist item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    #[default]
    Unanswered,
    Yes,
    No,
    NotApplicable,
}

impl Answer {
    pub const CHOICES: [Answer; 4] = [Answer::Unanswered, Answer::Yes, Answer::No, Answer::NotApplicable];

    /// The form value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Answer::Unanswered => "",
            Answer::Yes => "yes",
            Answer::No => "no",
            Answer::NotApplicable => "na",
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Answer::Unanswered => "not answered",
            Answer::Yes => "yes",
            Answer::No => "no",
            Answer::NotApplicable => "n/a",
        }
    }

    pub fn parse(s: &str) -> Option<Answer> {
        Answer::CHOICES.into_iter().find(|a| a.as_str() == s.trim())
    }
}

/// One item's answer and notes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemAnswer {
    pub answer: Answer,
    #[serde(default)]
    pub notes: String,
}

/// Every item's answer (items never answered are `Unanswered`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChecklistAnswers(pub BTreeMap<ChecklistItem, ItemAnswer>);

impl ChecklistAnswers {
    pub fn get(&self, item: ChecklistItem) -> ItemAnswer {
        self.0.get(&item).cloned().unwrap_or_default()
    }

    /// (yes, no, n/a, unanswered) over every item.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for item in ChecklistItem::ALL {
            match self.get(item).answer {
                Answer::Yes => c.0 += 1,
                Answer::No => c.1 += 1,
                Answer::NotApplicable => c.2 += 1,
                Answer::Unanswered => c.3 += 1,
            }
        }
        c
    }
}

/// A saved version of a candidate's checklist.
#[derive(Debug, Clone, PartialEq)]
pub struct ChecklistVersion {
    pub candidate_id: i64,
    pub version: u32,
    pub changed_by: String,
    pub rationale: String,
    pub answers: ChecklistAnswers,
    pub at: Timestamp,
}

/// One item that changed between two versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChecklistChange {
    pub item: ChecklistItem,
    pub old: ItemAnswer,
    pub new: ItemAnswer,
}

/// Items whose answer or notes differ, in checklist order.
pub fn diff_checklist(old: &ChecklistAnswers, new: &ChecklistAnswers) -> Vec<ChecklistChange> {
    ChecklistItem::ALL
        .into_iter()
        .filter_map(|item| {
            let (a, b) = (old.get(item), new.get(item));
            (a != b).then_some(ChecklistChange { item, old: a, new: b })
        })
        .collect()
}

/// The checklist form as typed: `answer_<key>`, `notes_<key>`, `changed_by`, `rationale`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct ChecklistDraft(pub BTreeMap<String, String>);

/// A valid checklist submission.
#[derive(Debug, Clone, PartialEq)]
pub struct ChecklistSubmission {
    pub answers: ChecklistAnswers,
    pub changed_by: String,
    pub rationale: String,
}

impl ChecklistDraft {
    fn field(&self, name: &str) -> &str {
        self.0.get(name).map(String::as_str).unwrap_or_default()
    }

    pub fn answer_field(item: ChecklistItem) -> String {
        format!("answer_{}", item.key())
    }

    pub fn notes_field(item: ChecklistItem) -> String {
        format!("notes_{}", item.key())
    }

    /// The form pre-filled from saved answers.
    pub fn from_answers(answers: &ChecklistAnswers, changed_by: &str) -> ChecklistDraft {
        let mut m = BTreeMap::new();
        for item in ChecklistItem::ALL {
            let a = answers.get(item);
            m.insert(Self::answer_field(item), a.answer.as_str().to_string());
            m.insert(Self::notes_field(item), a.notes);
        }
        m.insert("changed_by".into(), changed_by.to_string());
        ChecklistDraft(m)
    }

    pub fn value(&self, name: &str) -> String {
        self.field(name).to_string()
    }

    /// Every field checked; the errors name the field.
    pub fn validate(&self) -> Result<ChecklistSubmission, FieldErrors> {
        let mut e = FieldErrors::default();
        let changed_by = super::validation::name(&mut e, "changed_by", self.field("changed_by"));
        let rationale = optional_text(&mut e, "rationale", self.field("rationale"), NOTES_MAX_CHARS);
        let mut answers = BTreeMap::new();
        for item in ChecklistItem::ALL {
            let name = Self::answer_field(item);
            let answer = match Answer::parse(self.field(&name)) {
                Some(a) => a,
                None => {
                    e.add(&name, "choose yes, no, n/a or leave it unanswered");
                    Answer::Unanswered
                }
            };
            let notes_name = Self::notes_field(item);
            let notes =
                optional_text(&mut e, &notes_name, self.field(&notes_name), NOTES_MAX_CHARS).unwrap_or_default();
            if answer != Answer::Unanswered || !notes.is_empty() {
                answers.insert(item, ItemAnswer { answer, notes });
            }
        }
        let known = |k: &str| {
            k == "changed_by"
                || k == "rationale"
                || ChecklistItem::ALL
                    .iter()
                    .any(|i| k == Self::answer_field(*i) || k == Self::notes_field(*i))
        };
        if let Some(unknown) = self.0.keys().find(|k| !known(k)) {
            e.add(unknown.as_str(), "is not a checklist field");
        }
        e.into_result(ChecklistSubmission {
            answers: ChecklistAnswers(answers),
            changed_by: changed_by.unwrap_or_default(),
            rationale: rationale.unwrap_or_default(),
        })
    }
}

// ------------------------------------------------------------------------ the score

/// One part of the operability score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScorePart {
    pub key: &'static str,
    pub label: &'static str,
    /// Passed probes, or items answered yes.
    pub good: usize,
    /// Probes that apply (pass + fail), or items that apply (all but n/a).
    pub applicable: usize,
    /// good / applicable; None when nothing applies or nothing was measured.
    pub share: Option<f64>,
    /// What is missing or counted against (failed probes, items answered no or unanswered).
    pub shortfalls: Vec<String>,
}

/// Probes and checklist combined: the mean of the parts that exist.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperabilityScore {
    pub parts: Vec<ScorePart>,
    /// In [0, 1]; None when neither part has anything to say.
    pub score: Option<f64>,
    /// Both parts present and every checklist item answered.
    pub complete: bool,
}

/// The score from the latest probe report and the current checklist. An unanswered item counts
/// as not done (it is listed among the shortfalls); n/a items and n/a probes are left out.
pub fn operability_score(probes: Option<&ProbeReport>, checklist: Option<&ChecklistAnswers>) -> OperabilityScore {
    let mut parts = Vec::new();
    let mut complete = true;
    match probes {
        Some(report) => {
            let (pass, fail, _) = report.counts();
            parts.push(ScorePart {
                key: "probes",
                label: "endpoint probes passed",
                good: pass,
                applicable: pass + fail,
                share: (pass + fail > 0).then(|| pass as f64 / (pass + fail) as f64),
                shortfalls: report
                    .results
                    .iter()
                    .filter(|r| r.outcome == ProbeOutcome::Fail)
                    .map(|r| format!("{}: {}", r.kind.label(), r.summary))
                    .collect(),
            });
        }
        None => complete = false,
    }
    match checklist {
        Some(answers) => {
            let (yes, _no, na, unanswered) = answers.counts();
            let applicable = ChecklistItem::ALL.len() - na;
            complete &= unanswered == 0;
            parts.push(ScorePart {
                key: "checklist",
                label: "checklist items done",
                good: yes,
                applicable,
                share: (applicable > 0).then(|| yes as f64 / applicable as f64),
                shortfalls: ChecklistItem::ALL
                    .iter()
                    .filter_map(|i| match answers.get(*i).answer {
                        Answer::No => Some(format!("{}: no", i.label())),
                        Answer::Unanswered => Some(format!("{}: not answered", i.label())),
                        _ => None,
                    })
                    .collect(),
            });
        }
        None => complete = false,
    }
    let shares: Vec<f64> = parts.iter().filter_map(|p| p.share).collect();
    OperabilityScore {
        score: (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64),
        parts,
        complete,
    }
}

/// One operability figure by its metric key: `operability_score`, `probes_passed_share`,
/// `checklist_share`, `probe:<probe key>` (1 pass, 0 fail; None when not applicable or not
/// run), `checklist:<item key>` (1 yes, 0 no or unanswered; None for n/a).
pub fn operability_metric(
    key: &str,
    probes: Option<&ProbeReport>,
    checklist: Option<&ChecklistAnswers>,
) -> Option<f64> {
    if let Some(k) = key.strip_prefix("probe:") {
        let kind = ProbeKind::parse(k)?;
        return match probes?.result(kind)?.outcome {
            ProbeOutcome::Pass => Some(1.0),
            ProbeOutcome::Fail => Some(0.0),
            ProbeOutcome::NotApplicable => None,
        };
    }
    if let Some(k) = key.strip_prefix("checklist:") {
        let item = ChecklistItem::parse(k)?;
        return match checklist?.get(item).answer {
            Answer::Yes => Some(1.0),
            Answer::No | Answer::Unanswered => Some(0.0),
            Answer::NotApplicable => None,
        };
    }
    let score = operability_score(probes, checklist);
    let part = |k: &str| score.parts.iter().find(|p| p.key == k).and_then(|p| p.share);
    match key {
        "operability_score" => score.score,
        "probes_passed_share" => part("probes"),
        "checklist_share" => part("checklist"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(kind: ProbeKind, outcome: ProbeOutcome) -> ProbeResult {
        ProbeResult {
            kind,
            outcome,
            summary: "s".into(),
            evidence: Evidence::default(),
        }
    }

    fn draft(pairs: &[(&str, &str)]) -> ChecklistDraft {
        ChecklistDraft(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn keys_round_trip() {
        for k in ProbeKind::ALL {
            assert_eq!(ProbeKind::parse(k.key()), Some(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.key()));
        }
        for i in ChecklistItem::ALL {
            assert_eq!(ChecklistItem::parse(i.key()), Some(i));
        }
        for a in Answer::CHOICES {
            assert_eq!(Answer::parse(a.as_str()), Some(a));
        }
    }

    #[test]
    fn excerpts_are_bounded_and_collapsed() {
        let long = "a  b\n".repeat(500);
        let e = Evidence::excerpt_of(&long);
        assert!(e.chars().count() <= EXCERPT_MAX_CHARS);
        assert!(e.starts_with("a b a b"));
    }

    #[test]
    fn checklist_form_validates_and_names_fields() {
        let ok = draft(&[
            ("changed_by", "Mei"),
            ("answer_logging", "yes"),
            ("notes_logging", "Loki, 30 days"),
            ("answer_monitoring", "no"),
            ("answer_access_control", "na"),
            ("answer_runtime_pinned", ""),
        ])
        .validate()
        .unwrap();
        assert_eq!(ok.changed_by, "Mei");
        assert_eq!(ok.answers.get(ChecklistItem::Logging).notes, "Loki, 30 days");
        assert_eq!(ok.answers.counts(), (1, 1, 1, 5));
        let bad = draft(&[("answer_logging", "maybe"), ("answer_bogus", "yes")])
            .validate()
            .unwrap_err();
        assert!(bad.get("changed_by").is_some());
        assert!(bad.get("answer_logging").is_some());
        assert!(bad.get("answer_bogus").is_some());
        let long = "x".repeat(NOTES_MAX_CHARS + 1);
        let bad = draft(&[("changed_by", "a"), ("notes_logging", &long)])
            .validate()
            .unwrap_err();
        assert!(bad.get("notes_logging").is_some());
        // Prefilled form round-trips.
        let again = ChecklistDraft::from_answers(&ok.answers, "Mei").validate().unwrap();
        assert_eq!(again.answers, ok.answers);
    }

    #[test]
    fn diff_lists_changed_items_only() {
        let old = draft(&[
            ("changed_by", "a"),
            ("answer_logging", "no"),
            ("answer_monitoring", "yes"),
        ])
        .validate()
        .unwrap()
        .answers;
        let new = draft(&[
            ("changed_by", "a"),
            ("answer_logging", "yes"),
            ("answer_monitoring", "yes"),
            ("notes_monitoring", "Grafana"),
        ])
        .validate()
        .unwrap()
        .answers;
        let d = diff_checklist(&old, &new);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].item, d[0].old.answer, d[0].new.answer),
            (ChecklistItem::Logging, Answer::No, Answer::Yes)
        );
        assert_eq!(d[1].new.notes, "Grafana");
        assert!(diff_checklist(&new, &new).is_empty());
    }

    #[test]
    fn score_averages_the_parts_that_exist() {
        // 6 pass, 2 fail, 1 n/a → 0.75.
        let mut results: Vec<ProbeResult> = ProbeKind::ALL[..6]
            .iter()
            .map(|k| result(*k, ProbeOutcome::Pass))
            .collect();
        results.push(result(ProbeKind::CancelFreesCapacity, ProbeOutcome::Fail));
        results.push(result(ProbeKind::RateLimitHeaders, ProbeOutcome::Fail));
        results.push(result(ProbeKind::VersionHeaders, ProbeOutcome::NotApplicable));
        let report = ProbeReport {
            results,
            ..Default::default()
        };
        // Checklist: 3 yes, 1 no, 2 n/a, 2 unanswered → 3 / 6 = 0.5.
        let answers = draft(&[
            ("changed_by", "a"),
            ("answer_hardware_recorded", "yes"),
            ("answer_runtime_pinned", "yes"),
            ("answer_logging", "yes"),
            ("answer_monitoring", "no"),
            ("answer_access_control", "na"),
            ("answer_ports_permissions", "na"),
        ])
        .validate()
        .unwrap()
        .answers;
        let s = operability_score(Some(&report), Some(&answers));
        assert_eq!(s.parts[0].share, Some(0.75));
        assert_eq!(s.parts[1].share, Some(0.5));
        assert_eq!(s.parts[1].shortfalls.len(), 3, "{:?}", s.parts[1].shortfalls);
        assert!((s.score.unwrap() - 0.625).abs() < 1e-12);
        assert!(!s.complete, "two items unanswered");
        assert_eq!(
            operability_metric("operability_score", Some(&report), Some(&answers)),
            Some(0.625)
        );
        assert_eq!(
            operability_metric("probe:rate_limit_headers", Some(&report), None),
            Some(0.0)
        );
        assert_eq!(
            operability_metric("probe:models_lists_model", Some(&report), None),
            Some(1.0)
        );
        assert_eq!(operability_metric("probe:version_headers", Some(&report), None), None);
        assert_eq!(
            operability_metric("checklist:monitoring", None, Some(&answers)),
            Some(0.0)
        );
        assert_eq!(
            operability_metric("checklist:access_control", None, Some(&answers)),
            None
        );
        // Probes only.
        let s = operability_score(Some(&report), None);
        assert_eq!(s.score, Some(0.75));
        assert!(!s.complete);
        assert_eq!(operability_score(None, None).score, None);
    }
}
