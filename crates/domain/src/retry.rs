//! When a failed attempt is tried again: the server's `Retry-After` when it sends one
//! (delta-seconds or an HTTP-date, RFC 9110 §10.2.3), capped at [`MAX_RETRY_AFTER`]; else
//! exponential backoff with jitter. Pure: the caller supplies the clock and the random draw.
use std::time::{Duration, SystemTime};

/// Longest wait bakeoff honours from `Retry-After`: a server asking for more gets a retry after
/// this long (and most likely another refusal, which the record shows) rather than stalling
/// its run's worker for as long as it asks.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// The first backoff without `Retry-After`; each further retry of a request doubles it…
pub const BASE_BACKOFF: Duration = Duration::from_millis(200);
/// …up to this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The wait a `Retry-After` header value asks for, counted from `now` (when the response
/// arrived): delta-seconds (`"120"`) or an HTTP-date in any of the three formats RFC 9110
/// accepts. A date in the past asks for no wait. None when the value is neither (ignored, as
/// the RFC says a recipient may).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long digit strings are still "a very long time".
        return Some(Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// How long to wait before retry number `retry` (0 for the first retry of a request).
/// `retry_after` is what the failed attempt's response asked for, if anything: honoured up to
/// [`MAX_RETRY_AFTER`]. Otherwise exponential backoff, `BASE_BACKOFF × 2^retry` capped at
/// `MAX_BACKOFF`, with "equal jitter": half of it fixed, the other half scaled by `jitter`
/// (a uniform draw in [0, 1)), so requests failed together do not come back together.
pub fn retry_delay(retry: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
    if let Some(asked) = retry_after {
        return asked.min(MAX_RETRY_AFTER);
    }
    let full = BASE_BACKOFF.saturating_mul(1u32 << retry.min(16)).min(MAX_BACKOFF);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    full / 2 + (full / 2).mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix_s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(unix_s)
    }

    #[test]
    fn delta_seconds_are_read_as_a_wait() {
        let now = at(1_000);
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn http_dates_in_every_accepted_format_are_a_wait_from_now() {
        // 1994-11-06 08:49:37 UTC is 784111777.
        let now = at(784_111_777 - 90);
        for value in [
            "Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
            "Sunday, 06-Nov-94 08:49:37 GMT", // RFC 850
            "Sun Nov  6 08:49:37 1994",       // asctime
        ] {
            assert_eq!(parse_retry_after(value, now), Some(Duration::from_secs(90)), "{value}");
        }
        // A date already past asks for no wait.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", at(784_111_777 + 5)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn anything_else_is_ignored() {
        for bad in ["", "soon", "-1", "1.5", "1 s", "Sun, 32 Nov 1994 08:49:37 GMT"] {
            assert_eq!(parse_retry_after(bad, at(0)), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let asked = |s| retry_delay(3, Some(Duration::from_secs(s)), 0.9);
        assert_eq!(
            asked(1),
            Duration::from_secs(1),
            "jitter and the retry number do not change it"
        );
        assert_eq!(asked(0), Duration::ZERO);
        assert_eq!(asked(3600), MAX_RETRY_AFTER);
    }

    #[test]
    fn backoff_doubles_with_jitter_within_its_bounds() {
        assert_eq!(retry_delay(0, None, 0.0), Duration::from_millis(100));
        assert_eq!(retry_delay(0, None, 0.999_999).as_millis(), 199);
        assert_eq!(retry_delay(1, None, 0.0), Duration::from_millis(200));
        assert_eq!(retry_delay(2, None, 0.5), Duration::from_millis(600));
        for retry in [5, 10, 40] {
            let low = retry_delay(retry, None, 0.0);
            let high = retry_delay(retry, None, 1.0);
            assert_eq!((low, high), (MAX_BACKOFF / 2, MAX_BACKOFF), "retry {retry}");
        }
        assert_eq!(retry_delay(1, None, f64::NAN), Duration::from_millis(200));
    }
}
