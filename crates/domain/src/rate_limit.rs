//! A provider's rate-limit headers, read from one response, so a storm of 429s can be explained
//! (what the server said its limits were, how much was left, how long it asked to wait).
//! OpenAI and Azure OpenAI send `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (resets
//! as Go durations: `1s`, `6m0s`, `20ms`); Anthropic sends
//! `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
//! (resets as RFC 3339 times); any server may send `retry-after` (seconds or an HTTP-date).
//! A malformed value is ignored: it never fails the request it came with. Pure: the caller
//! supplies the response's arrival time.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One limit the server stated: of requests, tokens, input or output tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    /// Seconds from the response until the bucket refills (an Anthropic reset time is counted
    /// from the response's arrival).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_s: Option<f64>,
}

impl Bucket {
    fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset_s.is_none()
    }
}

/// What one response's rate-limit headers said (stored as JSON in `request_records.rate_limit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RateLimit {
    #[serde(default, skip_serializing_if = "Bucket::is_empty")]
    pub requests: Bucket,
    #[serde(default, skip_serializing_if = "Bucket::is_empty")]
    pub tokens: Bucket,
    #[serde(default, skip_serializing_if = "Bucket::is_empty")]
    pub input_tokens: Bucket,
    #[serde(default, skip_serializing_if = "Bucket::is_empty")]
    pub output_tokens: Bucket,
    /// The wait `retry-after` asked for, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<f64>,
}

/// Whether a response header is one this module reads: the only headers a record keeps.
pub fn is_rate_limit_header(name: &str) -> bool {
    // Called for every header of every response: no allocation.
    let starts = |prefix: &str| name.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
    starts("x-ratelimit-") || starts("anthropic-ratelimit-") || name.eq_ignore_ascii_case("retry-after")
}

impl RateLimit {
    /// Reads the headers of a response that arrived at `now`; None when none of them is a
    /// rate-limit header with a readable value.
    pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>, now: SystemTime) -> Option<Self> {
        let mut r = RateLimit::default();
        for (name, value) in headers {
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim();
            if name == "retry-after" {
                if let Some(d) = crate::retry::parse_retry_after(value, now) {
                    r.retry_after_s = Some(d.as_secs_f64());
                }
            } else if let Some(rest) = name.strip_prefix("x-ratelimit-") {
                r.openai(rest, value);
            } else if let Some(rest) = name.strip_prefix("anthropic-ratelimit-") {
                r.anthropic(rest, value, now);
            }
        }
        (r != RateLimit::default()).then_some(r)
    }

    /// `limit-requests`, `remaining-tokens`, `reset-requests`, …
    fn openai(&mut self, rest: &str, value: &str) {
        let Some((field, kind)) = rest.split_once('-') else {
            return;
        };
        let bucket = match kind {
            "requests" => &mut self.requests,
            "tokens" => &mut self.tokens,
            _ => return,
        };
        set(bucket, field, value, |v| parse_go_duration(v).map(|d| d.as_secs_f64()));
    }

    /// `requests-limit`, `input-tokens-remaining`, `tokens-reset`, …
    fn anthropic(&mut self, rest: &str, value: &str, now: SystemTime) {
        let Some((kind, field)) = rest.rsplit_once('-') else {
            return;
        };
        let bucket = match kind {
            "requests" => &mut self.requests,
            "tokens" => &mut self.tokens,
            "input-tokens" => &mut self.input_tokens,
            "output-tokens" => &mut self.output_tokens,
            _ => return,
        };
        set(bucket, field, value, |v| {
            let at = parse_rfc3339(v)?;
            let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
            Some((at - now).max(0.0))
        });
    }
}

fn set(bucket: &mut Bucket, field: &str, value: &str, reset: impl Fn(&str) -> Option<f64>) {
    match field {
        "limit" => bucket.limit = value.parse().ok().or(bucket.limit),
        "remaining" => bucket.remaining = value.parse().ok().or(bucket.remaining),
        "reset" => bucket.reset_s = reset(value).or(bucket.reset_s),
        _ => {}
    }
}

/// A Go duration as OpenAI writes its resets: `1s`, `6m0s`, `20ms`, `1h2m3.5s`, `0.5s`.
pub fn parse_go_duration(value: &str) -> Option<Duration> {
    let mut rest = value.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    (total.is_finite() && total < 1e9).then(|| Duration::from_secs_f64(total))
}

/// Seconds since the Unix epoch of an RFC 3339 time (`2026-12-07T01:00:30Z`,
/// `…T01:00:30.123+02:00`).
fn parse_rfc3339(value: &str) -> Option<f64> {
    let b = value.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| value.get(r)?.parse::<u32>().ok();
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let month = time::Month::try_from(u8::try_from(month).ok()?).ok()?;
    let date = time::Date::from_calendar_date(i32::try_from(year).ok()?, month, u8::try_from(day).ok()?).ok()?;
    let t = time::Time::from_hms(
        u8::try_from(hour).ok()?,
        u8::try_from(minute).ok()?,
        u8::try_from(second.min(59)).ok()?,
    )
    .ok()?;
    let mut rest = &value[19..];
    let mut fraction = 0.0;
    if let Some(after) = rest.strip_prefix('.') {
        let n = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
        fraction = format!("0.{}", &after[..n]).parse().ok()?;
        rest = &after[n..];
    }
    let offset_s: i64 = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let h: i64 = o[1..3].parse().ok()?;
            let m: i64 = o[4..6].parse().ok()?;
            let s = h * 3600 + m * 60;
            if o.starts_with('-') { -s } else { s }
        }
        _ => return None,
    };
    let unix = time::PrimitiveDateTime::new(date, t).assume_utc().unix_timestamp() - offset_s;
    Some(unix as f64 + fraction)
}

/// What a candidate's records say about its provider's rate limits: the run page's summary, so
/// a storm of 429s is explained.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLimitSummary {
    /// Attempts answered 429, of `attempts`.
    pub throttled: usize,
    pub attempts: usize,
    /// The highest limits stated (requests, tokens), per minute as OpenAI and Anthropic state them.
    pub requests_limit: Option<u64>,
    pub tokens_limit: Option<u64>,
    /// The lowest remaining requests / tokens seen, and the send time (µs since the Unix epoch)
    /// of the first record that saw it.
    pub lowest_requests: Option<(u64, i64)>,
    pub lowest_tokens: Option<(u64, i64)>,
    /// The distinct `retry-after` waits asked for, in seconds, ascending.
    pub retry_after_s: Vec<f64>,
}

impl RateLimitSummary {
    /// None when no record has rate-limit data and none was answered 429.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a crate::run::RequestRecord>) -> Option<Self> {
        let mut s = RateLimitSummary::default();
        let mut any = false;
        for r in records {
            s.attempts += 1;
            if r.http_status == Some(429) {
                s.throttled += 1;
                any = true;
            }
            let Some(rl) = r.rate_limit.as_deref() else { continue };
            any = true;
            s.requests_limit = s.requests_limit.max(rl.requests.limit);
            s.tokens_limit = s.tokens_limit.max(rl.tokens.limit.or(rl.input_tokens.limit));
            lowest(&mut s.lowest_requests, rl.requests.remaining, r.sent_at_us);
            lowest(
                &mut s.lowest_tokens,
                rl.tokens.remaining.or(rl.input_tokens.remaining),
                r.sent_at_us,
            );
            if let Some(wait) = rl.retry_after_s
                && !s.retry_after_s.contains(&wait)
            {
                s.retry_after_s.push(wait);
            }
        }
        s.retry_after_s.sort_by(f64::total_cmp);
        any.then_some(s)
    }

    /// One paragraph: "The provider throttled: 3 of 40 attempts answered 429 · limit 60
    /// requests/min · remaining requests hit 0 at 01:02:03 UTC · retry-after asked: 1 s, 20 s".
    pub fn text(&self) -> String {
        let mut parts = Vec::new();
        parts.push(if self.throttled > 0 {
            format!(
                "The provider throttled: {} of {} attempts answered 429 (rate limited)",
                self.throttled, self.attempts
            )
        } else {
            "No attempt was answered 429".to_string()
        });
        if let Some(n) = self.requests_limit {
            parts.push(format!("limit {n} requests/min"));
        }
        if let Some(n) = self.tokens_limit {
            parts.push(format!("limit {n} tokens/min"));
        }
        for (what, lowest) in [("requests", self.lowest_requests), ("tokens", self.lowest_tokens)] {
            if let Some((n, at)) = lowest {
                let verb = if n == 0 { "hit" } else { "went down to" };
                parts.push(format!("remaining {what} {verb} {n} at {} UTC", clock_of(at)));
            }
        }
        if !self.retry_after_s.is_empty() {
            let waits: Vec<String> = self.retry_after_s.iter().map(|w| format!("{w} s")).collect();
            parts.push(format!("retry-after asked: {}", waits.join(", ")));
        }
        if self.requests_limit.is_none() && self.tokens_limit.is_none() && self.lowest_requests.is_none() {
            parts.push("the provider sent no rate-limit headers".to_string());
        }
        parts.join(" · ")
    }
}

fn lowest(slot: &mut Option<(u64, i64)>, remaining: Option<u64>, at: i64) {
    if let Some(n) = remaining
        && slot.is_none_or(|(m, first)| n < m || (n == m && at < first))
    {
        *slot = Some((n, at));
    }
}

/// `HH:MM:SS` of a wall-clock time in µs since the Unix epoch.
fn clock_of(us: i64) -> String {
    let s = us.div_euclid(1_000_000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(unix)
    }

    #[test]
    fn openai_headers_are_read() {
        let h = [
            ("x-ratelimit-limit-requests", "500"),
            ("X-RateLimit-Remaining-Requests", "0"),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "29841"),
            ("x-ratelimit-reset-tokens", "20ms"),
            ("retry-after", "7"),
            ("content-type", "application/json"),
        ];
        let r = RateLimit::from_headers(h, at(1_800_000_000)).unwrap();
        assert_eq!(
            r.requests,
            Bucket {
                limit: Some(500),
                remaining: Some(0),
                reset_s: Some(360.0)
            }
        );
        assert_eq!(r.tokens.limit, Some(30000));
        assert_eq!(r.tokens.remaining, Some(29841));
        assert!((r.tokens.reset_s.unwrap() - 0.02).abs() < 1e-9);
        assert_eq!(r.retry_after_s, Some(7.0));
        assert_eq!(r.input_tokens, Bucket::default());
    }

    #[test]
    fn anthropic_headers_are_read_with_resets_counted_from_arrival() {
        // 2027-01-15T08:00:00Z is 1_800_000_000.
        let h = [
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-requests-reset", "2027-01-15T08:00:02Z"),
            ("anthropic-ratelimit-tokens-limit", "80000"),
            ("anthropic-ratelimit-tokens-remaining", "79000"),
            ("anthropic-ratelimit-tokens-reset", "2027-01-15T09:00:01.5+01:00"),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "39500"),
            ("anthropic-ratelimit-output-tokens-limit", "8000"),
            ("anthropic-ratelimit-output-tokens-remaining", "7500"),
            ("retry-after", "Fri, 15 Jan 2027 08:00:10 GMT"),
        ];
        let r = RateLimit::from_headers(h, at(1_800_000_000)).unwrap();
        assert_eq!(
            r.requests,
            Bucket {
                limit: Some(50),
                remaining: Some(49),
                reset_s: Some(2.0)
            }
        );
        assert_eq!(r.tokens.reset_s, Some(1.5));
        assert_eq!(r.input_tokens.remaining, Some(39500));
        assert_eq!(r.output_tokens.limit, Some(8000));
        assert_eq!(r.retry_after_s, Some(10.0));
    }

    #[test]
    fn malformed_values_are_ignored_and_nothing_known_is_none() {
        let h = [
            ("x-ratelimit-limit-requests", "lots"),
            ("x-ratelimit-remaining-requests", "-1"),
            ("x-ratelimit-reset-requests", "6 minutes"),
            ("x-ratelimit-limit-widgets", "3"),
            ("anthropic-ratelimit-requests-reset", "tomorrow"),
            ("anthropic-ratelimit-requests-limit", ""),
            ("retry-after", "soon"),
            ("authorization", "Bearer sk-secret"),
        ];
        assert_eq!(RateLimit::from_headers(h, at(1_800_000_000)), None);
        let r = RateLimit::from_headers(
            [
                ("x-ratelimit-remaining-tokens", "12"),
                ("x-ratelimit-reset-tokens", "1x"),
            ],
            at(0),
        )
        .unwrap();
        assert_eq!(
            r.tokens,
            Bucket {
                remaining: Some(12),
                ..Bucket::default()
            }
        );
    }

    #[test]
    fn go_durations_and_stored_json() {
        let d = |v| parse_go_duration(v).map(|d| d.as_secs_f64());
        assert_eq!(d("1s"), Some(1.0));
        assert_eq!(d("6m0s"), Some(360.0));
        assert_eq!(d("1h2m3.5s"), Some(3723.5));
        assert_eq!(d("0.5s"), Some(0.5));
        for bad in ["", "s", "5", "1.2.3s", "1d"] {
            assert_eq!(d(bad), None, "{bad}");
        }
        let r = RateLimit {
            requests: Bucket {
                limit: Some(3),
                remaining: Some(0),
                reset_s: None,
            },
            ..Default::default()
        };
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"{"requests":{"limit":3,"remaining":0}}"#);
        assert_eq!(serde_json::from_str::<RateLimit>(&json).unwrap(), r);
    }

    #[test]
    fn only_rate_limit_headers_are_kept() {
        assert!(is_rate_limit_header("X-RateLimit-Limit-Requests") && is_rate_limit_header("retry-after"));
        assert!(is_rate_limit_header("anthropic-ratelimit-tokens-reset"));
        assert!(!is_rate_limit_header("authorization") && !is_rate_limit_header("x-api-key"));
    }

    #[test]
    fn a_candidates_records_are_summarised_so_a_429_storm_is_explained() {
        use crate::run::RequestRecord;
        let rec = |at_s: i64, status: u16, remaining: u64, retry: Option<f64>| RequestRecord {
            sent_at_us: (1_800_000_000 + at_s) * 1_000_000,
            http_status: Some(status),
            rate_limit: Some(Box::new(RateLimit {
                requests: Bucket {
                    limit: Some(3),
                    remaining: Some(remaining),
                    reset_s: Some(60.0),
                },
                retry_after_s: retry,
                ..Default::default()
            })),
            ..RequestRecord::test_quality("a")
        };
        let records = [
            rec(0, 200, 2, None),
            rec(1, 200, 1, None),
            rec(2, 200, 0, None),
            rec(3, 429, 0, Some(58.0)),
            rec(4, 429, 0, Some(1.0)),
            rec(5, 429, 0, Some(1.0)),
        ];
        let s = RateLimitSummary::of(&records).unwrap();
        assert_eq!((s.throttled, s.attempts, s.requests_limit), (3, 6, Some(3)));
        assert_eq!(s.lowest_requests, Some((0, (1_800_000_000 + 2) * 1_000_000)));
        assert_eq!(s.retry_after_s, [1.0, 58.0]);
        assert_eq!(
            s.text(),
            "The provider throttled: 3 of 6 attempts answered 429 (rate limited) · limit 3 requests/min · \
             remaining requests hit 0 at 08:00:02 UTC · retry-after asked: 1 s, 58 s"
        );
        // A 429 without headers still explains itself; records without either say nothing.
        let bare = RequestRecord {
            http_status: Some(429),
            ..RequestRecord::test_quality("a")
        };
        assert!(
            RateLimitSummary::of([&bare])
                .unwrap()
                .text()
                .ends_with("the provider sent no rate-limit headers")
        );
        assert_eq!(RateLimitSummary::of([&RequestRecord::test_quality("a")]), None);
    }
}
