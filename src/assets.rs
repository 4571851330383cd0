//! Files compiled into the binary so it runs from any directory.
use rust_embed::RustEmbed;

/// `static/`: CSS and vendored JavaScript, served under `/static/`.
#[derive(RustEmbed)]
#[folder = "static/"]
pub struct StaticAssets;

pub use bakeoff_app::shipped::{ShippedEvalSets, shipped_evalsets};
