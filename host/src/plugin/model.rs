//! Model-backend plugins: inference engines operators load at runtime,
//! served beside the host's built-in backends.
//!
//! Loading one instantiates it and asks for its models, so a backend that
//! cannot start or lists nothing never replaces a working version. Its model
//! ids must be its own: neither a built-in backend's nor another plugin's.

use std::collections::HashMap;
use std::sync::Arc;

use super::backend::{Backend, ModelInfo, Setup};
use super::manifest::BackendGrant;
use super::registry::{Plugin, Plugins, Pre};
use super::{Limits, LoadError, PluginError};

/// A loaded model backend and the models it serves.
pub struct Served {
    /// The backend, shared by the calls in flight.
    pub backend: Arc<Backend>,
    /// Its models, as it listed them at load.
    pub models: Vec<ModelInfo>,
}

impl Served {
    /// Whether `model` is one of its ids.
    pub fn serves(&self, model: &str) -> bool {
        self.models.iter().any(|m| m.id == model)
    }

    /// Its model ids.
    pub fn model_ids(&self) -> Vec<&str> {
        self.models.iter().map(|m| m.id.as_str()).collect()
    }
}

impl Plugin {
    /// The backend, if this plugin is one.
    pub fn served(&self) -> Option<&Served> {
        match &self.pre {
            Pre::Backend(served) => Some(served),
            _ => None,
        }
    }
}

impl Plugins {
    /// Loads a backend plugin granted `grant` and lists its models; also
    /// returns the component's SHA-256.
    pub(super) async fn build_backend(
        &self,
        id: &str,
        grant: &BackendGrant,
        limits: &Limits,
        bytes: Vec<u8>,
    ) -> Result<(String, Served), LoadError> {
        let setup = Setup::granted(id.to_string(), grant, limits)?;
        let runtime = self.runtime.clone();
        let (sha256, backend) = tokio::task::spawn_blocking(move || {
            let backend = Backend::load(setup, &bytes, &runtime)?;
            Ok::<_, LoadError>((super::engine::content_hash(&bytes), backend))
        })
        .await
        .map_err(|e| LoadError::Host(format!("compilation crashed: {e}")))??;
        let models = backend
            .models()
            .await
            .map_err(|e| LoadError::DidNotStart(format!("listing its models failed: {e}")))?;
        if models.is_empty() {
            return Err(LoadError::NoModels);
        }
        Ok((sha256, Served { backend, models }))
    }

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

    /// Refuses `plugin` if a model id it serves is taken by a built-in
    /// backend or by another plugin in `loaded` (replacing itself is fine).
    pub(super) fn check_model_ids(
        &self,
        plugin: &Plugin,
        loaded: &HashMap<String, Arc<Plugin>>,
    ) -> Result<(), PluginError> {
        let Some(served) = plugin.served() else {
            return Ok(());
        };
        let reserved = self
            .reserved_models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for model in &served.models {
            let owner = if reserved.contains(&model.id) {
                Some("a built-in backend".to_string())
            } else {
                loaded
                    .values()
                    .filter(|other| other.name != plugin.name)
                    .find(|other| other.served().is_some_and(|s| s.serves(&model.id)))
                    .map(|other| format!("plugin '{}'", other.name))
            };
            if let Some(owner) = owner {
                return Err(PluginError::Conflict(format!(
                    "{}: the model id '{}' is already served by {owner}; give the backend other model ids",
                    plugin.id(),
                    model.id
                )));
            }
        }
        Ok(())
    }
}
