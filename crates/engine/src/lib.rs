//! The measurement engine. Knows nothing of pages; talks to the world through `store`.
//!
//! - `wire`: one HTTP exchange with a candidate — providers (request building, stream and
//!   response decoding), the SSE parser, the measuring client, failure classification
//! - `run`: executing stored runs — the `Runner` and its admission queue, the executor with
//!   its request pool, staged rollout, soaks, the llm-judge pass, the record writer, the
//!   harness clock
//! - `tokens`: counting output tokens — the canonical o200k tokenizer and a candidate's own
//!   tokenize endpoint
//! - `probes`: operability probes of an endpoint; `endpoint_measure`: the terminal `measure`
//!   command's run over synthetic prompts; `calibrate`: the calibration levels measured
//!   against the mock
//! - `cancel`, `error`: what every room shares — stopping work, the engine's own error
pub mod calibrate;
pub mod cancel;
pub mod endpoint_measure;
pub mod error;
pub mod own_metrics;
pub mod probes;
pub mod replay;
pub mod run;
pub mod tokens;
pub mod wire;

// The layers below, under the names the code has always used (`crate::domain::…`).
use bakeoff_domain as domain;
pub use bakeoff_domain::VERSION;
use bakeoff_kernel_stamps as kernel_stamps;
use bakeoff_store as store;
