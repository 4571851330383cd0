//! One HTTP exchange with a candidate: `provider` dispatches by provider kind to `openai` and
//! `anthropic`, which build requests and decode answers in the shapes of `protocol`; `sse`
//! parses event streams; `client` sends and measures one request; `failure` classifies what
//! went wrong.
pub mod anthropic;
pub mod client;
pub mod failure;
pub mod openai;
pub mod protocol;
pub mod provider;
pub mod sse;
