//! The audit log: recording a change (every handler that changes something calls [`record`]),
//! the page with filters, and its CSV and JSON exports.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;

use super::AppState;
use super::error::{WebError, parse_day, parse_page};
use super::security::CurrentUser;
use super::views::{Pagination, download};
use crate::domain::Timestamp;
use crate::domain::accounts::Role;
use crate::domain::audit::{Action, AuditEntry, AuditFilter, NewAuditEntry};
use crate::domain::neutralize::csv_cell;

/// Entries per page.
const PER_PAGE: u32 = 50;
/// Most entries one export holds.
const MAX_EXPORT: i64 = 100_000;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/audit", get(page))
        .route("/audit/export.csv", get(export_csv))
        .route("/audit/export.json", get(export_json))
}

/// Appends one entry for the request's actor. A change that cannot be recorded is an error:
/// the log must not silently miss what happened.
pub async fn record(state: &AppState, action: Action, target: String, detail: String) -> Result<(), WebError> {
    let entry = NewAuditEntry {
        actor: super::security::actor(),
        action,
        target,
        detail,
    };
    state.store.append_audit(&entry).await?;
    Ok(())
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct AuditQuery {
    actor: String,
    action: String,
    from: String,
    to: String,
    page: Option<String>,
}

impl AuditQuery {
    fn filter(&self) -> Result<AuditFilter, WebError> {
        let text = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        Ok(AuditFilter {
            actor: text(&self.actor),
            action: text(&self.action),
            from: parse_day(&self.from, "from")?.map(Timestamp),
            // "to" is inclusive: entries before the next midnight.
            before: parse_day(&self.to, "to")?.map(|ms| Timestamp(ms + 86_400_000)),
        })
    }

    /// The filters as a query string (for page links and export links).
    fn query_string(&self) -> String {
        url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("actor", self.actor.trim()),
                ("action", self.action.trim()),
                ("from", self.from.trim()),
                ("to", self.to.trim()),
            ])
            .finish()
    }
}

pub struct AuditRow {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub detail: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "audit.html")]
pub struct AuditPage {
    pub nav: &'static str,
    pub rows: Vec<AuditRow>,
    pub pager: Pagination,
    pub actor: String,
    pub action: String,
    pub from: String,
    pub to: String,
    /// Every action name, for the filter's choices.
    pub actions: Vec<&'static str>,
    pub query: String,
}

/// The entries as the requester may see them (`audit::as_seen_by`: others' login addresses are
/// an admin's to read).
fn seen_by(user: &CurrentUser, entries: Vec<AuditEntry>) -> Vec<AuditEntry> {
    let reader = user.user().map(|u| u.username.as_str());
    let admin = user.role >= Role::Admin;
    entries
        .into_iter()
        .map(|e| crate::domain::audit::as_seen_by(e, reader, admin))
        .collect()
}

async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<AuditQuery>,
) -> Result<AuditPage, WebError> {
    let filter = q.filter()?;
    let page = parse_page(q.page.as_deref())?;
    let total = state.store.count_audit(&filter).await?;
    let query = q.query_string();
    let pager = Pagination::new(format!("/audit?{query}"), page, PER_PAGE, total);
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!("page {page} of the audit log")));
    }
    let entries = seen_by(
        &user,
        state
            .store
            .list_audit(&filter, i64::from(PER_PAGE), pager.offset())
            .await?,
    );
    Ok(AuditPage {
        nav: "audit",
        rows: entries
            .into_iter()
            .map(|e| AuditRow {
                at: e.at.display(),
                actor: e.actor,
                action: e.action,
                target: e.target,
                detail: e.detail,
            })
            .collect(),
        pager,
        actor: q.actor.trim().to_string(),
        action: q.action.trim().to_string(),
        from: q.from.trim().to_string(),
        to: q.to.trim().to_string(),
        actions: Action::ALL.iter().map(Action::as_str).collect(),
        query,
    })
}

async fn export_entries(state: &AppState, user: &CurrentUser, q: &AuditQuery) -> Result<Vec<AuditEntry>, WebError> {
    Ok(seen_by(
        user,
        state.store.list_audit(&q.filter()?, MAX_EXPORT, 0).await?,
    ))
}

/// CSV, newest first; every text cell neutralised against formula injection.
pub fn to_csv(entries: &[AuditEntry]) -> String {
    let mut out = String::from("id,at_ms,at,actor,action,target,detail\r\n");
    for e in entries {
        let fields = [
            e.id.to_string(),
            e.at.0.to_string(),
            e.at.display(),
            e.actor.clone(),
            e.action.clone(),
            e.target.clone(),
            e.detail.clone(),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_cell(f)).collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    out
}

async fn export_csv(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<AuditQuery>,
) -> Result<Response, WebError> {
    let entries = export_entries(&state, &user, &q).await?;
    Ok(download(
        to_csv(&entries),
        "text/csv; charset=utf-8",
        "bakeoff-audit.csv".into(),
    ))
}

async fn export_json(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<AuditQuery>,
) -> Result<Response, WebError> {
    let entries = export_entries(&state, &user, &q).await?;
    let body = serde_json::json!({ "schema": "bakeoff.audit/1", "entries": entries }).to_string();
    Ok(download(body, "application/json", "bakeoff-audit.json".into()))
}
