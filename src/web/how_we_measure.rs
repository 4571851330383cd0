//! "How we measure": the fixed metric definitions every figure in bakeoff follows
//! (DESIGN.md, "Measurement"). The run pages take their labels from [`METRICS`] too, so the
//! page and the tables cannot drift apart.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::routing::get;

use super::AppState;
use crate::domain::calibers::definitions;

pub use crate::app::pages::metrics::*;

pub fn router() -> Router<AppState> {
    Router::new().route("/measure", get(page))
}

#[derive(Template, WebTemplate)]
#[template(path = "how_we_measure.html")]
pub struct MeasurePage {
    pub nav: &'static str,
    pub metrics: &'static [MetricDef],
    /// How tokens are attributed to chunks (the words of `measure --json` too).
    pub chunk_attribution: &'static str,
}

async fn page() -> MeasurePage {
    MeasurePage {
        nav: "measure",
        metrics: &METRICS,
        chunk_attribution: definitions::CHUNK_ATTRIBUTION,
    }
}
