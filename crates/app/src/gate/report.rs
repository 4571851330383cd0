//! The files CI reads from a [`GateReport`]: JSON (the report itself), JUnit XML and Markdown
//! for a pull-request comment. Names, reasons and other text from users or models are data:
//! escaped for XML, neutralised for Markdown (`domain::neutralize`).
//!
//! JUnit: one `<testsuite>` per candidate, one `<testcase>` per rule (plus one for the
//! baseline comparison). A failing rule is a `<failure>` whose message is the reason; an
//! inconclusive rule is also a `<failure>` (type `inconclusive`, message starting
//! "inconclusive:"), because the gate does not pass on it; a rule not measured is `<skipped>`.
//! A run that did not finish is one `<error>` per candidate.
use std::fmt::Write;

use super::{GateReport, RuleResult};
use crate::domain::neutralize::markdown_text;
use crate::domain::scorecard::Verdict;

/// The report as pretty JSON.
pub fn json(report: &GateReport) -> String {
    let mut text = serde_json::to_string_pretty(report).expect("a gate report serialises");
    text.push('\n');
    text
}

/// Text safe in an XML attribute or element: markup escaped, characters XML 1.0 forbids dropped.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
    out
}

/// What a rule's testcase holds inside, and whether it counts as failure / skipped.
fn rule_body(r: &RuleResult) -> (String, bool, bool) {
    let detail = [
        r.measured.as_ref().map(|m| format!("measured {m}")),
        r.interval.as_ref().map(|i| format!("90 % interval {i}")),
        Some(r.conditions.clone()),
        r.settle.clone(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join("; ");
    match r.state.as_str() {
        "fail" => (
            format!(
                "<failure type=\"fail\" message=\"{}\">{}</failure>",
                xml(&r.reason),
                xml(&detail)
            ),
            true,
            false,
        ),
        "inconclusive" => (
            format!(
                "<failure type=\"inconclusive\" message=\"inconclusive: {}\">{}</failure>",
                xml(&r.reason),
                xml(&detail)
            ),
            true,
            false,
        ),
        "not_measured" => (format!("<skipped message=\"{}\"/>", xml(&r.reason)), false, true),
        _ => (
            format!("<system-out>{}</system-out>", xml(&format!("{}; {detail}", r.reason))),
            false,
            false,
        ),
    }
}

/// The report as JUnit XML (the shape GitHub, GitLab and Jenkins read).
pub fn junit(report: &GateReport) -> String {
    let mut suites = String::new();
    let (mut total, mut failures, mut skipped, mut errors) = (0, 0, 0, 0);
    for c in &report.candidates {
        let mut cases = String::new();
        let (mut t, mut f, mut s, mut e) = (0, 0, 0, 0);
        let class = xml(&format!("bakeoff.{}", c.name));
        if report.verdict.is_none() {
            t += 1;
            e += 1;
            let why = report
                .error
                .clone()
                .unwrap_or_else(|| format!("the run is {}", report.status));
            let _ = writeln!(
                cases,
                "    <testcase classname=\"{class}\" name=\"run #{} completed\"><error type=\"run\" message=\"{}\"/></testcase>",
                report.run_id,
                xml(&format!("run #{} did not finish: {why}", report.run_id))
            );
        } else {
            for r in &c.rules {
                let (body, failed, skip) = rule_body(r);
                t += 1;
                f += usize::from(failed);
                s += usize::from(skip);
                let _ = writeln!(
                    cases,
                    "    <testcase classname=\"{class}\" name=\"{}\">{body}</testcase>",
                    xml(&r.rule)
                );
            }
            if let Some(b) = &c.baseline {
                t += 1;
                let name = match report.baseline_run {
                    Some(run) => format!("no significant accuracy regression against run #{run}"),
                    None => "no significant accuracy regression against the baseline".to_string(),
                };
                let body = if b.regression {
                    f += 1;
                    format!("<failure type=\"regression\" message=\"{}\"/>", xml(&b.text))
                } else {
                    format!("<system-out>{}</system-out>", xml(&b.text))
                };
                let _ = writeln!(
                    cases,
                    "    <testcase classname=\"{class}\" name=\"{}\">{body}</testcase>",
                    xml(&name)
                );
            }
        }
        let verdict = c.verdict.as_str();
        let _ = write!(
            suites,
            "  <testsuite name=\"{}\" tests=\"{t}\" failures=\"{f}\" errors=\"{e}\" skipped=\"{s}\">\n    <properties>\n      \
             <property name=\"verdict\" value=\"{verdict}\"/>\n      <property name=\"run\" value=\"{}\"/>\n      \
             <property name=\"profile\" value=\"{}\"/>\n    </properties>\n{cases}  </testsuite>\n",
            xml(&c.name),
            report.run_id,
            xml(&format!("{} v{}", report.profile, report.profile_version)),
        );
        total += t;
        failures += f;
        skipped += s;
        errors += e;
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{}\" tests=\"{total}\" failures=\"{failures}\" \
         errors=\"{errors}\" skipped=\"{skipped}\">\n{suites}</testsuites>\n",
        xml(&format!("bakeoff run #{} {}", report.run_id, report.run_name))
    )
}

/// GitHub refuses comments over 65,536 characters; stay well below.
const MAX_MARKDOWN_CHARS: usize = 60_000;

fn verdict_word(v: Option<Verdict>) -> &'static str {
    match v {
        Some(v) => v.as_str(),
        None => "RUN ERROR",
    }
}

/// The report as Markdown for a pull-request comment: the verdict first, one table per candidate.
pub fn markdown(report: &GateReport) -> String {
    let mut out = String::new();
    markdown_heading(report, &mut out);
    if report.verdict.is_none() {
        let _ = writeln!(
            out,
            "The run is **{}** and has no verdict{}.\n",
            report.status,
            report
                .error
                .as_ref()
                .map(|e| format!(": {}", markdown_text(e)))
                .unwrap_or_default()
        );
    }
    if report.speed_unreliable {
        out.push_str("> **Speed figures unreliable:** the harness could not keep its schedule during this run.\n\n");
    }
    for flag in &report.judge_flags {
        let _ = writeln!(
            out,
            "> **Judge flagged:** the LLM judge {} {}: read its grades with care.\n",
            markdown_text(&flag.judge),
            markdown_text(&flag.why)
        );
    }
    out.push_str("| candidate | verdict | pass | fail | inconclusive | not measured |\n|---|---|--:|--:|--:|--:|\n");
    for c in &report.candidates {
        let n = |s: &str| c.rules.iter().filter(|r| r.state == s).count();
        let _ = writeln!(
            out,
            "| {} | **{}** | {} | {} | {} | {} |",
            markdown_text(&c.name),
            c.verdict.as_str(),
            n("pass"),
            n("fail"),
            n("inconclusive"),
            n("not_measured")
        );
    }
    out.push('\n');
    for c in &report.candidates {
        let mut section = String::new();
        let _ = writeln!(
            section,
            "<details><summary>{} — {}</summary>\n\n| rule | measured | 90 % interval | state | reason |\n|---|--:|---|---|---|",
            markdown_text(&c.name),
            c.verdict.as_str()
        );
        for r in &c.rules {
            let _ = writeln!(
                section,
                "| {} | {} | {} | {} | {} |",
                markdown_text(&r.rule),
                markdown_text(r.measured.as_deref().unwrap_or("—")),
                markdown_text(r.interval.as_deref().unwrap_or("—")),
                r.state.replace('_', " "),
                markdown_text(&match &r.settle {
                    Some(s) => format!("{}; {s}", r.reason),
                    None => r.reason.clone(),
                })
            );
        }
        if let Some(b) = &c.baseline {
            let _ = writeln!(
                section,
                "\n{}Baseline: {}",
                if b.regression { "**Regression.** " } else { "" },
                markdown_text(&b.text)
            );
        }
        section.push_str("\n</details>\n\n");
        if out.chars().count() + section.chars().count() > MAX_MARKDOWN_CHARS {
            out.push_str("_More candidates are in the JSON report; this comment stops here to fit._\n");
            break;
        }
        out.push_str(&section);
    }
    out
}

/// The verdict, the run, and what judged it.
fn markdown_heading(report: &GateReport, out: &mut String) {
    let _ = writeln!(
        out,
        "### bakeoff: **{}** · run #{} {}\n",
        verdict_word(report.verdict),
        report.run_id,
        markdown_text(&report.run_name)
    );
    let _ = writeln!(
        out,
        "Threshold profile **{}** (version {}){}{}.\n",
        markdown_text(&report.profile),
        report.profile_version,
        report
            .evalset
            .as_ref()
            .map(|e| format!(
                " · eval set {} `{}`",
                markdown_text(e),
                report
                    .evalset_hash
                    .as_deref()
                    .map(|h| &h[..h.len().min(12)])
                    .unwrap_or("")
            ))
            .unwrap_or_default(),
        report
            .baseline_run
            .map(|b| format!(" · baseline run #{b}"))
            .unwrap_or_default()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{BaselineCheck, CandidateResult, Exit, REPORT_FORMAT};

    fn rule(state: &str, reason: &str) -> RuleResult {
        RuleResult {
            metric: "accuracy".into(),
            rule: "accuracy ≥ 95 %".into(),
            dimension: Some("quality".into()),
            state: state.into(),
            measured: Some("91.2 %".into()),
            interval: Some("88 % – 94 %".into()),
            conditions: "n=20 cases".into(),
            reason: reason.into(),
            settle: None,
        }
    }

    fn report() -> GateReport {
        GateReport {
            format: REPORT_FORMAT.into(),
            run_id: 7,
            run_name: "tiny · <b>a</b>".into(),
            status: "finished".into(),
            error: None,
            evalset: Some("tiny".into()),
            evalset_hash: Some("0123456789abcdef".into()),
            profile: "batch".into(),
            profile_id: 1,
            profile_version: 2,
            baseline_run: Some(3),
            verdict: Some(Verdict::NoGo),
            exit: Exit::NoGo,
            exit_code: 1,
            candidates: vec![CandidateResult {
                candidate_id: 1,
                name: "a<script>\"".into(),
                verdict: Verdict::NoGo,
                reasons: vec![],
                rules: vec![
                    rule("pass", "fine"),
                    rule("fail", "accuracy 91.2 % < 95 % & \"worse\""),
                    rule("inconclusive", "straddles"),
                    rule("not_measured", "no records"),
                ],
                baseline: Some(BaselineCheck {
                    candidate: "a".into(),
                    baseline_candidate: Some("a".into()),
                    only_candidate: 0,
                    only_baseline: 6,
                    shared_cases: 6,
                    p_value: Some(0.03),
                    regression: true,
                    text: "baseline is significantly more accurate".into(),
                }),
            }],
            speed_unreliable: false,
            judge_flags: Vec::new(),
        }
    }

    #[test]
    fn junit_counts_failures_and_skips_and_escapes_text() {
        let x = junit(&report());
        assert!(
            x.contains("tests=\"5\" failures=\"3\" errors=\"0\" skipped=\"1\""),
            "{x}"
        );
        assert!(
            x.contains("message=\"accuracy 91.2 % &lt; 95 % &amp; &quot;worse&quot;\""),
            "{x}"
        );
        assert!(x.contains("message=\"inconclusive: straddles\""), "{x}");
        assert!(x.contains("<skipped message=\"no records\"/>"), "{x}");
        assert!(x.contains("name=\"a&lt;script&gt;&quot;\""), "{x}");
        assert!(!x.contains("<script>"), "{x}");
    }

    #[test]
    fn markdown_leads_with_the_verdict_and_neutralises_names() {
        let md = markdown(&report());
        assert!(md.starts_with("### bakeoff: **NO-GO** · run #7"), "{md}");
        assert!(md.contains("a&lt;script&gt;&quot;"), "{md}");
        assert!(!md.contains("<b>"), "{md}");
        assert!(md.contains("**Regression.**"), "{md}");
    }

    #[test]
    fn a_run_that_did_not_finish_is_one_error_per_candidate() {
        let mut r = report();
        r.verdict = None;
        r.status = "failed".into();
        r.error = Some("the smoke stage failed".into());
        let x = junit(&r);
        assert!(x.contains("errors=\"1\""), "{x}");
        assert!(x.contains("did not finish: the smoke stage failed"), "{x}");
        assert!(markdown(&r).contains("RUN ERROR"));
    }
}
