//! Shared test helpers: databases on both backends, the app on a random port.
#![allow(dead_code)]
pub mod app;
pub mod checked;
pub mod cli;
pub mod db;
pub mod oidc;
pub mod proxy;
pub mod recipe;
pub mod runs;
pub mod serve;
pub mod smtp;
pub mod wait;
