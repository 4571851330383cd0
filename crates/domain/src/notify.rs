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
    /// An email through an SMTP server ([`SmtpSettings`], written as an `smtp://` URL); the
    /// server's password, if any, is the secret.
    Email,
}

impl TargetKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            TargetKind::Webhook => "webhook",
            TargetKind::Slack => "slack",
            TargetKind::Email => "email",
        }
    }

    pub fn parse(text: &str) -> Option<TargetKind> {
        match text.trim() {
            "webhook" => Some(TargetKind::Webhook),
            "slack" => Some(TargetKind::Slack),
            "email" => Some(TargetKind::Email),
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
        if self.kind == TargetKind::Email {
            match SmtpSettings::parse(&self.url) {
                Ok(smtp) => {
                    if smtp.username.is_none() && self.secret.as_deref().is_some_and(|s| !s.trim().is_empty()) {
                        errors.add("url", "a password needs a user name: smtp://USER@HOST…");
                    }
                }
                Err(why) => errors.add("url", why),
            }
        } else {
            match url::Url::parse(self.url.trim()) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                _ => errors.add("url", "must be an http:// or https:// URL"),
            }
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
            // An email target's URL holds no password (refused in it): shown whole.
            TargetKind::Webhook | TargetKind::Email => self.url.trim().to_string(),
            TargetKind::Slack => url::Url::parse(self.url.trim())
                .ok()
                .and_then(|u| u.host_str().map(|h| format!("{h} (URL sealed)")))
                .unwrap_or_else(|| "(URL sealed)".into()),
        }
    }
}

/// How an email target reaches its mail server, written as one URL (what the form's fields
/// make and the API takes):
/// `smtp://[USER@]HOST[:PORT]?tls=starttls|none&from=ADDRESS&to=ADDRESS[,ADDRESS…]`.
/// `tls` is `starttls` unless stated (the port then defaults to 587; 25 with `none`); the
/// password is never in the URL but the target's sealed secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    /// STARTTLS required before anything else is sent; false: plain SMTP (a relay on the host
    /// or a trusted network only).
    pub starttls: bool,
    pub username: Option<String>,
    pub from: String,
    pub to: Vec<String>,
}

impl SmtpSettings {
    /// Reads the URL, saying what is wrong in words.
    pub fn parse(text: &str) -> Result<SmtpSettings, String> {
        let u = url::Url::parse(text.trim()).map_err(|_| SMTP_URL_HINT.to_string())?;
        if u.scheme() != "smtp" {
            return Err(SMTP_URL_HINT.into());
        }
        let host = u
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| SMTP_URL_HINT.to_string())?;
        if u.password().is_some() {
            return Err("put the password in the password field (it is sealed), not in the URL".into());
        }
        let (mut tls, mut from, mut to) = (None, None, Vec::new());
        for (key, value) in u.query_pairs() {
            match key.as_ref() {
                "tls" => tls = Some(value.into_owned()),
                "from" => from = Some(value.trim().to_string()),
                "to" => to.extend(value.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty())),
                other => return Err(format!("unknown setting {other:?}: the settings are tls, from and to")),
            }
        }
        let starttls = match tls.as_deref() {
            None | Some("starttls") => true,
            Some("none") => false,
            Some(other) => return Err(format!("tls is \"starttls\" or \"none\", not {other:?}")),
        };
        let from = from.ok_or("from=ADDRESS is missing: who the mail is from")?;
        if to.is_empty() {
            return Err("to=ADDRESS is missing: who is told".into());
        }
        for address in std::iter::once(&from).chain(&to) {
            if !plausible_address(address) {
                return Err(format!("{address:?} is not an email address"));
            }
        }
        let username = (!u.username().is_empty()).then(|| percent_decoded(u.username()));
        Ok(SmtpSettings {
            host: host.to_string(),
            port: u.port().unwrap_or(if starttls { 587 } else { 25 }),
            starttls,
            username,
            from,
            to,
        })
    }
}

const SMTP_URL_HINT: &str = "must be smtp://[USER@]HOST[:PORT]?tls=starttls|none&from=ADDRESS&to=ADDRESS";

/// `local@domain`, no spaces or line breaks (a header injection); the mail server judges the rest.
fn plausible_address(a: &str) -> bool {
    matches!(a.split_once('@'), Some((local, domain)) if !local.is_empty() && !domain.is_empty())
        && !a
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | ','))
}

fn percent_decoded(s: &str) -> String {
    url::form_urlencoded::parse(format!("u={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_string())
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
        // The mail's text: the line (also its subject) and the link on the next.
        TargetKind::Email => match &body.link {
            Some(link) => format!("{}\r\n{link}\r\n", body.text),
            None => format!("{}\r\n", body.text),
        }
        .into_bytes(),
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
    fn an_email_target_is_an_smtp_url_without_a_password() {
        let smtp = SmtpSettings::parse(
            "smtp://alerts%40corp@mail.corp.example?from=bakeoff@corp.example&to=a@corp.example,b@corp.example",
        )
        .unwrap();
        assert_eq!(
            smtp,
            SmtpSettings {
                host: "mail.corp.example".into(),
                port: 587,
                starttls: true,
                username: Some("alerts@corp".into()),
                from: "bakeoff@corp.example".into(),
                to: vec!["a@corp.example".into(), "b@corp.example".into()],
            }
        );
        let plain = SmtpSettings::parse("smtp://127.0.0.1:2525?tls=none&from=a@b&to=c@d").unwrap();
        assert_eq!((plain.port, plain.starttls, plain.username), (2525, false, None));
        for (bad, why) in [
            ("https://mail/x", "must be smtp://"),
            ("smtp://u:pw@mail?from=a@b&to=c@d", "password field"),
            ("smtp://mail?from=a@b", "to=ADDRESS is missing"),
            ("smtp://mail?to=c@d", "from=ADDRESS is missing"),
            ("smtp://mail?tls=ssl&from=a@b&to=c@d", "not \"ssl\""),
            ("smtp://mail?from=a@b&to=c%0d%0aBcc:%20x@y", "not an email address"),
            ("smtp://mail?from=a@b&to=c@d&cc=e@f", "unknown setting \"cc\""),
        ] {
            let err = SmtpSettings::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        // A password without a user name is refused on the form's url field.
        let mut errors = crate::validation::FieldErrors::default();
        TargetSpec {
            name: "mail".into(),
            kind: TargetKind::Email,
            url: "smtp://mail?from=a@b&to=c@d".into(),
            secret: Some("pw".into()),
            schedule_id: Some(1),
            profile_id: None,
        }
        .check(&mut errors);
        assert_eq!(errors.0.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["url"]);
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
