//! A candidate's telemetry source as declared: the server's Prometheus endpoint (`metrics_url`)
//! and a GPU exporter's (`gpu_metrics_url`, a DCGM exporter or any Prometheus endpoint with GPU
//! series). Neither is sent the candidate's key or headers: a scrape is a plain GET.
use crate::validation::FieldErrors;

/// The server's root for `/health` and `/metrics`: the base URL without its query and a
/// trailing `/v1`.
pub fn server_root(base_url: &str) -> String {
    let base = base_url.split('?').next().unwrap_or(base_url).trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base).to_string()
}

/// The usual place of a server's metrics: `/metrics` at its root, where vLLM, SGLang, TGI and
/// llama.cpp serve them (and the operability probe looks).
pub fn usual_metrics_url(base_url: &str) -> Option<String> {
    url::Url::parse(base_url).ok()?;
    Some(format!("{}/metrics", server_root(base_url)))
}

/// Validates one declared endpoint (`field` names it in errors): blank is none; otherwise an
/// http(s) URL with a host and no credentials or fragment (a query is allowed: exporters take
/// `?collect[]=…`).
pub fn endpoint(e: &mut FieldErrors, field: &str, raw: &str) -> Option<String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    if raw.chars().count() > 2_000 {
        e.add(field, "is too long (at most 2000 characters)");
        return None;
    }
    match url::Url::parse(raw) {
        Ok(u) if u.scheme() != "http" && u.scheme() != "https" => {
            e.add(field, "must start with http:// or https://");
        }
        Ok(u) if u.host_str().is_none() => e.add(field, "must name a host"),
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            e.add(field, "must not contain credentials");
        }
        Ok(u) if u.fragment().is_some() => e.add(field, "must not contain a fragment"),
        Ok(u) => {
            if let Some(why) = super::super::candidate::origin_refused(u.as_str()) {
                e.add(field, why);
                return None;
            }
            return Some(u.to_string());
        }
        Err(err) => e.add(
            field,
            format!("is not a valid URL ({err}), e.g. http://127.0.0.1:8000/metrics"),
        ),
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_path_is_metrics_at_the_servers_root() {
        assert_eq!(
            usual_metrics_url("http://127.0.0.1:8000/v1").as_deref(),
            Some("http://127.0.0.1:8000/metrics")
        );
        assert_eq!(
            usual_metrics_url("https://gw.example/team/v1/").as_deref(),
            Some("https://gw.example/team/metrics")
        );
        assert_eq!(usual_metrics_url("not a url"), None);
    }

    #[test]
    fn endpoints_are_checked_and_errors_name_the_field() {
        let mut e = FieldErrors::default();
        assert_eq!(
            endpoint(&mut e, "gpu_metrics_url", " http://gpu-node:9400/metrics ").as_deref(),
            Some("http://gpu-node:9400/metrics")
        );
        assert_eq!(endpoint(&mut e, "metrics_url", ""), None);
        assert!(e.is_empty());
        for bad in [
            "ftp://x/metrics",
            "http://u:p@x/metrics",
            "http://x/metrics#a",
            "metrics",
        ] {
            let mut e = FieldErrors::default();
            assert_eq!(endpoint(&mut e, "metrics_url", bad), None, "{bad}");
            assert!(!e.is_empty(), "{bad}");
            assert!(format!("{e:?}").contains("metrics_url"), "{bad}: {e:?}");
        }
    }
}
