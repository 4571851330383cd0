//! Exports are data, not markup: text that came from users or models (names, answers, reasons)
//! is neutralised before it goes into a Markdown or CSV file that someone will open elsewhere.

/// One CSV field: RFC 4180 quoting, and OWASP's defence against formula injection — a text cell
/// that begins with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`, so a
/// spreadsheet shows it as text instead of evaluating it. Plain numbers (`-0.25`) are left as
/// numbers: no formula parses as one.
pub fn csv_cell(s: &str) -> String {
    let is_number = !s.is_empty() && s.parse::<f64>().is_ok_and(f64::is_finite);
    let formula_like = s.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let text = if formula_like && !is_number {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if formula_like && !is_number || text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// Text inside a line of Markdown (a table cell, a list item): HTML is escaped as entities, so
/// `<script>` or `<img onerror>` in a name shows as text wherever the file is rendered; Markdown
/// syntax (emphasis, links, code, table pipes) is backslash-escaped, and line breaks become
/// spaces so a value cannot start a block of its own.
pub fn markdown_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\n' | '\r' => out.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_cells_are_neutralised_and_numbers_kept() {
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(
            csv_cell("=HYPERLINK(\"http://evil.example\",\"x\")"),
            "\"'=HYPERLINK(\"\"http://evil.example\"\",\"\"x\"\")\""
        );
        for f in ["+1+1", "-2+3", "@SUM(A1)", "\tx", "\r=1"] {
            assert!(csv_cell(f).starts_with("\"'"), "{f:?} → {}", csv_cell(f));
        }
        assert_eq!(csv_cell("-0.25"), "-0.25");
        assert_eq!(csv_cell("+3"), "+3");
        assert_eq!(csv_cell(""), "");
    }

    #[test]
    fn markdown_text_escapes_html_and_markdown() {
        assert_eq!(
            markdown_text("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(
            markdown_text("<img src=x onerror=\"a()\">"),
            "&lt;img src=x onerror=&quot;a()&quot;&gt;"
        );
        assert_eq!(markdown_text("a|b\nc"), "a\\|b c");
        assert_eq!(markdown_text("[x](javascript:1)"), "\\[x\\](javascript:1)");
        assert_eq!(markdown_text("模型 1.5"), "模型 1.5");
    }
}
