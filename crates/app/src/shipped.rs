//! The eval sets that ship with bakeoff, compiled into the binary so it runs from any directory.
use rust_embed::RustEmbed;

/// `evalsets/`: the eval sets that ship with bakeoff (loaded at every start, idempotently).
#[derive(RustEmbed)]
#[folder = "../../evalsets/"]
pub struct ShippedEvalSets;

/// (file name, text) of every shipped eval set, sorted by name.
pub fn shipped_evalsets() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = ShippedEvalSets::iter()
        .filter(|name| name.ends_with(".jsonl"))
        .filter_map(|name| {
            let file = ShippedEvalSets::get(&name)?;
            Some((name.to_string(), String::from_utf8_lossy(&file.data).into_owned()))
        })
        .collect();
    out.sort();
    out
}
