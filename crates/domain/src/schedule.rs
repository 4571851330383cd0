//! Schedules: a saved run configuration with a cadence in the team's time zone, a budget and a
//! baseline. This module is the pure part: the cadence (a five-field cron expression, parsed
//! here rather than by a crate so its errors and its wording are ours), what it says in words
//! ("every weekday at 06:00"), when it is next due and which due time a scheduler has missed.
//! Civil time is turned into instants by `jiff` with the IANA database bundled, so a cadence
//! means the same on every machine and across daylight-saving changes.
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::run::RunConfig;
use crate::validation::FieldErrors;

/// A cadence: the minutes, hours, days of the month, months and weekdays it fires on, as cron
/// says them (`MIN HOUR DOM MON DOW`), plus `@hourly`, `@daily`, `@weekly`, `@monthly`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cadence {
    minutes: u64,
    hours: u32,
    /// Bit d for day d (1–31).
    days: u32,
    /// Bit m for month m (1–12).
    months: u16,
    /// Bit w for weekday w, 0 = Sunday … 6 = Saturday.
    weekdays: u8,
    /// Whether the day-of-month and weekday fields were `*`: cron fires on either restricted one.
    any_day: bool,
    any_weekday: bool,
    text: String,
}

const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAY_NAMES: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The longest a scan for the next or a missed due time looks (a cadence such as "Feb 30"
/// never fires; one this rare is refused as never due).
const SCAN_DAYS: i64 = 366 * 5;

impl Cadence {
    /// Parses `MIN HOUR DOM MON DOW` (each `*`, `N`, `A-B`, `*/S`, `A-B/S` or a comma list;
    /// month and weekday names allowed, 7 = Sunday) or a shorthand. Err says which field and why.
    pub fn parse(text: &str) -> Result<Cadence, String> {
        let trimmed = text.trim();
        let expanded = match trimmed {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "needs five fields, minute hour day-of-month month weekday (e.g. \"0 6 * * 1-5\"), \
                 or @hourly/@daily/@weekly/@monthly; found {}",
                fields.len()
            ));
        }
        let minutes = field(fields[0], "minute", 0, 59, &[])?;
        let hours = field(fields[1], "hour", 0, 23, &[])?;
        let days = field(fields[2], "day of month", 1, 31, &[])?;
        let months = field(fields[3], "month", 1, 12, &MONTHS)?;
        let mut weekdays = field(fields[4], "weekday", 0, 7, &WEEKDAYS)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        Ok(Cadence {
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            any_day: fields[2] == "*",
            any_weekday: fields[4] == "*",
            text: trimmed.to_string(),
        })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn day_matches(&self, at: DateTime) -> bool {
        if self.months & (1 << at.month()) == 0 {
            return false;
        }
        let day = self.days & (1 << at.day()) != 0;
        let weekday = self.weekdays & (1 << at.weekday().to_sunday_zero_offset()) != 0;
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (true, false) => weekday,
            (false, true) => day,
            // cron: when both are restricted, either one fires
            (false, false) => day || weekday,
        }
    }

    fn matches(&self, at: DateTime) -> bool {
        self.day_matches(at) && self.hours & (1 << at.hour()) != 0 && self.minutes & (1 << at.minute()) != 0
    }

    /// The first due time strictly after `after`, in `zone`; None when none within five years.
    pub fn next_after(&self, zone: &TimeZone, after: Timestamp) -> Option<Timestamp> {
        let start = civil_minute(zone, after)?;
        let mut at = start.checked_add(jiff::Span::new().minutes(1)).ok()?;
        let end = start.checked_add(jiff::Span::new().days(SCAN_DAYS)).ok()?;
        while at < end {
            if !self.day_matches(at) {
                at = at.date().tomorrow().ok()?.to_datetime(jiff::civil::Time::midnight());
                continue;
            }
            if self.hours & (1 << at.hour()) == 0 {
                at = next_hour(at)?;
                continue;
            }
            if self.matches(at) {
                let due = instant(zone, at)?;
                // A civil time in a DST gap maps to later than it says; never earlier than asked.
                if due.0 > after.0 {
                    return Some(due);
                }
            }
            at = at.checked_add(jiff::Span::new().minutes(1)).ok()?;
        }
        None
    }

    /// The latest due time in (`since`, `now`], in `zone`: what a scheduler owes. None when the
    /// cadence was not due in between.
    pub fn latest_due(&self, zone: &TimeZone, since: Timestamp, now: Timestamp) -> Option<Timestamp> {
        let floor = civil_minute(zone, since)?;
        let mut at = civil_minute(zone, now)?;
        while at > floor {
            if !self.day_matches(at) {
                at = at
                    .date()
                    .to_datetime(jiff::civil::Time::midnight())
                    .checked_sub(jiff::Span::new().minutes(1))
                    .ok()?;
                continue;
            }
            if self.hours & (1 << at.hour()) == 0 {
                at = at
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_sub(jiff::Span::new().minutes(1))
                    .ok()?;
                continue;
            }
            if self.matches(at) {
                let due = instant(zone, at)?;
                if due.0 > since.0 && due.0 <= now.0 {
                    return Some(due);
                }
            }
            at = at.checked_sub(jiff::Span::new().minutes(1)).ok()?;
        }
        None
    }

    /// The cadence in words: "every weekday at 06:00", "every hour at :15", "every 15 minutes".
    pub fn words(&self) -> String {
        let minutes = bits(self.minutes, 0, 59);
        let hours = bits(u64::from(self.hours), 0, 23);
        let time = match (minutes.as_slice(), hours.len()) {
            ([m], 24) => format!("every hour at :{m:02}"),
            (_, 24) if minutes.len() == 60 => "every minute".to_string(),
            (_, 24) => match step_of(&minutes, 60) {
                Some(step) => format!("every {step} minutes"),
                None => format!(
                    "every hour at {}",
                    list(&minutes.iter().map(|m| format!(":{m:02}")).collect::<Vec<_>>())
                ),
            },
            _ if minutes.len() * hours.len() <= 4 => {
                let mut times = Vec::new();
                for h in &hours {
                    for m in &minutes {
                        times.push(format!("{h:02}:{m:02}"));
                    }
                }
                format!("at {}", list(&times))
            }
            _ => format!(
                "at minutes {} past hours {}",
                list(&minutes.iter().map(u32::to_string).collect::<Vec<_>>()),
                list(&hours.iter().map(u32::to_string).collect::<Vec<_>>())
            ),
        };
        let weekdays = bits(u64::from(self.weekdays), 0, 6);
        let days = bits(u64::from(self.days), 1, 31);
        let months = bits(u64::from(self.months), 1, 12);
        let weekday_part = match weekdays.as_slice() {
            [1, 2, 3, 4, 5] => "weekday".to_string(),
            [0, 6] => "Saturday and Sunday".to_string(),
            w => list(
                &w.iter()
                    .map(|d| WEEKDAY_NAMES[*d as usize].to_string())
                    .collect::<Vec<_>>(),
            ),
        };
        let day_part = match (self.any_day, self.any_weekday) {
            (true, true) => None,
            (true, false) => Some(format!("every {weekday_part}")),
            (false, true) => Some(format!(
                "on day {} of the month",
                list(&days.iter().map(u32::to_string).collect::<Vec<_>>())
            )),
            (false, false) => Some(format!(
                "on day {} of the month or every {weekday_part}",
                list(&days.iter().map(u32::to_string).collect::<Vec<_>>())
            )),
        };
        let month_part = (months.len() < 12).then(|| {
            format!(
                "in {}",
                list(
                    &months
                        .iter()
                        .map(|m| MONTH_NAMES[*m as usize - 1].to_string())
                        .collect::<Vec<_>>()
                )
            )
        });
        let every_hourish = time.starts_with("every");
        let mut out = match (day_part, every_hourish) {
            (None, true) => time,
            (None, false) => format!("every day {time}"),
            (Some(d), true) => format!("{time}, {d}"),
            (Some(d), false) => format!("{d} {time}"),
        };
        if let Some(m) = month_part {
            out.push(' ');
            out.push_str(&m);
        }
        out
    }
}

/// One cron field as a bit set over `low..=high`.
fn field(text: &str, what: &str, low: u32, high: u32, names: &[&str]) -> Result<u64, String> {
    let value = |s: &str| -> Result<u32, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(i as u32 + if low == 1 { 1 } else { 0 });
        }
        let n: u32 = s.parse().map_err(|_| {
            format!(
                "{what} {s:?} is not a number{}",
                if names.is_empty() { "" } else { " or a name" }
            )
        })?;
        if n < low || n > high {
            return Err(format!("{what} {n} is outside {low}–{high}"));
        }
        Ok(n)
    };
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| format!("{what} step {s:?} is not a number"))?;
                if step == 0 {
                    return Err(format!("{what} step must be at least 1"));
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (from, to) = match range {
            "*" => (low, high),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if step > 1 => (value(r)?, high),
                None => {
                    let n = value(r)?;
                    (n, n)
                }
            },
        };
        if from > to {
            return Err(format!("{what} range {range:?} runs backwards"));
        }
        let mut n = from;
        while n <= to {
            set |= 1 << n;
            n += step;
        }
    }
    if set == 0 {
        return Err(format!("{what} field is empty"));
    }
    Ok(set)
}

fn bits(set: u64, low: u32, high: u32) -> Vec<u32> {
    (low..=high).filter(|n| set & (1 << n) != 0).collect()
}

/// The step of an evenly spaced list starting at 0 that wraps evenly (0, 15, 30, 45 → 15).
fn step_of(values: &[u32], modulus: u32) -> Option<u32> {
    let step = *values.get(1)? - values[0];
    let even = values[0] == 0 && modulus.is_multiple_of(step) && values.windows(2).all(|w| w[1] - w[0] == step);
    (even && values.len() as u32 == modulus / step).then_some(step)
}

/// "a", "a and b", "a, b and c".
fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn civil_minute(zone: &TimeZone, at: Timestamp) -> Option<DateTime> {
    let ts = jiff::Timestamp::from_millisecond(at.0).ok()?;
    let civil = ts.to_zoned_datetime(zone.clone()).datetime();
    civil.with().second(0).subsec_nanosecond(0).build().ok()
}

fn next_hour(at: DateTime) -> Option<DateTime> {
    at.with()
        .minute(0)
        .build()
        .ok()?
        .checked_add(jiff::Span::new().hours(1))
        .ok()
}

/// The instant of a civil time in `zone` (in a DST gap, the time after it; in a fold, the first).
fn instant(zone: &TimeZone, at: DateTime) -> Option<Timestamp> {
    let zoned = zone.to_ambiguous_zoned_datetime(at).compatible().ok()?;
    Some(Timestamp(zoned.timestamp().as_millisecond()))
}

/// A time zone by IANA name ("Europe/Berlin", "UTC"). Err says what to write instead.
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err("give an IANA time zone such as Europe/Berlin or UTC".into());
    }
    jiff::tz::db()
        .get(name)
        .map_err(|_| format!("{name:?} is not a known IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)"))
}

/// `2026-12-07 06:00 Europe/Berlin`: an instant as the schedule's zone reads it.
pub fn local_time(zone_name: &str, at: Timestamp) -> String {
    let Ok(zone) = time_zone(zone_name) else {
        return at.to_string();
    };
    match jiff::Timestamp::from_millisecond(at.0) {
        Ok(ts) => format!("{} {zone_name}", ts.to_zoned_datetime(zone).strftime("%Y-%m-%d %H:%M")),
        Err(_) => at.to_string(),
    }
}

/// What a scheduled run is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "run")]
pub enum Baseline {
    /// The last run of this schedule whose verdict was GO for every candidate.
    LastPassed,
    /// One named run.
    Run(i64),
}

impl Baseline {
    /// `last-passed` or `run:42`.
    pub fn as_text(&self) -> String {
        match self {
            Baseline::LastPassed => "last-passed".into(),
            Baseline::Run(id) => format!("run:{id}"),
        }
    }

    pub fn parse(text: &str) -> Option<Baseline> {
        match text.trim() {
            "" | "last-passed" => Some(Baseline::LastPassed),
            other => other
                .strip_prefix("run:")
                .unwrap_or(other)
                .trim_start_matches('#')
                .parse()
                .ok()
                .map(Baseline::Run),
        }
    }

    pub fn words(&self) -> String {
        match self {
            Baseline::LastPassed => "the last run that passed".into(),
            Baseline::Run(id) => format!("run #{id}"),
        }
    }
}

/// A schedule as saved: everything a run needs, checked, plus when and under what limits.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSpec {
    pub name: String,
    pub evalset_id: i64,
    /// A pinned eval-set version; None: the eval set's latest version at each firing.
    pub evalset_version_id: Option<i64>,
    pub candidate_ids: Vec<i64>,
    pub config: RunConfig,
    /// The threshold profile that judges its runs; None: the team's default.
    pub profile_id: Option<i64>,
    /// The cron expression (checked by [`Cadence::parse`]).
    pub cadence: String,
    /// IANA name (checked by [`time_zone`]).
    pub time_zone: String,
    /// The user who answers for it.
    pub owner: String,
    /// Most requests one firing may plan (the run's estimate); None: no limit.
    pub max_requests: Option<u64>,
    /// Most estimated cost of one firing, USD; None: no limit.
    pub max_cost_usd: Option<f64>,
    pub baseline: Baseline,
    pub paused: bool,
}

impl ScheduleSpec {
    /// The parsed cadence and zone (both checked when the spec was saved).
    pub fn timing(&self) -> Result<(Cadence, TimeZone), String> {
        Ok((Cadence::parse(&self.cadence)?, time_zone(&self.time_zone)?))
    }

    /// "every weekday at 06:00 (Europe/Berlin)".
    pub fn cadence_words(&self) -> String {
        match Cadence::parse(&self.cadence) {
            Ok(c) => format!("{} ({})", c.words(), self.time_zone),
            Err(e) => format!("unreadable cadence {:?}: {e}", self.cadence),
        }
    }

    /// The checks a spec's own fields need (run configuration, eval set and candidates are the
    /// app's, against the store); every error named by its form field.
    pub fn check(&self, errors: &mut FieldErrors) {
        crate::validation::name(errors, "name", &self.name);
        if let Err(e) = Cadence::parse(&self.cadence) {
            errors.add("cadence", e);
        } else if let Ok(zone) = time_zone(&self.time_zone)
            && Cadence::parse(&self.cadence)
                .ok()
                .and_then(|c| c.next_after(&zone, Timestamp(0)))
                .is_none()
        {
            errors.add("cadence", "is never due (no such date)");
        }
        if let Err(e) = time_zone(&self.time_zone) {
            errors.add("time_zone", e);
        }
        if self.owner.trim().is_empty() {
            errors.add("owner", "name the user who answers for this schedule");
        }
        if self.max_requests == Some(0) {
            errors.add("max_requests", "must be at least 1, or empty for no limit");
        }
        if let Some(c) = self.max_cost_usd
            && !(c.is_finite() && c > 0.0)
        {
            errors.add(
                "max_cost_usd",
                "must be a positive amount in USD, or empty for no limit",
            );
        }
        if self.candidate_ids.is_empty() {
            errors.add("candidates", "choose at least one candidate");
        }
    }
}

/// A saved schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub id: i64,
    pub spec: ScheduleSpec,
    /// When the cadence started counting: creation, or the last change to its timing or the
    /// end of a pause (due times before it are not owed).
    pub counting_since: Timestamp,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// What a scheduler does with a schedule now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing owed.
    No,
    /// Due at this instant (within the grace of a tick).
    OnTime(Timestamp),
    /// Due at this instant, which passed while no scheduler was running: fire once, say so.
    Missed(Timestamp),
}

/// How late a firing may be and still count as on time: a scheduler ticks every few seconds.
pub const ON_TIME_GRACE_MS: i64 = 90_000;

impl Schedule {
    /// What is owed at `now`, given the latest due time already claimed (if any). A schedule
    /// fires for the latest due time only: several missed while down become one run.
    pub fn due(&self, now: Timestamp, last_claimed: Option<Timestamp>) -> Result<Due, String> {
        if self.spec.paused {
            return Ok(Due::No);
        }
        let (cadence, zone) = self.spec.timing()?;
        let since = Timestamp(last_claimed.map_or(self.counting_since.0, |c| c.0.max(self.counting_since.0)));
        Ok(match cadence.latest_due(&zone, since, now) {
            None => Due::No,
            Some(due) if now.0 - due.0 <= ON_TIME_GRACE_MS => Due::OnTime(due),
            Some(due) => Due::Missed(due),
        })
    }

    /// The next due time after `now` (None while paused).
    pub fn next_due(&self, now: Timestamp) -> Option<Timestamp> {
        if self.spec.paused {
            return None;
        }
        let (cadence, zone) = self.spec.timing().ok()?;
        cadence.next_after(&zone, now)
    }
}

/// One claimed due time of a schedule: the run it created, or why none was.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    pub schedule_id: i64,
    pub due_at: Timestamp,
    pub fired_at: Timestamp,
    pub run_id: Option<i64>,
    /// The due time passed while no scheduler ran; the run was started late, once.
    pub missed: bool,
    /// What happened, in words (e.g. "skipped: estimate 1,200 requests exceeds the budget of 500").
    pub note: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(zone: &str, civil: &str) -> Timestamp {
        let dt: DateTime = civil.parse().unwrap();
        let zoned = dt.to_zoned_datetime(time_zone(zone).unwrap()).unwrap();
        Timestamp(zoned.timestamp().as_millisecond())
    }

    #[test]
    fn words_say_the_common_cadences_plainly() {
        let words = |s: &str| Cadence::parse(s).unwrap().words();
        assert_eq!(words("0 6 * * 1-5"), "every weekday at 06:00");
        assert_eq!(words("0 6 * * mon-fri"), "every weekday at 06:00");
        assert_eq!(words("30 7 * * *"), "every day at 07:30");
        assert_eq!(words("@daily"), "every day at 00:00");
        assert_eq!(words("0 9 * * 1"), "every Monday at 09:00");
        assert_eq!(words("0 9 * * 1,3,5"), "every Monday, Wednesday and Friday at 09:00");
        assert_eq!(words("15 * * * *"), "every hour at :15");
        assert_eq!(words("*/15 * * * *"), "every 15 minutes");
        assert_eq!(words("0 6,18 * * *"), "every day at 06:00 and 18:00");
        assert_eq!(words("0 3 1 * *"), "on day 1 of the month at 03:00");
        assert_eq!(words("0 0 * * 0,6"), "every Saturday and Sunday at 00:00");
        assert_eq!(words("0 0 * * 7"), "every Sunday at 00:00");
        assert_eq!(words("0 4 * jan *"), "every day at 04:00 in January");
    }

    #[test]
    fn bad_cadences_name_the_field() {
        for (text, says) in [
            ("0 6 * *", "five fields"),
            ("60 6 * * *", "minute 60 is outside 0–59"),
            ("0 25 * * *", "hour 25"),
            ("0 6 * * funday", "weekday \"funday\""),
            ("0 6 5-1 * *", "runs backwards"),
            ("*/0 * * * *", "step must be at least 1"),
        ] {
            let e = Cadence::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn next_and_latest_due_follow_the_zone_and_skip_weekends() {
        let weekdays = Cadence::parse("0 6 * * 1-5").unwrap();
        let berlin = time_zone("Europe/Berlin").unwrap();
        // Friday 2026-12-04 07:00 Berlin: next is Monday 06:00 Berlin.
        let friday = at("Europe/Berlin", "2026-12-04T07:00");
        assert_eq!(
            weekdays.next_after(&berlin, friday),
            Some(at("Europe/Berlin", "2026-12-07T06:00"))
        );
        // Down from Friday 05:00 to Monday 10:00: the latest owed is Monday 06:00.
        let latest = weekdays.latest_due(
            &berlin,
            at("Europe/Berlin", "2026-12-04T05:00"),
            at("Europe/Berlin", "2026-12-07T10:00"),
        );
        assert_eq!(latest, Some(at("Europe/Berlin", "2026-12-07T06:00")));
        // Nothing owed between Saturday and Sunday.
        assert_eq!(
            weekdays.latest_due(
                &berlin,
                at("Europe/Berlin", "2026-12-05T00:00"),
                at("Europe/Berlin", "2026-12-06T23:59")
            ),
            None
        );
        // 06:00 in Berlin is 05:00 UTC in winter, 04:00 UTC in summer.
        let winter = weekdays.next_after(&berlin, at("UTC", "2026-12-07T00:00")).unwrap();
        assert_eq!(winter, at("UTC", "2026-12-07T05:00"));
        let summer = weekdays.next_after(&berlin, at("UTC", "2026-07-06T00:00")).unwrap();
        assert_eq!(summer, at("UTC", "2026-07-06T04:00"));
    }

    #[test]
    fn a_due_time_in_a_dst_gap_fires_once_after_it() {
        // 02:30 does not exist in Berlin on 2026-03-29: it fires at 03:30 (01:30 UTC), once.
        let c = Cadence::parse("30 2 * * *").unwrap();
        let berlin = time_zone("Europe/Berlin").unwrap();
        let next = c.next_after(&berlin, at("UTC", "2026-03-28T12:00")).unwrap();
        assert_eq!(next, at("UTC", "2026-03-29T01:30"));
        let after = c.next_after(&berlin, next).unwrap();
        assert_eq!(after, at("Europe/Berlin", "2026-03-30T02:30"));
    }

    #[test]
    fn due_says_missed_once_and_nothing_after_the_claim() {
        let schedule = Schedule {
            id: 1,
            spec: ScheduleSpec {
                name: "nightly".into(),
                evalset_id: 1,
                evalset_version_id: None,
                candidate_ids: vec![1],
                config: RunConfig::default(),
                profile_id: None,
                cadence: "0 6 * * *".into(),
                time_zone: "UTC".into(),
                owner: "ada".into(),
                max_requests: None,
                max_cost_usd: None,
                baseline: Baseline::LastPassed,
                paused: false,
            },
            counting_since: at("UTC", "2026-12-01T00:00"),
            created_at: at("UTC", "2026-12-01T00:00"),
            updated_at: at("UTC", "2026-12-01T00:00"),
        };
        let due_day3 = at("UTC", "2026-12-03T06:00");
        // Down for three days: one firing owed, for the latest due time, flagged missed.
        let now = at("UTC", "2026-12-03T09:00");
        assert_eq!(schedule.due(now, None), Ok(Due::Missed(due_day3)));
        assert_eq!(schedule.due(now, Some(due_day3)), Ok(Due::No));
        // On time within the grace.
        let just = Timestamp(due_day3.0 + 30_000);
        assert_eq!(schedule.due(just, None), Ok(Due::OnTime(due_day3)));
        let paused = Schedule {
            spec: ScheduleSpec {
                paused: true,
                ..schedule.spec.clone()
            },
            ..schedule
        };
        assert_eq!(paused.due(now, None), Ok(Due::No));
    }

    #[test]
    fn baselines_read_back_what_they_write() {
        for b in [Baseline::LastPassed, Baseline::Run(42)] {
            assert_eq!(Baseline::parse(&b.as_text()), Some(b));
        }
        assert_eq!(Baseline::parse("#7"), Some(Baseline::Run(7)));
        assert_eq!(Baseline::parse("yesterday"), None);
    }
}
