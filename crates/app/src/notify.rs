//! Telling a team: targets saved by an admin (secrets sealed), messages queued once per
//! (target, event) when a scheduled run ends with changes worth telling (a verdict changed, a
//! rule flipped, a figure got worse beyond the noise), fails, is stuck, or was not started (a
//! firing skipped over budget), and delivered with
//! retries and backoff by every `bakeoff serve`'s scheduler (a delivery is leased to one
//! sender at a time). Every attempt's outcome is in the delivery log; every delivery, made or
//! given up, is audited.
use std::time::Duration;

use crate::AppError;
use crate::domain::Timestamp;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::notify::{
    DELIVERY_HEADER, DeliveryStatus, MAX_ATTEMPTS, NewDelivery, SIGNATURE_HEADER, TargetKind, TargetSpec, WebhookBody,
    backoff_ms, body_for, signature,
};
use crate::domain::run::RunStatus;
use crate::domain::schedule::{Firing, Schedule, local_time};
use crate::domain::validation::{FieldErrors, truncate};
use crate::store::DynStore;

/// How long one attempt holds its delivery before another sender may try it.
const LEASE_MS: i64 = 60_000;
/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// A scheduled run still queued or running this long after it was fired is reported stuck.
pub const STUCK_AFTER_MS: i64 = 6 * 3_600_000;
/// Firings per schedule looked at for news each time (the latest).
const RECENT_FIRINGS: i64 = 5;

/// Saves a target (an admin's: the caller checks the role), audited without its secrets.
pub async fn save_target(store: &DynStore, spec: &TargetSpec, actor: &str) -> Result<i64, AppError> {
    let mut errors = FieldErrors::default();
    spec.check(&mut errors);
    if let Some(id) = spec.schedule_id
        && store.get_schedule(id).await?.is_none()
    {
        errors.add("schedule", format!("schedule #{id} does not exist"));
    }
    if let Some(id) = spec.profile_id
        && store.get_threshold_profile(id, None).await?.is_none()
    {
        errors.add("profile", format!("threshold profile #{id} does not exist"));
    }
    if !errors.is_empty() {
        return Err(AppError::Fields(errors));
    }
    let id = store.create_target(spec).await?;
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::NotificationTargetSaved,
            target: format!("notification target #{id} {:?}", spec.name),
            detail: format!("{} to {} (secret sealed)", spec.kind.as_str(), spec.url_shown()),
        })
        .await?;
    Ok(id)
}

/// Deletes a target and its delivery log, audited.
pub async fn delete_target(store: &DynStore, id: i64, actor: &str) -> Result<(), AppError> {
    if !store.delete_target(id).await? {
        return Err(AppError::NotFound(format!("notification target #{id}")));
    }
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::NotificationTargetDeleted,
            target: format!("notification target #{id}"),
            detail: String::new(),
        })
        .await?;
    Ok(())
}

/// Queues a test message to target `id` (the "send test" button); delivered like any other.
pub async fn queue_test(store: &DynStore, id: i64, actor: &str, base_url: Option<&str>) -> Result<(), AppError> {
    let target = store
        .list_targets()
        .await?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| AppError::NotFound(format!("notification target #{id}")))?;
    let body = WebhookBody {
        event: "test".into(),
        text: format!("bakeoff: a test message to {:?}, sent by {actor}", target.name),
        run_id: None,
        schedule: None,
        link: base_url.map(|b| format!("{}/notifications", b.trim_end_matches('/'))),
        changes: Vec::new(),
    };
    store
        .enqueue_delivery(&NewDelivery {
            target_id: id,
            event_key: format!("test:{}", Timestamp::now().0),
            run_id: None,
            message: body.text.clone(),
            body: String::from_utf8_lossy(&body_for(target.kind, &body)).into_owned(),
        })
        .await?;
    Ok(())
}

/// The news of one scheduled run, if any: (event, key suffix, one line, changes in words).
async fn news_of(
    store: &DynStore,
    schedule: &Schedule,
    run_id: i64,
    fired_at: Timestamp,
    now: Timestamp,
) -> Result<Option<(&'static str, &'static str, String, Vec<String>)>, AppError> {
    let Some(run) = store.get_run(run_id).await? else {
        return Ok(None);
    };
    let name = &schedule.spec.name;
    if !run.status.is_terminal() {
        if now.0 - fired_at.0 > STUCK_AFTER_MS {
            let hours = (now.0 - fired_at.0) / 3_600_000;
            return Ok(Some((
                "run.stuck",
                "stuck",
                format!(
                    "{name}: run #{run_id} is still {} {hours} h after it was started",
                    run.status.as_str()
                ),
                Vec::new(),
            )));
        }
        return Ok(None);
    }
    if run.status != RunStatus::Finished {
        let why = run
            .error
            .as_deref()
            .map(|e| format!(": {}", truncate(e, 200)))
            .unwrap_or_default();
        return Ok(Some((
            "run.failed",
            "failed",
            format!("{name}: run #{run_id} ended {}{why}", run.status.as_str()),
            Vec::new(),
        )));
    }
    let Some(changes) = crate::baseline::changes_of_run(store, run_id).await? else {
        return Ok(None);
    };
    let told: Vec<String> = changes
        .worth_telling()
        .iter()
        .map(|c| format!("{}: {}", c.candidate, c.text))
        .collect();
    if told.is_empty() {
        return Ok(None);
    }
    let baseline = changes
        .baseline_run_id
        .map(|b| format!(" since #{b}"))
        .unwrap_or_default();
    let first = &told[0];
    let more = match told.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Ok(Some((
        "run.changes",
        "changes",
        format!("{name}: run #{run_id} changed{baseline}: {first}{more}"),
        told,
    )))
}

/// Queues what the recent scheduled runs have to tell to their schedules' and profiles'
/// targets (each event once per target, however often this is called); returns how many
/// messages were queued now.
pub async fn queue_news(store: &DynStore, now: Timestamp, base_url: Option<&str>) -> Result<usize, AppError> {
    let targets = store.list_targets().await?;
    if targets.is_empty() {
        return Ok(0);
    }
    let profiles = store.list_threshold_profiles().await?;
    let default_profile = crate::retirement::default_profile_id(store, &profiles).await?;
    let mut queued = 0;
    for schedule in store.list_schedules().await? {
        let profile = schedule.spec.profile_id.or(default_profile);
        let mine: Vec<_> = targets
            .iter()
            .filter(|t| t.schedule_id == Some(schedule.id) || (t.profile_id.is_some() && t.profile_id == profile))
            .collect();
        if mine.is_empty() {
            continue;
        }
        for firing in store.list_firings(schedule.id, RECENT_FIRINGS).await? {
            let (event_key, body) = match firing.run_id {
                Some(run_id) => {
                    let Some((event, suffix, text, changes)) =
                        news_of(store, &schedule, run_id, firing.fired_at, now).await?
                    else {
                        continue;
                    };
                    let body = WebhookBody {
                        event: event.into(),
                        text,
                        run_id: Some(run_id),
                        schedule: Some(schedule.spec.name.clone()),
                        link: base_url.map(|b| format!("{}/runs/{run_id}", b.trim_end_matches('/'))),
                        changes,
                    };
                    (format!("run:{run_id}:{suffix}"), body)
                }
                // A firing that started no run (over budget, a candidate or the eval set gone)
                // is news like a failed run: the team expected a measurement and got none.
                None => (
                    format!("firing:{}:{}:skipped", schedule.id, firing.due_at.0),
                    skipped_body(&schedule, &firing, base_url),
                ),
            };
            let text = body.text.clone();
            let run_id = body.run_id;
            for target in &mine {
                let fresh = store
                    .enqueue_delivery(&NewDelivery {
                        target_id: target.id,
                        event_key: event_key.clone(),
                        run_id,
                        message: text.clone(),
                        body: String::from_utf8_lossy(&body_for(target.kind, &body)).into_owned(),
                    })
                    .await?;
                queued += usize::from(fresh);
            }
        }
    }
    Ok(queued)
}

/// The message of a firing that started no run: its due time and the firing's note, linked to
/// the schedule's page.
fn skipped_body(schedule: &Schedule, firing: &Firing, base_url: Option<&str>) -> WebhookBody {
    let name = &schedule.spec.name;
    let when = local_time(&schedule.spec.time_zone, firing.due_at);
    let why = firing.note.strip_prefix("skipped: ").unwrap_or(&firing.note);
    WebhookBody {
        event: "run.skipped".into(),
        text: format!("{name}: no run for {when}: {}", truncate(why, 300)),
        run_id: None,
        schedule: Some(name.clone()),
        link: base_url.map(|b| format!("{}/schedules/{}", b.trim_end_matches('/'), schedule.id)),
        changes: Vec::new(),
    }
}

/// Sends every delivery due at `now` (one attempt each); returns how many were delivered.
pub async fn deliver_due(store: &DynStore, client: &reqwest::Client, now: Timestamp) -> Result<usize, AppError> {
    let mut delivered = 0;
    while let Some((delivery, body)) = store.claim_due_delivery(now, LEASE_MS).await? {
        let target = store
            .list_targets()
            .await?
            .into_iter()
            .find(|t| t.id == delivery.target_id);
        let secrets = store.target_secrets(delivery.target_id).await?;
        let (Some(target), Some(secrets)) = (target, secrets) else {
            continue;
        };
        let outcome = if target.kind == TargetKind::Email {
            send_email(&secrets, &delivery.message, body).await
        } else {
            let mut request = client
                .post(&secrets.url)
                .timeout(ATTEMPT_TIMEOUT)
                .header("content-type", "application/json")
                .header(DELIVERY_HEADER, delivery.id.to_string());
            if target.kind == TargetKind::Webhook
                && let Some(secret) = &secrets.secret
            {
                request = request.header(SIGNATURE_HEADER, signature(secret, Timestamp::now(), body.as_bytes()));
            }
            match request.body(body).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(format!("the receiver answered {}", r.status())),
                // The error's text may hold the URL (a Slack URL is a credential): only its kind.
                Err(e) if e.is_timeout() => Err(format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs())),
                Err(e) if e.is_connect() => Err("could not connect".to_string()),
                Err(_) => Err("the request failed".to_string()),
            }
        };
        let attempts = delivery.attempts + 1;
        let (status, next, error, action) = match outcome {
            Ok(()) => (
                DeliveryStatus::Delivered,
                now,
                None,
                Some(Action::NotificationDelivered),
            ),
            Err(e) if attempts >= MAX_ATTEMPTS => {
                (DeliveryStatus::Failed, now, Some(e), Some(Action::NotificationFailed))
            }
            Err(e) => (
                DeliveryStatus::Pending,
                Timestamp(now.0 + backoff_ms(attempts)),
                Some(e),
                None,
            ),
        };
        store
            .finish_delivery(delivery.id, status, next, error.as_deref())
            .await?;
        if let Some(action) = action {
            store
                .append_audit(&NewAuditEntry {
                    actor: "notifier".into(),
                    action,
                    target: format!("notification target #{} {:?}", target.id, target.name),
                    detail: format!(
                        "delivery #{} ({}), attempt {attempts}: {}{}",
                        delivery.id,
                        delivery.event_key,
                        delivery.message,
                        error.map(|e| format!(" — {e}")).unwrap_or_default()
                    ),
                })
                .await?;
        }
        if status == DeliveryStatus::Delivered {
            delivered += 1;
        }
    }
    Ok(delivered)
}

/// One email through the target's SMTP server: the line as the subject, the line and the link
/// as the text (8-bit, so the link is one line a reader can click and a test can find). Err says
/// why in words (the server's answer; never the password).
async fn send_email(secrets: &crate::domain::notify::TargetSecrets, line: &str, text: String) -> Result<(), String> {
    use lettre::message::header::{ContentTransferEncoding, ContentType};
    use lettre::message::{Mailbox, SinglePart};
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::transport::smtp::client::{Tls, TlsParameters};
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

    let smtp = crate::domain::notify::SmtpSettings::parse(&secrets.url)?;
    let mailbox = |a: &str| {
        a.parse::<Mailbox>()
            .map_err(|e| format!("{a:?} is not an address: {e}"))
    };
    let mut message = Message::builder().from(mailbox(&smtp.from)?);
    for to in &smtp.to {
        message = message.to(mailbox(to)?);
    }
    let message = message
        .subject(truncate(line, 200))
        .singlepart(
            SinglePart::builder()
                .header(ContentType::TEXT_PLAIN)
                .header(ContentTransferEncoding::EightBit)
                .body(text),
        )
        .map_err(|e| format!("the message could not be built: {e}"))?;
    let mut transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host)
        .port(smtp.port)
        .timeout(Some(ATTEMPT_TIMEOUT));
    if smtp.starttls {
        let tls = TlsParameters::new(smtp.host.clone()).map_err(|e| format!("TLS set-up failed: {e}"))?;
        transport = transport.tls(Tls::Required(tls));
    }
    if let (Some(user), Some(password)) = (&smtp.username, &secrets.secret) {
        transport = transport.credentials(Credentials::new(user.clone(), password.clone()));
    }
    match transport.build().send(message).await {
        Ok(_) => Ok(()),
        // lettre's errors carry the server's answer or the I/O cause; the password is never in them.
        Err(e) => Err(truncate(&format!("the mail server: {e}"), 300)),
    }
}

/// The HTTP client deliveries are sent with: no redirects followed (a receiver moved is a
/// failure to report, not a hop to take with the signature).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("building the notification client")
}
