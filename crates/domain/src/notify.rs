//! Notifications: where a schedule's news goes (targets), what is sent (one line and a link),
//! how a webhook is signed, and when a failed delivery is tried again.
//!
//! A webhook's body is signed with HMAC-SHA256 over `"{timestamp}.{body}"` with the target's
//! secret, sent as `X-Bakeoff-Signature: t={unix seconds},v1={hex}`; a receiver recomputes it
//! and refuses a timestamp too far from its clock (a replay). See docs/schedules.md.
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::Timestamp;

/// The header carrying a webhook's signature.
pub const SIGNATURE_HEADER: &str = "X-Bakeoff-Signature";
/// The header naming the delivery (the same on every retry: a receiver can drop a repeat).
pub const DELIVERY_HEADER: &str = "X-Bakeoff-Delivery";
/// Attempts before a delivery is given up (the first and the retries).
pub const MAX_ATTEMPTS: u32 = 6;

/// What kind of receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// A JSON POST signed with the target's secret.
    Webhook,
    /// A Slack-compatible incoming webhook (`{"text": …}`); its URL is the secret.
    Slack,
}

impl TargetKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            TargetKind::Webhook => "webhook",
            TargetKind::Slack => "slack",
        }
    }

    pub fn parse(text: &str) -> Option<TargetKind> {
        match text.trim() {
            "webhook" => Some(TargetKind::Webhook),
            "slack" => Some(TargetKind::Slack),
            _ => None,
        }
    }
}

/// A target as saved by an admin: the URL and the secret are write-only once stored (a Slack
/// URL is sealed like a secret; a webhook's URL is shown, its secret never).
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    pub name: String,
    pub kind: TargetKind,
    pub url: String,
    /// The webhook's signing secret (required for a webhook, none for Slack).
    pub secret: Option<String>,
    /// Told about this schedule's runs (None: not per schedule).
    pub schedule_id: Option<i64>,
    /// Told about every scheduled run judged by this profile.
    pub profile_id: Option<i64>,
}

impl TargetSpec {
    /// Every wrong field, named as the form names it.
    pub fn check(&self, errors: &mut crate::validation::FieldErrors) {
        crate::validation::name(errors, "name", &self.name);
        match url::Url::parse(self.url.trim()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => errors.add("url", "must be an http:// or https:// URL"),
        }
        match (self.kind, self.secret.as_deref().map(str::trim)) {
            (TargetKind::Webhook, None | Some("")) => errors.add(
                "secret",
                "a webhook needs a signing secret (its receiver checks the signature)",
            ),
            (TargetKind::Webhook, Some(s)) if s.len() < 16 => errors.add("secret", "must be at least 16 characters"),
            _ => {}
        }
        if self.schedule_id.is_none() && self.profile_id.is_none() {
            errors.add("schedule", "choose a schedule or a threshold profile to be told about");
        }
    }
}

impl TargetSpec {
    /// What is kept in the clear: a webhook's URL; of a Slack URL (the credential) its host.
    pub fn url_shown(&self) -> String {
        match self.kind {
            TargetKind::Webhook => self.url.trim().to_string(),
            TargetKind::Slack => url::Url::parse(self.url.trim())
                .ok()
                .and_then(|u| u.host_str().map(|h| format!("{h} (URL sealed)")))
                .unwrap_or_else(|| "(URL sealed)".into()),
        }
    }
}

/// A message to queue for one target.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    pub target_id: i64,
    /// Once per target: a second enqueue of the same key does nothing.
    pub event_key: String,
    pub run_id: Option<i64>,
    pub message: String,
    /// The bytes to POST (see [`body_for`]), as text.
    pub body: String,
}

/// A stored target as listed (no secret, and a Slack URL only by its host).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub id: i64,
    pub name: String,
    pub kind: TargetKind,
    /// A webhook's URL; a Slack target's host only.
    pub url_shown: String,
    pub schedule_id: Option<i64>,
    pub profile_id: Option<i64>,
    pub created_at: Timestamp,
}

/// What a delivery needs, opened from the sealed columns: never shown, logged or exported.
#[derive(Clone, PartialEq)]
pub struct TargetSecrets {
    pub url: String,
    pub secret: Option<String>,
}

impl std::fmt::Debug for TargetSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TargetSecrets(****)")
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryStatus {
    /// Not yet delivered; tried again at `next_attempt_at`.
    Pending,
    Delivered,
    /// Given up after [`MAX_ATTEMPTS`].
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryStatus> {
        match text {
            "pending" => Some(DeliveryStatus::Pending),
            "delivered" => Some(DeliveryStatus::Delivered),
            "failed" => Some(DeliveryStatus::Failed),
            _ => None,
        }
    }
}

/// One message to one target, with its attempts: the delivery log.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub id: i64,
    pub target_id: i64,
    /// What it is about, once per target: `run:12:changes`, `run:12:failed`, `test:…`.
    pub event_key: String,
    pub run_id: Option<i64>,
    /// The one line sent.
    pub message: String,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub next_attempt_at: Timestamp,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub delivered_at: Option<Timestamp>,
}

/// How long after attempt `attempts` (1 = the first) the next is made: 5 s, 10 s, 20 s, …,
/// at most an hour.
pub fn backoff_ms(attempts: u32) -> i64 {
    let exp = attempts.saturating_sub(1).min(20);
    (5_000i64 << exp).min(3_600_000)
}

/// The signature header's value for `body` sent at `at`.
pub fn signature(secret: &str, at: Timestamp, body: &[u8]) -> String {
    let t = at.0.div_euclid(1000);
    format!("t={t},v1={}", hex::encode(mac(secret, t, body)))
}

fn mac(secret: &str, t: i64, body: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m.finalize().into_bytes().to_vec()
}

/// Whether `header` signs `body` with `secret`, sent at most `tolerance_ms` from `now`: what a
/// receiver checks (constant-time comparison).
pub fn verify(secret: &str, header: &str, body: &[u8], now: Timestamp, tolerance_ms: i64) -> bool {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1 = hex::decode(v).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(given)) = (t, v1) else {
        return false;
    };
    if (now.0 - t * 1000).abs() > tolerance_ms {
        return false;
    }
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m.verify_slice(&given).is_ok()
}

/// The JSON a webhook receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookBody {
    /// `run.changes`, `run.failed`, `run.stuck` or `test`.
    pub event: String,
    /// The one line a person reads.
    pub text: String,
    pub run_id: Option<i64>,
    pub schedule: Option<String>,
    /// The run's page.
    pub link: Option<String>,
    /// Each change since the baseline, in words.
    #[serde(default)]
    pub changes: Vec<String>,
}

/// The bytes sent to a target of `kind` (a Slack target gets `{"text": …}` with the link).
pub fn body_for(kind: TargetKind, body: &WebhookBody) -> Vec<u8> {
    match kind {
        TargetKind::Webhook => serde_json::to_vec(body).expect("a webhook body serialises"),
        TargetKind::Slack => {
            let text = match &body.link {
                Some(link) => format!("{} <{link}|open the run>", body.text),
                None => body.text.clone(),
            };
            serde_json::to_vec(&serde_json::json!({ "text": text })).expect("a Slack body serialises")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_a_change_or_an_old_one_does_not() {
        let at = Timestamp(1_800_000_000_123);
        let body = br#"{"event":"test"}"#;
        let header = signature("s3cret-s3cret-s3cret", at, body);
        assert!(header.starts_with("t=1800000000,v1="), "{header}");
        assert!(verify("s3cret-s3cret-s3cret", &header, body, at, 300_000));
        assert!(!verify("another-secret-xxxx", &header, body, at, 300_000));
        assert!(!verify("s3cret-s3cret-s3cret", &header, b"{}", at, 300_000));
        assert!(!verify(
            "s3cret-s3cret-s3cret",
            &header,
            body,
            Timestamp(at.0 + 600_000),
            300_000
        ));
        assert!(!verify("s3cret-s3cret-s3cret", "v1=00", body, at, 300_000));
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // RFC 4231-style check against an independent computation of the same construction.
        let header = signature("key", Timestamp(1_000), b"body");
        let expected = {
            let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"key").unwrap();
            m.update(b"1.body");
            hex::encode(m.finalize().into_bytes())
        };
        assert_eq!(header, format!("t=1,v1={expected}"));
    }

    #[test]
    fn backoff_doubles_up_to_an_hour() {
        assert_eq!(backoff_ms(1), 5_000);
        assert_eq!(backoff_ms(2), 10_000);
        assert_eq!(backoff_ms(4), 40_000);
        assert_eq!(backoff_ms(30), 3_600_000);
    }

    #[test]
    fn a_webhook_needs_a_long_secret_and_a_subject() {
        let mut errors = crate::validation::FieldErrors::default();
        TargetSpec {
            name: "ops".into(),
            kind: TargetKind::Webhook,
            url: "ftp://x".into(),
            secret: Some("short".into()),
            schedule_id: None,
            profile_id: None,
        }
        .check(&mut errors);
        let fields: Vec<&str> = errors.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["url", "secret", "schedule"]);
    }

    #[test]
    fn slack_gets_text_with_the_link() {
        let body = WebhookBody {
            event: "run.changes".into(),
            text: "nightly: verdict GO → NO-GO".into(),
            run_id: Some(3),
            schedule: Some("nightly".into()),
            link: Some("http://h/runs/3".into()),
            changes: vec![],
        };
        let slack: serde_json::Value = serde_json::from_slice(&body_for(TargetKind::Slack, &body)).unwrap();
        assert_eq!(
            slack["text"],
            "nightly: verdict GO → NO-GO <http://h/runs/3|open the run>"
        );
    }
}
