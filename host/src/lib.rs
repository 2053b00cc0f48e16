//! Switchyard: a WebAssembly-pluggable automation engine.
//!
//! One host process serves the system check, an OpenAI-compatible inference
//! API and webhook automations. Its state is in [`store`]; the records it
//! keeps are in [`model`]. Start at
//! [`server::prepare`] and [`server::serve`]; [`http::router`] lists the API.
#![deny(missing_docs)]

pub mod app;
pub mod artifacts;
pub mod auth;
pub mod automation;
pub mod cfg;
pub mod error;
pub mod groups;
pub mod health;
pub mod http;
pub mod ids;
pub mod inference;
pub mod model;
pub mod names;
pub mod nesting;
pub mod plugin;
pub mod projects;
pub mod queue;
pub mod remote;
pub mod runs;
pub mod seal;
pub mod secrets;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod uploads;
