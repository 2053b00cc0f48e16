//! Every end-to-end test, in one binary. Each test starts the real
//! `switchyard` binary; see `harness`.

mod harness;

mod api_keys;
mod health;
mod http_errors;
mod lifecycle;
mod plugins;
mod teams;
mod webhooks;
