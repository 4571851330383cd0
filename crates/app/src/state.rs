//! The application's state: what `bakeoff serve` and `bakeoff worker` hold while they run, and
//! every page handler reads through the web's state.
use std::sync::Arc;

use crate::domain::compare::Figures;
use crate::domain::scorecard::CandidateSummary;
use crate::engine::run::Runner;
use crate::live::Live;
use crate::pages::case_index::CaseIndex;
use crate::pages::run_page::RecordParts;
use crate::store::DynStore;

/// The store, the runner, and what the views of unfinished runs share; cheap to clone.
#[derive(Clone)]
pub struct App {
    pub store: DynStore,
    pub runner: Runner,
    pub views: Arc<LiveViews>,
}

impl App {
    pub fn new(store: DynStore, runner: Runner) -> App {
        App {
            store,
            runner,
            views: Arc::default(),
        }
    }
}

/// What an unfinished run's views compute from all its records, one [`Live`] per kind of value,
/// shared by every view of this process over this store (`live` says how).
#[derive(Default)]
pub struct LiveViews {
    /// The run page's parts.
    pub run_page: Live<RecordParts>,
    /// The cases page's index, without and with the differing-outputs marks (their query costs
    /// a read of its own).
    pub case_index: [Live<CaseIndex>; 2],
    /// The archive's per-candidate figures (history, comparisons).
    pub figures: Live<Vec<Figures>>,
    /// The scorecard's summaries (its page, exports, API, gate polls).
    pub summaries: Live<Vec<CandidateSummary>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_apps_clones_share_its_live_views_and_another_app_has_its_own() {
        let store = crate::store::connect("sqlite::memory:").await.unwrap();
        let app = App::new(store.clone(), Runner::new(store.clone()));
        let other = App::new(store.clone(), Runner::new(store));
        assert!(Arc::ptr_eq(&app.views, &app.clone().views));
        assert!(!Arc::ptr_eq(&app.views, &other.views));
    }
}
