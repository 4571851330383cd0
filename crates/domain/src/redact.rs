//! Hiding secrets in text that is logged, printed or exported.

/// The URL with any password replaced by `****` (a database or base URL may carry
/// credentials); anything that does not parse as a URL is returned as is.
pub fn url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("****"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_lose_their_password_and_nothing_else() {
        assert_eq!(super::url("postgres://u:secret@h/db"), "postgres://u:****@h/db");
        assert_eq!(
            super::url("https://u:p@api.example/v1"),
            "https://u:****@api.example/v1"
        );
        assert_eq!(super::url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(super::url("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(super::url("not a url"), "not a url");
    }
}
