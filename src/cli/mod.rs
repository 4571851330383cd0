//! Terminal commands other than `serve`, `mock` and `migrate`: each file owns its clap
//! arguments (flattened into the one `Config`) and its `run`.
pub mod evalset;
pub mod measure;
pub mod runs;
