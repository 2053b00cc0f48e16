//! Model-backend plugins: inference engines operators load at runtime,
//! served beside the host's built-in backends.
//!
//! Loading one instantiates it and asks for its models, so a backend that
//! cannot start or lists nothing never replaces a working version. Its model
//! ids must be its own: neither a built-in backend's nor another plugin's.

use std::sync::Arc;

use super::backend::{ModelInfo, Served};
use super::loaded::{Plugin, Prepared};
use super::registry::Plugins;

impl Plugin {
    /// The backend, if this plugin is one.
    pub fn served(&self) -> Option<&Served> {
        match &self.pre {
            Prepared::Backend(served) => Some(served),
            _ => None,
        }
    }
}

impl Plugins {
    /// Model ids the built-in backends serve; plugins may not take them.
    pub fn reserve_models(&self, ids: impl IntoIterator<Item = String>) {
        self.reserved_models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids);
    }

    /// The backend plugin serving `model`.
    pub fn backend_for(&self, model: &str) -> Option<Arc<Plugin>> {
        self.list()
            .into_iter()
            .find(|p| p.served().is_some_and(|s| s.serves(model)))
    }

    /// The models backend plugins serve, by plugin name.
    pub fn backend_models(&self) -> Vec<ModelInfo> {
        self.list()
            .iter()
            .filter_map(|p| p.served())
            .flat_map(|s| s.models.iter().cloned())
            .collect()
    }
}
