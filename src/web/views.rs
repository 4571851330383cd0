//! Shared pieces of views: figures with their units (digits from `domain::format`), pagination,
//! form fields, and the form body extractor. Templates only print what these produce.
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;

use super::error::WebError;
use crate::domain::validation::FieldErrors;

/// A file to save (exports): its type, and a name the browser saves it under instead of opening
/// it in the tab. CSV starts with a UTF-8 byte-order mark, without which spreadsheets read
/// Chinese (any non-ASCII) text as Latin-1.
pub fn download(body: String, content_type: &'static str, file_name: String) -> axum::response::Response {
    use axum::http::{HeaderValue, header};
    use axum::response::IntoResponse;
    let body = if content_type.starts_with("text/csv") {
        format!("\u{feff}{body}")
    } else {
        body
    };
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

pub use crate::app::pages::format::{NOT_MEASURED, ms, or_dash, pct_n, tok_s};

/// The first 12 hex digits of a content hash, as shown in lists.
pub fn short_hash(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Server-side pagination state for a list page.
#[derive(Debug, Clone, PartialEq)]
pub struct Pagination {
    pub page: u32,
    pub pages: u32,
    pub per_page: u32,
    pub total: i64,
    /// Path the page links are built on, e.g. `/runs` (a `?page=N` is appended).
    pub base: String,
}

impl Pagination {
    pub fn new(base: impl Into<String>, page: u32, per_page: u32, total: i64) -> Self {
        let pages = ((total.max(0) as u64).div_ceil(per_page as u64)).max(1) as u32;
        Pagination {
            page,
            pages,
            per_page,
            total,
            base: base.into(),
        }
    }
    pub fn offset(&self) -> i64 {
        (self.page as i64 - 1) * self.per_page as i64
    }
    /// Whether the requested page lies beyond the last one (an empty list on page 1 is fine).
    pub fn out_of_range(&self) -> bool {
        self.page > self.pages
    }
    pub fn has_prev(&self) -> bool {
        self.page > 1
    }
    pub fn has_next(&self) -> bool {
        self.page < self.pages
    }
    pub fn prev_href(&self) -> String {
        self.href(self.page.saturating_sub(1).max(1))
    }
    pub fn next_href(&self) -> String {
        self.href(self.page + 1)
    }
    pub fn href(&self, page: u32) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}page={page}", self.base)
    }
    /// 1-based index range shown, e.g. "21–40 of 57".
    pub fn range_text(&self) -> String {
        if self.total <= 0 {
            return "none".into();
        }
        let first = self.offset() + 1;
        let last = (self.offset() + self.per_page as i64).min(self.total);
        format!("{first}–{last} of {}", self.total)
    }
}

/// How an input is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    Text,
    Url,
    Number,
    Password,
    TextArea,
    Select,
    Checkbox,
}

/// One form field as the template draws it: its typed value and its error, if any.
#[derive(Debug, Clone)]
pub struct FieldView {
    pub name: &'static str,
    pub label: &'static str,
    pub kind: FieldKind,
    pub value: String,
    pub error: Option<String>,
    pub help: Option<String>,
    pub required: bool,
    /// `step` for number inputs ("any" for decimals).
    pub step: &'static str,
    /// (value, label) for selects.
    pub options: Vec<(String, String)>,
    pub checked: bool,
    /// Shown but not changeable by this reader's role (the value is still sent, unchanged).
    pub readonly: bool,
}

impl FieldView {
    pub fn new(name: &'static str, label: &'static str, kind: FieldKind, value: &str) -> Self {
        FieldView {
            name,
            label,
            kind,
            value: value.to_string(),
            error: None,
            help: None,
            required: false,
            step: "1",
            options: Vec::new(),
            checked: false,
            readonly: false,
        }
    }
    /// Shown, not changeable: the reader's role may not change it (the page says which role may).
    pub fn readonly(mut self) -> Self {
        self.readonly = true;
        self
    }

    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }
    pub fn help(mut self, text: impl Into<String>) -> Self {
        self.help = Some(text.into());
        self
    }
    pub fn decimal(mut self) -> Self {
        self.step = "any";
        self
    }
    pub fn options(mut self, options: Vec<(String, String)>) -> Self {
        self.options = options;
        self
    }
    pub fn checked(mut self, checked: bool) -> Self {
        self.checked = checked;
        self
    }
    /// Takes this field's message from `errors`, if it has one.
    pub fn errors_from(mut self, errors: &FieldErrors) -> Self {
        self.error = errors.get(self.name).map(str::to_string);
        self
    }
    pub fn id(&self) -> String {
        format!("f-{}", self.name)
    }
    pub fn error_id(&self) -> String {
        format!("f-{}-error", self.name)
    }
    pub fn help_id(&self) -> String {
        format!("f-{}-help", self.name)
    }
    /// The ids the input is described by (help text and error), for `aria-describedby`.
    pub fn described_by(&self) -> String {
        let mut ids = Vec::new();
        if self.help.is_some() {
            ids.push(self.help_id());
        }
        if self.error.is_some() {
            ids.push(self.error_id());
        }
        ids.join(" ")
    }
    pub fn input_type(&self) -> &'static str {
        match self.kind {
            FieldKind::Url => "url",
            FieldKind::Number => "number",
            FieldKind::Password => "password",
            FieldKind::Checkbox => "checkbox",
            _ => "text",
        }
    }
    pub fn is_textarea(&self) -> bool {
        self.kind == FieldKind::TextArea
    }
    pub fn is_select(&self) -> bool {
        self.kind == FieldKind::Select
    }
    pub fn is_checkbox(&self) -> bool {
        self.kind == FieldKind::Checkbox
    }
    pub fn is_selected(&self, option: &str) -> bool {
        self.value == option
    }
}

/// A group of fields under one legend.
#[derive(Debug, Clone)]
pub struct Fieldset {
    pub legend: &'static str,
    pub note: Option<&'static str>,
    pub fields: Vec<FieldView>,
}

/// A submitted `application/x-www-form-urlencoded` body as (name, value) pairs, in order.
///
/// Reads the body itself so that (a) repeated names such as several `candidate` checkboxes are
/// kept and (b) a body over the limit becomes our 413 page instead of axum's bare text.
#[derive(Debug, Clone, Default)]
pub struct FormBody {
    pub pairs: Vec<(String, String)>,
}

impl FormBody {
    pub fn parse(bytes: &[u8]) -> FormBody {
        FormBody {
            pairs: url::form_urlencoded::parse(bytes).into_owned().collect(),
        }
    }

    /// The last value given for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value given for `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Deserializes into a draft struct whose fields are strings (last value wins), e.g.
    /// `CandidateDraft`; unknown names are ignored, missing ones take the draft's defaults.
    pub fn to_draft<T: serde::de::DeserializeOwned>(&self) -> Result<T, WebError> {
        let mut map = serde_json::Map::new();
        for (k, v) in &self.pairs {
            map.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
        serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| WebError::BadRequest(format!("The form could not be read: {e}.")))
    }
}

impl<S: Send + Sync> FromRequest<S> for FormBody {
    type Rejection = WebError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(FormBody::parse(&bytes)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(WebError::PayloadTooLarge),
            Err(rejection) => Err(WebError::BadRequest(format!(
                "The form could not be read ({}).",
                rejection.body_text()
            ))),
        }
    }
}

/// The nav's name of a page (the "More" menu shows it when the page is one of its links).
pub fn nav_title(nav: &str) -> &'static str {
    match nav {
        "scorecards" => "Scorecards",
        "schedules" => "Schedules",
        "workloads" => "Workloads",
        "workers" => "Workers",
        "audit" => "Audit",
        "measure" => "How we measure",
        _ => "More",
    }
}

/// "a viewer", "an editor", "an admin" (templates pass the role by value or by reference).
pub fn role_with_article(role: impl std::borrow::Borrow<crate::domain::accounts::Role>) -> String {
    crate::domain::accounts::with_article(*role.borrow())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_units() {
        assert_eq!(ms(Some(85.0)), "85.0 ms");
        assert_eq!(ms(None), "—");
        assert_eq!(pct_n(Some(0.95), 20), "95.0 % (n=20)");
    }

    #[test]
    fn pagination_counts_pages_and_ranges() {
        let p = Pagination::new("/runs", 2, 20, 57);
        assert_eq!((p.pages, p.offset(), p.has_prev(), p.has_next()), (3, 20, true, true));
        assert_eq!(p.range_text(), "21–40 of 57");
        assert_eq!(p.next_href(), "/runs?page=3");
        let empty = Pagination::new("/runs", 1, 20, 0);
        assert_eq!((empty.pages, empty.out_of_range()), (1, false));
        assert!(Pagination::new("/runs", 4, 20, 57).out_of_range());
    }

    #[test]
    fn form_body_keeps_repeated_names_and_decodes() {
        let f = FormBody::parse(b"candidate=1&candidate=3&name=a+b%26c&stream=on");
        assert_eq!(f.all("candidate"), vec!["1", "3"]);
        assert_eq!(f.get("name"), Some("a b&c"));
        let d: crate::domain::run::RunDraft = f.to_draft().unwrap();
        assert_eq!(d.stream.as_deref(), Some("on"));
    }
}
