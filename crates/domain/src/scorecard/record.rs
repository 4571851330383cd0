//! An archived scorecard: which run it judged, by which profile *version*, against which
//! incumbent, with which pipeline stated — enough to recompute it exactly from the records —
//! plus the verdicts as they read when it was saved.
use serde::{Deserialize, Serialize};

use super::Verdict;
use crate::Timestamp;
use crate::pipeline::PipelineSpec;

/// One candidate's verdict as recorded at save time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedVerdict {
    pub candidate_id: i64,
    pub candidate: String,
    pub verdict: Verdict,
}

/// What is needed to archive a scorecard.
#[derive(Debug, Clone, PartialEq)]
pub struct NewScorecard {
    pub run_id: i64,
    pub profile_id: i64,
    pub profile_version: u32,
    pub incumbent: Option<i64>,
    pub pipeline: PipelineSpec,
    pub created_by: String,
    pub note: String,
    pub verdicts: Vec<RecordedVerdict>,
}

/// A stored scorecard.
#[derive(Debug, Clone, PartialEq)]
pub struct ScorecardRecord {
    pub id: i64,
    pub run_id: i64,
    pub profile_id: i64,
    pub profile_version: u32,
    pub incumbent: Option<i64>,
    pub pipeline: PipelineSpec,
    pub created_by: String,
    pub note: String,
    pub verdicts: Vec<RecordedVerdict>,
    pub created_at: Timestamp,
}

/// A scorecard as listed, with the names the list shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ScorecardListItem {
    pub record: ScorecardRecord,
    pub run_name: String,
    pub profile_name: String,
}
