//! The Prometheus text exposition format (version 0.0.4, which every serving engine and the DCGM
//! exporter answer in): `# TYPE` and `# HELP` lines, samples `name{label="value",…} value
//! [timestamp]`, label values with `\\`, `\"` and `\n` escapes, values as floats, `+Inf`, `-Inf`
//! or `NaN`. Histograms arrive as their `_bucket{le=…}`, `_sum` and `_count` samples; the family's
//! `# TYPE` line names them.
use std::collections::BTreeMap;
use std::fmt::Write;

/// What a `# TYPE` line declares a family to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

impl MetricType {
    fn parse(s: &str) -> Option<MetricType> {
        Some(match s {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            "untyped" | "unknown" => MetricType::Untyped,
            _ => return None,
        })
    }
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In the order written.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The series' identity as one string: `name{a="1",b="2"}` with labels sorted by name and
    /// values escaped as in the exposition, so the same series always has the same key.
    pub fn key(&self) -> String {
        series_key(&self.name, &self.labels)
    }
}

/// `name{a="1",b="2"}` (labels sorted, values escaped); just `name` without labels.
pub fn series_key(name: &str, labels: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = labels.iter().collect();
    sorted.sort();
    let mut out = String::from(name);
    if !sorted.is_empty() {
        out.push('{');
        for (i, (k, v)) in sorted.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
        }
        out.push('}');
    }
    out
}

/// Label value escaping of the exposition format: backslash, double quote and newline.
pub fn escape_label_value(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A whole scrape, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    /// Family name → declared type (families without a `# TYPE` line are untyped).
    pub types: BTreeMap<String, MetricType>,
}

impl Exposition {
    /// The declared type of the family a sample belongs to: its own name's, or for
    /// `_bucket`/`_sum`/`_count`/`_total`/`_created` samples the base name's.
    pub fn type_of(&self, sample_name: &str) -> MetricType {
        if let Some(t) = self.types.get(sample_name) {
            return *t;
        }
        for suffix in ["_bucket", "_sum", "_count", "_total", "_created"] {
            if let Some(base) = sample_name.strip_suffix(suffix)
                && let Some(t) = self.types.get(base)
            {
                return *t;
            }
        }
        MetricType::Untyped
    }
}

/// Where and why a body is not Prometheus text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ExpositionError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

/// At most this many sample lines are read from one scrape: a server answering more is cut
/// (an error), so a runaway exporter cannot fill memory or the store.
pub const MAX_SAMPLES: usize = 50_000;

/// Parses one exposition body. The first malformed line is an error naming it; nothing is
/// returned from a body with an error (a half-read scrape would mislead).
pub fn parse(text: &str) -> Result<Exposition, ExpositionError> {
    let mut out = Exposition::default();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |message: String| ExpositionError { line: line_no, message };
        let line = raw.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE") {
                let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                    return Err(err("a # TYPE line needs a metric name and a type".into()));
                };
                let kind = MetricType::parse(kind).ok_or_else(|| {
                    err(format!(
                        "{kind:?} is not a metric type (counter, gauge, histogram, summary, untyped)"
                    ))
                })?;
                if !valid_metric_name(name) {
                    return Err(err(format!("{name:?} is not a metric name")));
                }
                out.types.insert(name.to_string(), kind);
            }
            continue;
        }
        if out.samples.len() >= MAX_SAMPLES {
            return Err(err(format!("more than {MAX_SAMPLES} samples in one scrape")));
        }
        out.samples.push(parse_sample(line).map_err(err)?);
    }
    Ok(out)
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
    let name = &line[..name_end];
    if !valid_metric_name(name) {
        return Err(format!("{name:?} is not a metric name"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or_else(|| format!("{name}: no value"))?;
    let value = parse_value(value).ok_or_else(|| format!("{name}: {value:?} is not a number"))?;
    if let Some(ts) = fields.next()
        && ts.parse::<i64>().is_err()
    {
        return Err(format!("{name}: {ts:?} is not a timestamp"));
    }
    if fields.next().is_some() {
        return Err(format!("{name}: text after the value and timestamp"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Labels after the opening brace, up to and including the closing one; returns the rest.
/// A sample's labels in the order written.
type Labels = Vec<(String, String)>;

fn parse_labels(mut s: &str) -> Result<(Labels, &str), String> {
    let mut labels: Labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let eq = s.find('=').ok_or("a label without =")?;
        let name = s[..eq].trim();
        if !valid_label_name(name) {
            return Err(format!("{name:?} is not a label name"));
        }
        s = s[eq + 1..].trim_start();
        s = s
            .strip_prefix('"')
            .ok_or_else(|| format!("label {name}: the value must be quoted"))?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("label {name}: the value's closing quote is missing")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, c)) => {
                        // Unknown escapes are kept as written, as Prometheus does.
                        value.push('\\');
                        value.push(c);
                    }
                    None => return Err(format!("label {name}: the value ends in a backslash")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.iter().any(|(k, _)| k == name) {
            return Err(format!("label {name} is given twice"));
        }
        labels.push((name.to_string(), value));
        s = s[end + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err("labels must be separated by commas and closed by }".into());
        }
    }
}

/// A sample value: a float, or `+Inf`, `-Inf`, `NaN` (Go's spelling).
pub fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => s.parse::<f64>().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="swift-7b"} 3.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="swift-7b"} 12.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="swift-7b"} 2.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="swift-7b"} 5.0
vllm:time_to_first_token_seconds_sum{model_name="swift-7b"} 1.25
vllm:time_to_first_token_seconds_count{model_name="swift-7b"} 5.0
"#;

    #[test]
    fn reads_a_vllm_scrape_with_types_labels_and_histograms() {
        let e = parse(VLLM).unwrap();
        assert_eq!(e.samples.len(), 6);
        assert_eq!(e.samples[0].name, "vllm:num_requests_waiting");
        assert_eq!(e.samples[0].label("model_name"), Some("swift-7b"));
        assert_eq!(e.samples[0].value, 3.0);
        assert_eq!(e.type_of("vllm:num_preemptions_total"), MetricType::Counter);
        assert_eq!(
            e.type_of("vllm:time_to_first_token_seconds_bucket"),
            MetricType::Histogram
        );
        assert_eq!(e.samples[3].value, 5.0);
        assert_eq!(e.samples[3].label("le"), Some("+Inf"));
        assert_eq!(e.type_of("something_else"), MetricType::Untyped);
    }

    #[test]
    fn label_escapes_timestamps_and_special_values() {
        let e = parse("m{a=\"x\\\"y\\\\z\\nw\", b=\"\"} NaN 1700000000000\nn -Inf\no{} +Inf\np 1e-3\n").unwrap();
        assert_eq!(e.samples[0].label("a"), Some("x\"y\\z\nw"));
        assert_eq!(e.samples[0].label("b"), Some(""));
        assert!(e.samples[0].value.is_nan());
        assert_eq!(e.samples[1].value, f64::NEG_INFINITY);
        assert_eq!(e.samples[2].value, f64::INFINITY);
        assert_eq!(e.samples[3].value, 0.001);
        // The key escapes back and sorts labels.
        assert_eq!(e.samples[0].key(), "m{a=\"x\\\"y\\\\z\\nw\",b=\"\"}");
        let reordered = parse("m{b=\"\",a=\"x\\\"y\\\\z\\nw\"} 1").unwrap();
        assert_eq!(reordered.samples[0].key(), e.samples[0].key());
    }

    #[test]
    fn trailing_comma_in_labels_is_accepted() {
        let e = parse("m{a=\"1\",} 2").unwrap();
        assert_eq!(e.samples[0].labels, vec![("a".to_string(), "1".to_string())]);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("ok 1\nbad{a=1} 2", 2, "quoted"),
            ("ok 1\n\n9bad 1", 3, "metric name"),
            ("m{a=\"1} 2", 1, "closing quote"),
            ("m{a=\"1\"", 1, "closed by }"),
            ("m one", 1, "not a number"),
            ("m 1 2 3", 1, "after the value"),
            ("m{a=\"1\",a=\"2\"} 1", 1, "twice"),
            ("# TYPE m fancy", 1, "not a metric type"),
            ("m", 1, "no value"),
            ("m 1 soon", 1, "timestamp"),
        ];
        for (text, line, words) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(words), "{text:?}: {e}");
        }
    }

    #[test]
    fn html_is_not_prometheus_text() {
        assert!(parse("<html><body>not found</body></html>").is_err());
    }

    #[test]
    fn comments_and_help_lines_are_skipped_and_crlf_is_read() {
        let e = parse("# HELP m some \\n help\r\n# random comment\r\nm 4\r\n").unwrap();
        assert_eq!(e.samples.len(), 1);
        assert_eq!(e.samples[0].value, 4.0);
    }
}
