//! The one integration-test binary (one binary keeps link time down). One module per area.
mod support;

mod archive_filters;
mod browser;
mod demo;
mod engine;
mod evalsets;
mod exports_harness;
mod judge;
mod measure;
mod mock;
mod operability;
mod real_server;
mod restart;
mod run_caps;
mod run_form;
mod run_page;
mod runs;
mod scorecard;
mod security;
mod stability;
mod store;
mod store_operability;
mod store_runs;
mod store_scorecards;
mod tokenize;
mod web;
