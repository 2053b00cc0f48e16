//! What the product's users act on, beside automations: accounts and keys,
//! teams and registries with their roles, projects, secrets, artifacts and
//! runs (the event sources), and uploaded plugins.
//!
//! Every rule lives here once, for the API and the console alike: who may
//! do what ([`groups::authorize`]), what a valid name is ([`names`]), and
//! what each action writes to the store, in one transaction.

pub mod artifacts;
pub mod auth;
pub mod groups;
pub mod names;
pub mod projects;
pub mod runs;
pub mod seal;
pub mod secrets;
