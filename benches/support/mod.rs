//! What the benches share: the synthetic eval set they load (one `mod support;` per bench).
use bakeoff::domain::evalset::EvalSetFile;

/// A classification eval set of `cases` short cases, tagged `en` or `zh`.
pub fn evalset(name: &str, cases: usize) -> EvalSetFile {
    let mut text = format!(
        "{{\"bakeoff_evalset\":1,\"name\":\"{name}\",\"task\":\"classification\",\"prompt\":\"Classify: {{{{text}}}}\",\"graders\":[{{\"kind\":\"exact\"}}],\"max_tokens\":16}}\n"
    );
    for i in 0..cases {
        let tag = if i % 3 == 0 { "en" } else { "zh" };
        text.push_str(&format!(
            "{{\"id\":\"case-{i:06}\",\"vars\":{{\"text\":\"item number {i} with some words to classify\"}},\"expected\":\"positive\",\"tags\":[\"{tag}\"]}}\n"
        ));
    }
    EvalSetFile::parse(&format!("{name}.jsonl"), &text).expect("the bench eval set parses")
}
