//! Switchyard: a WebAssembly-pluggable automation engine.
//!
//! One host process serves the system check, an OpenAI-compatible inference
//! API and webhook automations. Its state is in [`store`]; the records it
//! keeps are in [`model`]. Start at
//! [`server::prepare`] and [`server::serve`]; [`http::router`] lists the API.
#![deny(missing_docs)]

// Configuration, and the one error type of the API.
pub mod cfg;
pub mod error;

// The records kept, as plain data, and the store that keeps them.
pub mod model;
pub mod store;

// What the product does: the domain, webhook automations, the WebAssembly
// plugin runtime, and model serving.
pub mod automation;
pub mod domain;
pub mod inference;
pub mod plugin;

// Serving it: the shared state and system check, the HTTP API and console,
// the process.
pub mod app;
pub mod http;
pub mod server;

// Used across the layers.
pub mod files;
pub mod ids;
pub mod nesting;
pub mod queue;
pub mod tasks;
pub mod telemetry;
pub mod traces;

// The command line's client of a running host.
pub mod remote;
