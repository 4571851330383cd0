//! bakeoff: run candidate language models over your own eval sets, measure them under stated
//! conditions, and judge them against your thresholds. See docs/ARCHITECTURE.md for the map.
pub mod app;
pub mod assets;
pub mod cli;
pub mod config;
pub mod domain;
pub mod engine;
pub mod mock;
pub mod store;
pub mod web;

/// bakeoff's own version, recorded in every run's provenance.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
