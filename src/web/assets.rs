//! `/static/*`: the files embedded from `static/`, with their content types and long cache
//! headers. Pages link them with `?v=<bakeoff version>`, so a new release busts the cache.
use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::error::WebError;
use crate::assets::StaticAssets;

pub fn router() -> Router<AppState> {
    Router::new().route("/static/{*path}", get(asset))
}

/// The content type for a file name: text types carry their charset.
pub fn content_type(path: &str, guessed: &str) -> String {
    let ext = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "css" => "text/css; charset=utf-8".into(),
        "js" | "mjs" => "text/javascript; charset=utf-8".into(),
        "md" => "text/markdown; charset=utf-8".into(),
        "svg" => "image/svg+xml".into(),
        _ if guessed.starts_with("text/") => format!("{guessed}; charset=utf-8"),
        _ => guessed.to_string(),
    }
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Result<Response, WebError> {
    let file = StaticAssets::get(&path).ok_or_else(|| WebError::NotFound(format!("file /static/{path}")))?;
    let etag = format!("\"{}\"", hex::encode(&file.metadata.sha256_hash()[..16]));
    let mut response = if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag))
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        file.data.into_owned().into_response()
    };
    let h = response.headers_mut();
    let content_type = content_type(&path, file.metadata.mimetype());
    if let Ok(v) = HeaderValue::from_str(&content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::content_type;

    #[test]
    fn text_types_carry_charset() {
        assert_eq!(content_type("app.css", "text/css"), "text/css; charset=utf-8");
        assert_eq!(
            content_type("vendor/htmx.min.js", "application/javascript"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("x.png", "image/png"), "image/png");
    }
}
