//! bakeoff: run candidate language models over your own eval sets, measure them under stated
//! conditions, and judge them against your thresholds. See docs/ARCHITECTURE.md for the map.
//!
//! This crate is the top of the workspace: the web pages, the command line and their one
//! configuration. The layers below are crates of their own (see `crates/`), re-exported here
//! under the names the code uses, so `crate::domain::…` reads the same in every layer.
pub mod assets;
pub mod cli;
pub mod config;
pub mod web;

pub use bakeoff_app as app;
pub use bakeoff_app::memory::{limit_malloc_arenas, release_freed_memory};
pub use bakeoff_domain as domain;
pub use bakeoff_domain::VERSION;
pub use bakeoff_engine as engine;
pub use bakeoff_kernel_stamps as kernel_stamps;
pub use bakeoff_mock as mock;
pub use bakeoff_store as store;
