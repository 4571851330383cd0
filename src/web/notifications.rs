//! `GET /notifications`: where scheduled runs' news goes (signed webhooks, Slack-compatible
//! incoming webhooks) and the delivery log. Targets are an admin's to add, test and delete:
//! their secrets are sealed and never shown again (`app::notify`).
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::AppState;
use super::error::{WebError, parse_id};
use super::security::actor;
use super::views::{FieldKind, FieldView, FormBody};
use crate::app::AppError;
use crate::domain::Timestamp;
use crate::domain::notify::{TargetKind, TargetSpec};
use crate::domain::validation::FieldErrors;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/notifications", get(page).post(create))
        .route("/notifications/{id}/test", post(send_test))
        .route("/notifications/{id}/delete", post(delete))
}

#[derive(Debug, Clone)]
pub struct TargetRow {
    pub id: i64,
    pub name: String,
    pub kind: &'static str,
    pub url: String,
    /// "schedule nightly" / "profile Batch summarisation".
    pub about: String,
}

#[derive(Debug, Clone)]
pub struct DeliveryRow {
    pub id: i64,
    pub target: String,
    pub event: String,
    pub run_id: Option<i64>,
    pub message: String,
    pub status: &'static str,
    pub attempts: u32,
    pub when: String,
    pub error: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "notifications.html")]
pub struct NotificationsPage {
    pub nav: &'static str,
    pub targets: Vec<TargetRow>,
    pub deliveries: Vec<DeliveryRow>,
    pub name: FieldView,
    pub kind: FieldView,
    pub url: FieldView,
    pub secret: FieldView,
    pub schedule: FieldView,
    pub profile: FieldView,
    pub has_errors: bool,
}

async fn render(
    state: &AppState,
    body: Option<&FormBody>,
    errors: &FieldErrors,
) -> Result<NotificationsPage, WebError> {
    let schedules = state.store.list_schedules().await?;
    let profiles = state.store.list_threshold_profiles().await?;
    let targets = state.store.list_targets().await?;
    let name_of_target = |id: i64| {
        targets
            .iter()
            .find(|t| t.id == id)
            .map_or_else(|| format!("#{id}"), |t| t.name.clone())
    };
    let deliveries = state
        .store
        .list_deliveries(None, 50)
        .await?
        .into_iter()
        .map(|d| DeliveryRow {
            id: d.id,
            target: name_of_target(d.target_id),
            event: d.event_key,
            run_id: d.run_id,
            message: d.message,
            status: d.status.as_str(),
            attempts: d.attempts,
            when: d.delivered_at.unwrap_or(d.created_at).display(),
            error: d.last_error.unwrap_or_default(),
        })
        .collect();
    let rows = targets
        .iter()
        .map(|t| TargetRow {
            id: t.id,
            name: t.name.clone(),
            kind: t.kind.as_str(),
            url: t.url_shown.clone(),
            about: match (t.schedule_id, t.profile_id) {
                (Some(s), _) => schedules
                    .iter()
                    .find(|x| x.id == s)
                    .map_or_else(|| format!("schedule #{s}"), |x| format!("schedule {}", x.spec.name)),
                (None, Some(p)) => profiles.iter().find(|x| x.id == p).map_or_else(
                    || format!("profile #{p}"),
                    |x| format!("every schedule judged by {}", x.name),
                ),
                (None, None) => "nothing".into(),
            },
        })
        .collect();
    let typed = |name: &str| body.and_then(|b| b.get(name)).unwrap_or_default().to_string();
    let field = |name, label, kind, value: &str| FieldView::new(name, label, kind, value).errors_from(errors);
    let mut schedule_options = vec![(String::new(), "—".to_string())];
    schedule_options.extend(schedules.iter().map(|s| (s.id.to_string(), s.spec.name.clone())));
    let mut profile_options = vec![(String::new(), "—".to_string())];
    profile_options.extend(profiles.iter().map(|p| (p.id.to_string(), p.name.clone())));
    Ok(NotificationsPage {
        nav: "schedules",
        targets: rows,
        deliveries,
        name: field("name", "Name", FieldKind::Text, &typed("name")).required(),
        kind: field("kind", "Kind", FieldKind::Select, &typed("kind")).options(vec![
            ("webhook".into(), "Webhook, signed with HMAC-SHA256".into()),
            ("slack".into(), "Slack-compatible incoming webhook".into()),
            ("email".into(), "Email through an SMTP server".into()),
        ]),
        url: field("url", "URL", FieldKind::Url, &typed("url")).required().help(
            "A Slack URL is a credential: it is sealed and shown by its host only. Email: \
                 smtp://[USER@]HOST[:PORT]?tls=starttls|none&from=ADDRESS&to=ADDRESS[,ADDRESS] \
                 (tls=starttls unless stated, port 587; 25 with none).",
        ),
        // Never filled back in: a secret is write-only.
        secret: field(
            "secret",
            "Signing secret (webhook) or SMTP password (email)",
            FieldKind::Password,
            "",
        )
        .help(
            "Webhook: at least 16 characters; the receiver checks X-Bakeoff-Signature with it. Email: the SMTP \
             user's password, if the server asks for one. Sealed; never shown again.",
        ),
        schedule: field("schedule", "About schedule", FieldKind::Select, &typed("schedule")).options(schedule_options),
        profile: field(
            "profile",
            "Or every schedule judged by",
            FieldKind::Select,
            &typed("profile"),
        )
        .options(profile_options),
        has_errors: !errors.is_empty(),
    })
}

async fn page(State(state): State<AppState>) -> Result<NotificationsPage, WebError> {
    render(&state, None, &FieldErrors::default()).await
}

async fn create(State(state): State<AppState>, body: FormBody) -> Result<Response, WebError> {
    let text = |name: &str| body.get(name).unwrap_or_default().trim().to_string();
    let id_of = |name: &str| text(name).parse::<i64>().ok();
    let spec = TargetSpec {
        name: text("name"),
        kind: TargetKind::parse(&text("kind")).unwrap_or(TargetKind::Webhook),
        url: text("url"),
        secret: Some(text("secret")).filter(|s| !s.is_empty()),
        schedule_id: id_of("schedule"),
        profile_id: if id_of("schedule").is_some() {
            None
        } else {
            id_of("profile")
        },
    };
    match crate::app::notify::save_target(&state.store, &spec, &actor()).await {
        Ok(_) => Ok(Redirect::to("/notifications").into_response()),
        Err(AppError::Fields(errors)) => {
            let page = render(&state, Some(&body), &errors).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// "Send test": queued and sent at once; the delivery log says how it went.
async fn send_test(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Response, WebError> {
    let id = parse_id(&raw, "notification target")?;
    let base = state.security.public_url.origin().to_string();
    crate::app::notify::queue_test(&state.store, id, &actor(), Some(&base)).await?;
    crate::app::notify::deliver_due(&state.store, &crate::app::notify::client(), Timestamp::now()).await?;
    Ok(Redirect::to("/notifications").into_response())
}

async fn delete(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Response, WebError> {
    let id = parse_id(&raw, "notification target")?;
    crate::app::notify::delete_target(&state.store, id, &actor()).await?;
    Ok(Redirect::to("/notifications").into_response())
}
