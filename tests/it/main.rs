//! Every end-to-end test, in one binary. Each test starts the real
//! `switchyard` binary; see `harness`. Tests declared with
//! `on_each_store!(name)` run twice, as `name::sled` and `name::postgres`.

#[macro_use]
mod harness;
mod browser;
mod receiver;
mod world;

mod api_keys;
mod automations;
mod budgets;
mod cache;
mod cli;
mod console;
mod delivery;
mod durability;
mod egress;
mod endpoints;
mod event_catalog;
mod events;
mod fifo;
mod gateway;
mod health;
mod hostile_input;
mod http_errors;
mod inference;
mod keep_alive;
mod layout;
mod lifecycle;
mod messages;
mod metrics;
mod mtls;
mod multihost;
mod oauth;
mod openapi;
mod plugin_units;
mod plugins;
mod power_cut;
mod power_cut_fs;
mod receiver_options;
mod receivers;
mod scaffolds;
mod spend;
mod teams;
mod traces;
mod upstream;
mod webhooks;
