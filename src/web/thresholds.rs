//! Threshold profiles in the browser: the list (with workload templates), a profile with its
//! full change history and the differences between versions, and the create / edit forms.
//!
//! Every save is a new version with who, when and why. "Who" is a "your name" field that a
//! cookie remembers. Nothing is stored when any field is invalid.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Deserialize;

use super::AppState;
use super::error::{WebError, parse_id};
use super::security::actor;
use super::views::FormBody;
use crate::domain::retirement::ItemKind;
use crate::domain::thresholds::catalog::{CATALOG, Param};
use crate::domain::thresholds::form::{BLANK_RULE_ROWS, ProfileDraft, RuleDraft, rule_field};
use crate::domain::thresholds::history::{RuleChange, diff_rules};
use crate::domain::thresholds::key::MetricKey;
use crate::domain::thresholds::slo::{SloDraft, diff_slo};
use crate::domain::thresholds::templates::{template, templates};
use crate::domain::thresholds::units::Dimension;
use crate::domain::thresholds::{Comparator, ThresholdProfile};
use crate::domain::validation::FieldErrors;

/// Cookie remembering the "your name" field.
pub const NAME_COOKIE: &str = "bakeoff_name";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/thresholds", get(list).post(create))
        .route("/thresholds/new", get(new_form))
        .route("/thresholds/{id}", get(detail))
        .route("/thresholds/{id}/edit", get(edit_form).post(update))
}

// ---------------------------------------------------------------- the list

#[derive(Debug, Clone)]
pub struct ProfileRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: u32,
    pub rules: Vec<String>,
    /// The team's default profile (judges the archive and scorecards opened without a choice).
    pub is_default: bool,
}

#[derive(Debug, Clone)]
pub struct TemplateRow {
    pub key: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub rules: Vec<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "thresholds/list.html")]
pub struct ThresholdsPage {
    pub nav: &'static str,
    pub profiles: Vec<ProfileRow>,
    /// Retired profiles: listed apart, each with Restore.
    pub retired: Vec<ProfileRow>,
    pub templates: Vec<TemplateRow>,
}

async fn list(State(state): State<AppState>) -> Result<ThresholdsPage, WebError> {
    let profiles = state.store.list_threshold_profiles().await?;
    let default_id = crate::app::retirement::default_profile_id(&state.store, &profiles).await?;
    let retired_ids = crate::app::retirement::retired(&state.store, ItemKind::ThresholdProfile).await?;
    let (retired, profiles): (Vec<_>, Vec<_>) = profiles.iter().partition(|p| retired_ids.contains(&p.id));
    let to_row = |p: &ThresholdProfile| ProfileRow {
        id: p.id,
        name: p.name.clone(),
        description: p.description.clone(),
        version: p.version,
        rules: p
            .rules
            .iter()
            .map(|r| r.describe())
            .chain(p.slo.as_ref().and_then(|s| s.describe()).map(|s| format!("SLO: {s}")))
            .collect(),
        is_default: Some(p.id) == default_id,
    };
    Ok(ThresholdsPage {
        nav: "thresholds",
        profiles: profiles.into_iter().map(to_row).collect(),
        retired: retired.into_iter().map(to_row).collect(),
        templates: templates()
            .into_iter()
            .map(|t| TemplateRow {
                key: t.key,
                name: t.name,
                description: t.description,
                rules: t.rules.iter().map(|r| r.describe()).collect(),
            })
            .collect(),
    })
}

// ---------------------------------------------------------------- one profile and its history

#[derive(Debug, Clone)]
pub struct RuleView {
    pub label: String,
    pub threshold: String,
    pub dimension: &'static str,
    pub caliber: String,
    pub rationale: String,
}

#[derive(Debug, Clone)]
pub struct ChangeView {
    pub kind: &'static str,
    pub text: String,
    /// The rule's rationale after the change (or before, for a removal).
    pub rationale: String,
}

#[derive(Debug, Clone)]
pub struct VersionView {
    pub version: u32,
    pub changed_by: String,
    pub at: String,
    pub rationale: String,
    pub changes: Vec<ChangeView>,
    pub first: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "thresholds/detail.html")]
pub struct ProfilePage {
    pub nav: &'static str,
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: u32,
    pub rules: Vec<RuleView>,
    /// The profile's SLO block in words (None: it has none).
    pub slo: Option<String>,
    pub history: Vec<VersionView>,
    pub saved: bool,
}

pub fn rule_views(profile: &ThresholdProfile) -> Vec<RuleView> {
    profile
        .rules
        .iter()
        .map(|r| match MetricKey::parse(&r.metric) {
            Ok(k) => RuleView {
                label: k.label(),
                threshold: format!("{} {}", r.comparator.symbol(), k.def().unit.format(r.value)),
                dimension: k.def().dimension.as_str(),
                caliber: k.def().caliber.to_string(),
                rationale: r.rationale.clone(),
            },
            Err(why) => RuleView {
                label: r.metric.clone(),
                threshold: format!("{} {} {}", r.comparator.symbol(), r.value, r.unit),
                dimension: "—",
                caliber: why,
                rationale: r.rationale.clone(),
            },
        })
        .collect()
}

fn change_view(c: &RuleChange) -> ChangeView {
    let rationale = match c {
        RuleChange::Added(r) | RuleChange::Removed(r) => r.rationale.clone(),
        RuleChange::Changed { old, new } if old.rationale != new.rationale => {
            format!("was: {} — now: {}", old.rationale, new.rationale)
        }
        RuleChange::Changed { new, .. } => new.rationale.clone(),
    };
    // The kind is shown beside the text, so the text does not repeat it.
    let text = match c {
        RuleChange::Added(r) | RuleChange::Removed(r) => r.describe(),
        RuleChange::Changed { .. } => c.describe(),
    };
    ChangeView {
        kind: c.kind(),
        text,
        rationale,
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct DetailQuery {
    pub saved: Option<String>,
}

async fn load_profile(state: &AppState, raw: &str) -> Result<ThresholdProfile, WebError> {
    let id = parse_id(raw, "threshold profile")?;
    state
        .store
        .get_threshold_profile(id, None)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("threshold profile #{id}")))
}

async fn detail(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Query(q): Query<DetailQuery>,
) -> Result<ProfilePage, WebError> {
    let profile = load_profile(&state, &raw).await?;
    // Newest first; each version is compared with the one before it.
    let history = state.store.threshold_profile_history(profile.id).await?;
    let versions = history
        .iter()
        .enumerate()
        .map(|(i, change)| {
            let previous = history.get(i + 1);
            let mut changes: Vec<ChangeView> = match previous {
                Some(prev) => diff_rules(&prev.rules, &change.rules).iter().map(change_view).collect(),
                None => change
                    .rules
                    .iter()
                    .map(|r| change_view(&RuleChange::Added(r.clone())))
                    .collect(),
            };
            // The SLO block's change, as one line.
            if let Some(text) = diff_slo(previous.and_then(|p| p.slo.as_ref()), change.slo.as_ref()) {
                changes.push(ChangeView {
                    kind: "slo",
                    text,
                    rationale: String::new(),
                });
            }
            VersionView {
                version: change.version,
                changed_by: change.changed_by.clone(),
                at: change.at.display(),
                rationale: change.rationale.clone(),
                changes,
                first: previous.is_none(),
            }
        })
        .collect();
    Ok(ProfilePage {
        nav: "thresholds",
        id: profile.id,
        name: profile.name.clone(),
        description: profile.description.clone(),
        version: profile.version,
        rules: rule_views(&profile),
        slo: profile.slo.as_ref().and_then(|s| s.describe()),
        history: versions,
        saved: q.saved.is_some(),
    })
}

// ---------------------------------------------------------------- the form

/// One metric choice in the form's list.
#[derive(Debug, Clone)]
pub struct MetricOption {
    pub base: &'static str,
    pub label: String,
}

/// The catalog grouped by dimension, for `<optgroup>`s.
#[derive(Debug, Clone)]
pub struct MetricGroup {
    pub title: &'static str,
    pub options: Vec<MetricOption>,
}

#[derive(Debug, Clone)]
pub struct RuleRowView {
    pub index: usize,
    pub draft: RuleDraft,
    pub errors: Vec<String>,
    /// Names of the inputs with an error, for aria-invalid.
    pub invalid: Vec<&'static str>,
}

impl RuleRowView {
    pub fn field(&self, part: &str) -> String {
        rule_field(self.index, part)
    }
    pub fn is_invalid(&self, part: &str) -> bool {
        self.invalid.contains(&part)
    }
    pub fn selected_metric(&self, base: &str) -> bool {
        self.draft.metric == base
    }
    pub fn selected_comparator(&self, value: &str) -> bool {
        self.draft.comparator == value
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "thresholds/form.html")]
pub struct ProfileFormPage {
    pub nav: &'static str,
    pub heading: String,
    pub action: String,
    /// Some(name) when editing: the name is the profile's identity and is not editable.
    pub fixed_name: Option<String>,
    pub draft: ProfileDraft,
    pub rows: Vec<RuleRowView>,
    pub groups: Vec<MetricGroup>,
    pub comparators: Vec<(&'static str, &'static str)>,
    pub errors: FieldErrors,
    pub has_errors: bool,
    pub template_name: Option<&'static str>,
    pub cancel: String,
    /// The SLO block's fields: (form name, label).
    pub slo_fields: Vec<(&'static str, &'static str)>,
}

impl ProfileFormPage {
    pub fn error(&self, field: &str) -> Option<String> {
        self.errors.get(field).map(str::to_string)
    }

    /// The SLO field `field` as typed.
    pub fn slo_value(&self, field: &str) -> &str {
        let s = &self.draft.slo;
        match field {
            "slo_ttft_ms" => &s.ttft_ms,
            "slo_ttfa_ms" => &s.ttfa_ms,
            "slo_tpot_ms" => &s.tpot_ms,
            "slo_e2e_ms" => &s.e2e_ms,
            "slo_target" => &s.target_percent,
            "slo_from_turn" => &s.from_turn,
            "slo_later_ttft_ms" => &s.later_ttft_ms,
            "slo_later_ttfa_ms" => &s.later_ttfa_ms,
            "slo_later_tpot_ms" => &s.later_tpot_ms,
            "slo_later_e2e_ms" => &s.later_e2e_ms,
            _ => "",
        }
    }
}

/// The SLO block's fields in form order, with their labels.
const SLO_FIELDS: [(&str, &str); 10] = [
    ("slo_ttft_ms", "TTFT limit (ms)"),
    ("slo_ttfa_ms", "TTFA limit (ms)"),
    ("slo_tpot_ms", "TPOT limit (ms)"),
    ("slo_e2e_ms", "E2E limit (ms)"),
    ("slo_target", "Target attainment (%)"),
    ("slo_from_turn", "Later-turn limits from turn"),
    ("slo_later_ttft_ms", "Later turns: TTFT limit (ms)"),
    ("slo_later_ttfa_ms", "Later turns: TTFA limit (ms)"),
    ("slo_later_tpot_ms", "Later turns: TPOT limit (ms)"),
    ("slo_later_e2e_ms", "Later turns: E2E limit (ms)"),
];

fn metric_groups() -> Vec<MetricGroup> {
    Dimension::ALL
        .iter()
        .map(|d| MetricGroup {
            title: d.title(),
            options: CATALOG
                .iter()
                .filter(|m| m.dimension == *d)
                .map(|m| {
                    let mut label = format!("{} ({})", m.label, m.unit.symbol());
                    match m.param {
                        Param::Grader => label.push_str(" — name the grader"),
                        Param::ErrorClass => label.push_str(" — optional error class"),
                        Param::Probe => label.push_str(" — name the probe"),
                        Param::ChecklistItem => label.push_str(" — name the item"),
                        Param::Incumbent => label.push_str(" — optional incumbent's name (else the scorecard's)"),
                        Param::Turn => label.push_str(" — the turn number (1 to 64)"),
                        Param::None => {}
                    }
                    if m.not_measured_yet.is_some() {
                        label.push_str(" — not measured yet");
                    }
                    MetricOption { base: m.base, label }
                })
                .collect(),
        })
        .collect()
}

fn build_form(
    heading: String,
    action: String,
    fixed_name: Option<String>,
    mut draft: ProfileDraft,
    errors: FieldErrors,
    template_name: Option<&'static str>,
    cancel: String,
) -> ProfileFormPage {
    // Room to add rules: a few blank rows after the typed ones.
    draft.rules.extend((0..BLANK_RULE_ROWS).map(|_| RuleDraft {
        comparator: Comparator::AtLeast.as_str().to_string(),
        ..Default::default()
    }));
    let rows = draft
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let parts = ["metric", "param", "concurrency", "comparator", "value", "rationale"];
            let invalid: Vec<&'static str> = parts
                .iter()
                .copied()
                .filter(|p| errors.get(&rule_field(i, p)).is_some())
                .collect();
            let errors = invalid
                .iter()
                .filter_map(|p| errors.get(&rule_field(i, p)).map(|m| format!("{}: {m}", part_label(p))))
                .collect();
            RuleRowView {
                index: i,
                draft: r.clone(),
                errors,
                invalid,
            }
        })
        .collect();
    ProfileFormPage {
        nav: "thresholds",
        heading,
        action,
        fixed_name,
        has_errors: !errors.is_empty(),
        draft,
        rows,
        groups: metric_groups(),
        comparators: Comparator::ALL.iter().map(|c| (c.as_str(), c.symbol())).collect(),
        errors,
        template_name,
        cancel,
        slo_fields: SLO_FIELDS.to_vec(),
    }
}

fn part_label(part: &str) -> &'static str {
    match part {
        "metric" => "Metric",
        "param" => "Grader / class / probe / item / incumbent",
        "concurrency" => "At concurrency",
        "comparator" => "Comparator",
        "value" => "Value",
        _ => "Rationale",
    }
}

/// The "your name" cookie's value, if set.
pub fn remembered_name(headers: &HeaderMap) -> String {
    super::security::cookie(headers, NAME_COOKIE)
        .map(|v| {
            url::form_urlencoded::parse(format!("n={v}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

/// `Set-Cookie` remembering `name` for a year.
pub fn name_cookie(name: &str) -> Option<HeaderValue> {
    let encoded: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
    HeaderValue::from_str(&format!(
        "{NAME_COOKIE}={encoded}; Path=/; Max-Age=31536000; SameSite=Lax; HttpOnly"
    ))
    .ok()
}

/// "Add rule rows" posts the form to itself: it comes back as typed with more blank rows, and
/// nothing is saved (no JavaScript needed).
fn wants_more_rows(body: &FormBody) -> bool {
    body.get("more_rules").is_some()
}

fn draft_from_body(body: &FormBody) -> ProfileDraft {
    let text = |name: &str| body.get(name).unwrap_or("").to_string();
    // Rows are numbered; read until a number is missing entirely (bounded by the rule limit).
    let mut rules = Vec::new();
    for i in 0..crate::domain::thresholds::form::MAX_RULES + BLANK_RULE_ROWS {
        if body.get(&rule_field(i, "metric")).is_none() && body.get(&rule_field(i, "value")).is_none() {
            break;
        }
        let part = |p: &str| body.get(&rule_field(i, p)).unwrap_or("").to_string();
        rules.push(RuleDraft {
            metric: part("metric"),
            param: part("param"),
            concurrency: part("concurrency"),
            comparator: part("comparator"),
            value: part("value"),
            rationale: part("rationale"),
        });
    }
    ProfileDraft {
        name: text("name"),
        description: text("description"),
        changed_by: text("changed_by"),
        change_rationale: text("change_rationale"),
        rules,
        slo: SloDraft {
            ttft_ms: text("slo_ttft_ms"),
            ttfa_ms: text("slo_ttfa_ms"),
            tpot_ms: text("slo_tpot_ms"),
            e2e_ms: text("slo_e2e_ms"),
            target_percent: text("slo_target"),
            from_turn: text("slo_from_turn"),
            later_ttft_ms: text("slo_later_ttft_ms"),
            later_ttfa_ms: text("slo_later_ttfa_ms"),
            later_tpot_ms: text("slo_later_tpot_ms"),
            later_e2e_ms: text("slo_later_e2e_ms"),
        },
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct NewQuery {
    pub template: Option<String>,
}

async fn new_form(headers: HeaderMap, Query(q): Query<NewQuery>) -> Result<ProfileFormPage, WebError> {
    let chosen = match q.template.as_deref().filter(|t| !t.is_empty()) {
        Some(key) => Some(template(key).ok_or_else(|| WebError::NotFound(format!("workload template {key:?}")))?),
        None => None,
    };
    let draft = ProfileDraft {
        name: chosen.as_ref().map(|t| t.name.to_string()).unwrap_or_default(),
        description: chosen.as_ref().map(|t| t.description.to_string()).unwrap_or_default(),
        changed_by: remembered_name(&headers),
        change_rationale: chosen
            .as_ref()
            .map(|t| format!("started from the {} template", t.name))
            .unwrap_or_default(),
        rules: chosen
            .as_ref()
            .map(|t| t.rules.iter().map(RuleDraft::from_rule).collect())
            .unwrap_or_default(),
        slo: SloDraft::default(),
    };
    Ok(build_form(
        "New threshold profile".into(),
        "/thresholds".into(),
        None,
        draft,
        FieldErrors::default(),
        chosen.map(|t| t.name),
        "/thresholds".into(),
    ))
}

fn saved(id: i64, changed_by: &str) -> Response {
    let mut response = Redirect::to(&format!("/thresholds/{id}?saved=1")).into_response();
    if let Some(cookie) = name_cookie(changed_by) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

fn invalid(page: ProfileFormPage) -> Response {
    (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
}

async fn create(State(state): State<AppState>, body: FormBody) -> Result<Response, WebError> {
    let draft = draft_from_body(&body);
    let form = |draft: ProfileDraft, errors| {
        build_form(
            "New threshold profile".into(),
            "/thresholds".into(),
            None,
            draft,
            errors,
            None,
            "/thresholds".into(),
        )
    };
    if wants_more_rows(&body) {
        return Ok(form(draft, FieldErrors::default()).into_response());
    }
    let save = match draft.validate() {
        Ok(save) => save,
        Err(errors) => return Ok(invalid(form(draft, errors))),
    };
    // Saving under an existing name would append a version to that profile: refuse instead.
    let existing = state.store.list_threshold_profiles().await?;
    if existing.iter().any(|p| p.name == save.name) {
        let mut errors = FieldErrors::default();
        errors.add(
            "name",
            "is already the name of a profile; choose another, or edit that profile",
        );
        return Ok(invalid(form(draft, errors)));
    }
    let (id, version) = crate::app::profiles::save(&state.store, &save, &actor(), "created, ").await?;
    tracing::info!(profile_id = id, version, "threshold profile created");
    Ok(saved(id, &save.changed_by))
}

async fn edit_form(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Result<ProfileFormPage, WebError> {
    let profile = load_profile(&state, &raw).await?;
    let mut draft = ProfileDraft::from_profile(&profile);
    draft.changed_by = remembered_name(&headers);
    Ok(build_form(
        format!("Edit {} (version {})", profile.name, profile.version),
        format!("/thresholds/{}/edit", profile.id),
        Some(profile.name.clone()),
        draft,
        FieldErrors::default(),
        None,
        format!("/thresholds/{}", profile.id),
    ))
}

async fn update(State(state): State<AppState>, Path(raw): Path<String>, body: FormBody) -> Result<Response, WebError> {
    let profile = load_profile(&state, &raw).await?;
    let mut draft = draft_from_body(&body);
    // The name is the profile's identity: whatever was posted, it stays.
    draft.name = profile.name.clone();
    let form = |draft: ProfileDraft, errors| {
        build_form(
            format!("Edit {} (version {})", profile.name, profile.version),
            format!("/thresholds/{}/edit", profile.id),
            Some(profile.name.clone()),
            draft,
            errors,
            None,
            format!("/thresholds/{}", profile.id),
        )
    };
    if wants_more_rows(&body) {
        return Ok(form(draft, FieldErrors::default()).into_response());
    }
    let save = match draft.validate() {
        Ok(save) => save,
        Err(errors) => return Ok(invalid(form(draft, errors))),
    };
    let (id, version) = crate::app::profiles::save(&state.store, &save, &actor(), "").await?;
    tracing::info!(profile_id = id, version, "threshold profile saved");
    Ok(saved(id, &save.changed_by))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_cookie_round_trips_through_headers() {
        let cookie = name_cookie("Ana Müller; x=1").unwrap();
        let value = cookie.to_str().unwrap().split(';').next().unwrap().to_string();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {value}")).unwrap(),
        );
        assert_eq!(remembered_name(&headers), "Ana Müller; x=1");
        assert_eq!(remembered_name(&HeaderMap::new()), "");
    }

    #[test]
    fn form_rows_are_read_in_order_until_the_numbering_stops() {
        let body = FormBody::parse(
            b"name=p&changed_by=a&change_rationale=b&rule0_metric=accuracy&rule0_comparator=%3E%3D&rule0_value=90\
              &rule1_metric=&rule1_value=&rule2_metric=ttft_p95_ms&rule2_comparator=%3C%3D&rule2_value=800",
        );
        let d = draft_from_body(&body);
        assert_eq!(d.rules.len(), 3);
        let save = d.validate().unwrap();
        assert_eq!(save.rules.len(), 2, "the blank middle row is skipped");
    }
}
