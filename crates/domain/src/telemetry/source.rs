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

/// Most names a candidate may keep beyond the catalogue.
pub const MAX_KEPT_NAMES: usize = 50;

/// Whether `name` is a Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// The series a candidate keeps from its scrapes beyond the catalogue's, as typed (names
/// separated by commas, spaces or lines): each a metric family name (`vllm:num_requests_swapped`;
/// its `_total`, `_bucket`, `_sum` and `_count` series come with it) or a prefix ending in `*`
/// (`vllm:spec_decode_*`). Duplicates are dropped; an error names the entry.
pub fn keep_list(e: &mut FieldErrors, field: &str, raw: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for entry in raw
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
    {
        let name = entry.strip_suffix('*').unwrap_or(entry);
        if name.is_empty() {
            e.add(field, "a lone `*` would keep every series; name a prefix before it");
            return Vec::new();
        }
        if name.len() > 200 || !is_metric_name(name) {
            e.add(
                field,
                format!(
                    "{:?} is not a Prometheus metric name (letters, digits, `_` and `:`, not starting with a digit), \
                     optionally ending in `*` for a prefix",
                    crate::validation::truncate(entry, 60)
                ),
            );
            return Vec::new();
        }
        if !out.iter().any(|k| k == entry) {
            out.push(entry.to_string());
        }
    }
    if out.len() > MAX_KEPT_NAMES {
        e.add(field, format!("at most {MAX_KEPT_NAMES} names, got {}", out.len()));
        return Vec::new();
    }
    out
}

/// Whether a kept entry (`keep_list`) takes a sample's family `family`.
pub fn keeps(entry: &str, family: &str) -> bool {
    match entry.strip_suffix('*') {
        Some(prefix) => family.starts_with(prefix),
        None => family == entry,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kept_names_are_metric_names_or_prefixes_and_errors_name_the_entry() {
        let mut e = FieldErrors::default();
        assert_eq!(
            keep_list(
                &mut e,
                "metrics_keep",
                "vllm:num_requests_swapped, vllm:spec_decode_*\nfoo_total foo_total"
            ),
            ["vllm:num_requests_swapped", "vllm:spec_decode_*", "foo_total"]
        );
        assert!(e.is_empty(), "{e:?}");
        assert!(keep_list(&mut e, "metrics_keep", "  ").is_empty());
        for bad in ["*", "9lives", "a-b", "x{le=\"1\"}"] {
            let mut e = FieldErrors::default();
            assert!(keep_list(&mut e, "metrics_keep", bad).is_empty(), "{bad}");
            assert!(e.get("metrics_keep").is_some(), "{bad}");
        }
        let many: Vec<String> = (0..51).map(|i| format!("m{i}")).collect();
        let mut e = FieldErrors::default();
        keep_list(&mut e, "metrics_keep", &many.join(","));
        assert!(e.get("metrics_keep").unwrap().contains("at most 50"));
        assert!(keeps("vllm:spec_decode_*", "vllm:spec_decode_num_accepted_tokens"));
        assert!(keeps("foo", "foo") && !keeps("foo", "foobar") && !keeps("bar*", "foo"));
    }

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
