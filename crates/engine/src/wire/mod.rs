//! One HTTP exchange with a candidate: `provider` dispatches by provider kind to `openai` and
//! `anthropic`, which build requests and decode answers in the shapes of `protocol`; `sse`
//! parses event streams; `client` sends and measures one request (plain-`http` ones through
//! `h1`, which reads the kernel's receive time of every read, and `read_lag` logs the reads
//! bakeoff got to late); `failure` classifies what went wrong; `tools` puts a tool case's tools in
//! a request.
pub mod anthropic;
pub mod client;
pub mod failure;
pub mod h1;
pub mod openai;
pub mod protocol;
pub mod provider;
pub mod read_lag;
pub mod responses;
pub mod sse;
pub mod tls;
pub mod tools;
