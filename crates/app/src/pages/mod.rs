//! What the pages of a run show that is computed from its records, worded and drawn as data
//! the web's templates only print (strings, SVG charts; no HTML): the run page's parts, the
//! cases page's index, the archive's figures. A terminal run's are stored when it ends
//! ([`summaries`]), by `bakeoff serve` and `bakeoff worker` alike, so no page of a big run
//! computes them from every record.
//!
//! - `format`: how a figure is written (`123 ms`, `95.0 % (n=20)`, "—" when not measured)
//! - `metrics`: the published metric definitions whose labels the tables use
//! - `charts`: SVG charts (plotters) of scorecards and runs
//! - `capacity`: a capacity search's report and charts (attainment vs load, the frontier)
//! - `report`: the run page's harness, per-level and quality reports
//! - `run_page`: the run page's parts, computed from its records
//! - `case_index`: what the cases page's filters know of a run's cases
//! - `figures`: each candidate's figures of a run, for the archive
//! - `tool_levels`: tool figures per load level (accuracy, F1, malformed calls, tool-turn timing)
//! - `replay`: a replay run level's fidelity per candidate (workload, speed, send lag, lengths)
//! - `summaries`: all of the above stored when a run ends
pub mod capacity;
pub mod case_index;
pub mod charts;
pub mod conversations;
pub mod figures;
pub mod format;
pub mod metrics;
pub mod replay;
pub mod report;
pub mod run_page;
pub mod summaries;
pub mod tool_levels;
