//! Calendar dates as people and models write them: `2024-03-05`, `2024/3/5`, `2024年3月5日`,
//! `05/03/2024` (day or month first, by option), `March 5, 2024`, `5 Mar 2024`, `20240305`.
use std::sync::LazyLock;

use regex::Regex;
use time::{Date, Month};

use super::text::nfkc;

static YEAR_FIRST: LazyLock<Regex> = LazyLock::new(|| {
    // 2024-03-05, 2024/3/5, 2024.03.05, 2024年3月5日 / 5号; a time may follow.
    Regex::new(r"^(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})\s*[日号]?(?:[T\s].*)?$").expect("date pattern")
});
static YEAR_LAST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\d{1,2})\s*([-/.])\s*(\d{1,2})\s*[-/.]\s*(\d{4})(?:[T\s].*)?$").expect("date pattern")
});
static COMPACT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(\d{4})(\d{2})(\d{2})$").expect("date pattern"));
static MONTH_NAME_FIRST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?i)([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?\s*,?\s+(\d{4})$").expect("date pattern")
});
static DAY_FIRST_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?i)(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?([a-z]+)\.?,?\s+(\d{4})$").expect("date pattern")
});

/// Reads a whole string as a date. `day_first` decides `05/03/2024` (5 March when true, May 3
/// when false) unless one of the two numbers is above 12, which settles it.
pub fn parse_date(raw: &str, day_first: bool) -> Option<Date> {
    let s = nfkc(raw);
    let s = s.trim().trim_end_matches(['.', '。']);
    let num = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<i64>().ok());
    if let Some(c) = YEAR_FIRST.captures(s).or_else(|| COMPACT.captures(s)) {
        return ymd(num(c.get(1))?, num(c.get(2))?, num(c.get(3))?);
    }
    if let Some(c) = YEAR_LAST.captures(s) {
        let (a, b, year) = (num(c.get(1))?, num(c.get(3))?, num(c.get(4))?);
        // 05.03.2024 is day-first wherever dots are used that way (Germany, Russia…) only
        // when the option says so; the option is the one source of truth for ambiguity.
        let (day, month) = if a > 12 {
            (a, b)
        } else if b > 12 {
            (b, a)
        } else if day_first {
            (a, b)
        } else {
            (b, a)
        };
        return ymd(year, month, day);
    }
    if let Some(c) = MONTH_NAME_FIRST.captures(s) {
        return ymd(num(c.get(3))?, month_number(c.get(1)?.as_str())?, num(c.get(2))?);
    }
    if let Some(c) = DAY_FIRST_NAME.captures(s) {
        return ymd(num(c.get(3))?, month_number(c.get(2)?.as_str())?, num(c.get(1))?);
    }
    None
}

fn ymd(year: i64, month: i64, day: i64) -> Option<Date> {
    let month = Month::try_from(u8::try_from(month).ok()?).ok()?;
    Date::from_calendar_date(i32::try_from(year).ok()?, month, u8::try_from(day).ok()?).ok()
}

fn month_number(name: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let name = name.to_lowercase();
    if name == "sept" {
        return Some(9);
    }
    MONTHS
        .iter()
        .position(|m| *m == name || (name.len() == 3 && m.starts_with(&name)))
        .map(|i| i as i64 + 1)
}

/// `2024-03-05`.
pub fn iso(date: Date) -> String {
    format!("{:04}-{:02}-{:02}", date.year(), u8::from(date.month()), date.day())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str, day_first: bool) -> Option<String> {
        parse_date(s, day_first).map(iso)
    }

    #[test]
    fn common_formats_agree() {
        for s in [
            "2024-03-05",
            "2024/3/5",
            "2024.03.05",
            "2024年3月5日",
            "2024 年 3 月 5 日",
            "２０２４年３月５日",
            "2024年03月05号",
            "2024-03-05T10:30:00Z",
            "20240305",
            "March 5, 2024",
            "Mar. 5th 2024",
            "5 March 2024",
            "5th of March, 2024",
            "03/05/2024",
        ] {
            assert_eq!(d(s, false).as_deref(), Some("2024-03-05"), "{s}");
        }
        assert_eq!(d("05/03/2024", true).as_deref(), Some("2024-03-05"));
        assert_eq!(d("05/03/2024", false).as_deref(), Some("2024-05-03"));
        // A number above 12 settles the order whatever the option says.
        assert_eq!(d("25/12/2024", false).as_deref(), Some("2024-12-25"));
        assert_eq!(d("12/25/2024", true).as_deref(), Some("2024-12-25"));
    }

    #[test]
    fn impossible_or_other_text_is_not_a_date() {
        for s in [
            "2024-02-30",
            "2023年2月29日",
            "2024-13-01",
            "Smarch 5, 2024",
            "2024",
            "1234.5",
            "next Tuesday",
        ] {
            assert_eq!(d(s, false), None, "{s}");
        }
        assert_eq!(d("2024-02-29", false).as_deref(), Some("2024-02-29"));
    }
}
