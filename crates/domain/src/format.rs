//! Numbers as pages, exports and messages show them, one function per kind of number, so a
//! figure reads the same on every page. Pure: no units of measure beyond the ones named here
//! (threshold units add theirs in `thresholds::units`).

/// Shown for a number that is not finite (never "NaN", never blank).
const NOT_FINITE: &str = "—";

/// Three significant digits, like the run tables: `1235`, `12.3`, `1.23`, `0.123`; "—" when
/// not finite.
pub fn significant(v: f64) -> String {
    if !v.is_finite() {
        return NOT_FINITE.to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// [`significant`] without trailing zeros: `20` (not `20.0`), `1.5`, `41.2`.
pub fn significant_trimmed(v: f64) -> String {
    trim_trailing_zeros(significant(v))
}

/// A figure in a data export (CSV): six significant digits, no trailing zeros — exact enough for
/// any figure bakeoff measures, without the float noise of `18.049451689847288`.
pub fn data(v: f64) -> String {
    if !v.is_finite() {
        return NOT_FINITE.to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (5 - magnitude).clamp(0, 15) as usize;
    at_most_decimals(v, decimals)
}

/// At most `decimals` decimals, without trailing zeros: `95`, `91.2`, `1.5`.
pub fn at_most_decimals(v: f64, decimals: usize) -> String {
    trim_trailing_zeros(format!("{v:.decimals$}"))
}

/// `20.0` → `20`, `1.50` → `1.5`; integers unchanged.
fn trim_trailing_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The shortest faithful form of a value read from data: `1234.5`, `42`, `0.001`.
pub fn shortest(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Digits grouped by thousands: `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A fraction as a percentage with `decimals` decimals: `95.0 %` (0.95, 1).
pub fn percent(fraction: f64, decimals: usize) -> String {
    format!("{:.decimals$} %", fraction * 100.0)
}

/// A change as a signed percentage: `+3.5 %`, `-12.0 %` (0.035, 1).
pub fn signed_percent(fraction: f64, decimals: usize) -> String {
    format!("{:+.decimals$} %", fraction * 100.0)
}

/// Dollars with enough digits for tiny per-request amounts: `$12.30`, `$0.0042`; "—" when not
/// finite.
pub fn usd(v: f64) -> String {
    if !v.is_finite() {
        NOT_FINITE.into()
    } else if v.abs() >= 1.0 || v == 0.0 {
        format!("${v:.2}")
    } else {
        // Three significant digits below a dollar.
        let digits = (-(v.abs().log10().floor()) as usize + 2).min(10);
        format!("${v:.digits$}")
    }
}

/// A speed-up factor: `1.4×`, `0.83×`, `12×`; "—" when not finite.
pub fn factor(f: f64) -> String {
    if !f.is_finite() {
        NOT_FINITE.into()
    } else if f >= 10.0 {
        format!("{f:.0}×")
    } else if f >= 0.995 {
        format!("{:.1}×", (f * 10.0).round() / 10.0)
    } else {
        format!("{f:.2}×")
    }
}

/// A duration to expect, rounded up: `45 s`, `12 min`, `3.5 h`; "—" when not finite.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return NOT_FINITE.to_string();
    }
    if seconds < 90.0 {
        format!("{:.0} s", seconds.max(0.0).ceil())
    } else if seconds < 90.0 * 60.0 {
        format!("{:.0} min", (seconds / 60.0).ceil())
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// How long ago something happened, `ms` milliseconds before now, rounded down: `3 s ago`,
/// `4 min ago`, `2 h ago`, `5 d ago`; a time ahead of now (clocks disagree) is `just now`.
pub fn ago(ms: i64) -> String {
    let s = ms / 1000;
    if ms < 0 {
        "just now".to_string()
    } else if s < 120 {
        format!("{s} s ago")
    } else if s < 120 * 60 {
        format!("{} min ago", s / 60)
    } else if s < 48 * 3600 {
        format!("{} h ago", s / 3600)
    } else {
        format!("{} d ago", s / 86_400)
    }
}

/// A size limit: `1 MiB`, `1.5 MiB`, `512 KiB`, `300 B`.
pub fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= MIB {
        format!("{:.1} MiB", n as f64 / MIB as f64)
    } else if n >= KIB {
        format!("{:.0} KiB", n as f64 / KIB as f64)
    } else {
        format!("{n} B")
    }
}

/// Text from a server or a model as pages show it: every control character but line breaks
/// and tabs becomes its visible Control Pictures symbol (U+0000 → ␀, U+001B → ␛, DEL → ␡), so
/// nothing a server sends is invisible or swallowed by the browser (HTML escaping is askama's).
pub fn visible_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| c.is_ascii_control() && !matches!(c, '\n' | '\t' | '\r');
    if !text.contains(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| match c {
            '\u{7f}' => '\u{2421}',
            c if hidden(c) => char::from_u32(0x2400 + c as u32).unwrap_or(char::REPLACEMENT_CHARACTER),
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ago_rounds_down_to_the_largest_sensible_unit() {
        assert_eq!(ago(3_400), "3 s ago");
        assert_eq!(ago(119_999), "119 s ago");
        assert_eq!(ago(125_000), "2 min ago");
        assert_eq!(ago(3 * 3_600_000), "3 h ago");
        assert_eq!(ago(5 * 86_400_000), "5 d ago");
        assert_eq!(ago(-500), "just now");
    }

    #[test]
    fn significant_keeps_three_digits_and_dashes_what_is_not_finite() {
        assert_eq!(significant(1234.56), "1235");
        assert_eq!(significant(12.345), "12.3");
        assert_eq!(significant(1.5), "1.50");
        assert_eq!(significant(0.1234), "0.123");
        assert_eq!(significant(0.0), "0");
        assert_eq!(significant(-41.23), "-41.2");
        assert_eq!(significant(f64::NAN), "—");
        assert_eq!(significant_trimmed(20.0), "20");
        assert_eq!(significant_trimmed(1.5), "1.5");
        assert_eq!(significant_trimmed(1000.0), "1000");
    }

    #[test]
    fn data_keeps_six_significant_digits() {
        assert_eq!(data(18.049451689847288), "18.0495");
        assert_eq!(data(1602.3412), "1602.34");
        assert_eq!(data(240_123.7), "240124");
        assert_eq!(data(0.000103449), "0.000103449");
        assert_eq!(data(0.95), "0.95");
        assert_eq!(data(-3.5), "-3.5");
        assert_eq!(data(0.0), "0");
        assert_eq!(data(f64::INFINITY), "—");
    }

    #[test]
    fn decimals_are_trimmed() {
        assert_eq!(at_most_decimals(95.0, 1), "95");
        assert_eq!(at_most_decimals(91.24, 1), "91.2");
        assert_eq!(at_most_decimals(1.5, 2), "1.5");
        assert_eq!(at_most_decimals(1000.0, 6), "1000");
        assert_eq!(shortest(42.0), "42");
        assert_eq!(shortest(1234.5), "1234.5");
        assert_eq!(shortest(0.001), "0.001");
    }

    #[test]
    fn counts_and_shares() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(percent(0.95, 1), "95.0 %");
        assert_eq!(percent(0.954, 0), "95 %");
        assert_eq!(signed_percent(0.035, 1), "+3.5 %");
        assert_eq!(signed_percent(-0.12, 1), "-12.0 %");
    }

    #[test]
    fn money_factors_durations_and_sizes() {
        assert_eq!(usd(12.3), "$12.30");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(0.004213), "$0.00421");
        assert_eq!(usd(f64::INFINITY), "—");
        assert_eq!(factor(1.43), "1.4×");
        assert_eq!(factor(0.834), "0.83×");
        assert_eq!(factor(12.4), "12×");
        assert_eq!(duration(12.2), "13 s");
        assert_eq!(duration(600.0), "10 min");
        assert_eq!(duration(7200.0), "2.0 h");
        assert_eq!(bytes(1024 * 1024), "1 MiB");
        assert_eq!(bytes(1536 * 1024), "1.5 MiB");
        assert_eq!(bytes(512 * 1024), "512 KiB");
        assert_eq!(bytes(300), "300 B");
    }

    #[test]
    fn control_characters_are_shown_as_pictures_and_line_breaks_kept() {
        assert_eq!(
            super::visible_controls("a\0b\u{1b}[31m\u{7f}"),
            "a\u{2400}b\u{241b}[31m\u{2421}"
        );
        assert_eq!(super::visible_controls("line\n\tnext\r\n"), "line\n\tnext\r\n");
        let all: String = (0u8..0x20).map(char::from).collect();
        assert_eq!(
            super::visible_controls(&all)
                .chars()
                .filter(|c| c.is_control())
                .collect::<String>(),
            "\t\n\r"
        );
    }
}
