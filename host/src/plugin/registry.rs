//! Loaded plugins by name, replaced atomically.
//!
//! The map lives behind an `ArcSwap`: a call takes an `Arc<Plugin>` and keeps
//! it to the end, so a replacement never disturbs calls in flight — they finish
//! on the old version while new calls get the new one. A component that fails
//! to compile or validate never reaches the map, so the old version keeps
//! serving.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::engine::{Runtime, content_hash};
use super::loaded::{Plugin, Prepared, Spec, Stats};
use super::warm::Warm;
use super::{Kind, Limits, LoadError, PluginError};
use crate::cfg::QueueConfig;
use crate::queue::WorkQueue;

/// Idle instances kept of one template or filter plugin, across all teams.
/// Each holds pooled slots (an interpreter's component has a dozen core
/// instances), so few are kept: the teams most recently served.
const MAX_IDLE: usize = 8;

/// The plugin host: runtime, loaded plugins and the plugin work queue.
pub struct Plugins {
    pub(super) runtime: Arc<Runtime>,
    loaded: ArcSwap<HashMap<String, Arc<Plugin>>>,
    /// Model ids the built-in backends serve, which plugins may not take.
    pub(super) reserved_models: Mutex<Vec<String>>,
    /// Serialises writers; readers never wait.
    write: Mutex<()>,
    /// Installs so far: each plugin is numbered as it is installed.
    installs: AtomicU64,
    /// Every plugin call runs on this queue (`cpu_queue` in the system check).
    pub queue: WorkQueue,
}

impl Plugins {
    /// Starts the runtime with its cache in `cache_dir`, with no plugins loaded.
    pub async fn new(cache_dir: &Path, queue: &QueueConfig) -> anyhow::Result<Arc<Plugins>> {
        let cache_dir = cache_dir.to_path_buf();
        let runtime = tokio::task::spawn_blocking(move || Runtime::new(&cache_dir)).await??;
        Ok(Arc::new(Plugins {
            runtime,
            loaded: ArcSwap::default(),
            reserved_models: Mutex::default(),
            write: Mutex::new(()),
            installs: AtomicU64::new(0),
            queue: WorkQueue::start("plugin", queue),
        }))
    }

    /// [`Plugins::new`], then loads `builtins` (the binary's own plugins,
    /// [`super::builtins`]).
    pub async fn start(
        cache_dir: &Path,
        queue: &QueueConfig,
        builtins: Vec<Spec>,
    ) -> anyhow::Result<Arc<Plugins>> {
        let plugins = Plugins::new(cache_dir, queue).await?;
        for spec in builtins {
            plugins.load(spec).await?;
        }
        Ok(plugins)
    }

    /// The engine and linker plugins run in.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The plugin named `name`, if loaded.
    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.loaded.load().get(name).cloned()
    }

    /// The plugin named `name`, which must be of `kind`.
    pub fn get_kind(&self, name: &str, kind: Kind) -> Result<Arc<Plugin>, PluginError> {
        self.get(name)
            .filter(|p| p.kind == kind)
            .ok_or_else(|| PluginError::NotLoaded {
                name: name.to_string(),
                kind,
            })
    }

    /// Every loaded plugin, by name.
    pub fn list(&self) -> Vec<Arc<Plugin>> {
        let mut all: Vec<_> = self.loaded.load().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Compiles and validates `spec` off the async threads, then installs it,
    /// replacing any plugin of the same name. On failure nothing changes.
    pub async fn load(&self, spec: Spec) -> Result<Arc<Plugin>, PluginError> {
        let plugin = Arc::new(self.build(spec).await?);
        self.install(plugin)
    }

    /// Installs a plugin built by [`Plugins::check`], replacing any of the
    /// same name; calls in flight finish on the old one.
    pub fn install(&self, plugin: Arc<Plugin>) -> Result<Arc<Plugin>, PluginError> {
        let _guard = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = HashMap::clone(&self.loaded.load());
        self.check_model_ids(&plugin, &next)?;
        let number = self.installs.fetch_add(1, Ordering::SeqCst) + 1;
        plugin.installed.store(number, Ordering::SeqCst);
        next.insert(plugin.name.clone(), plugin.clone());
        self.loaded.store(Arc::new(next));
        tracing::info!(plugin = %plugin.id(), kind = %plugin.kind, sha256 = %plugin.sha256, "plugin loaded");
        Ok(plugin)
    }

    /// Whether `plugin` could be installed now (its models clash with no
    /// other plugin's), as [`Plugins::install`] will check again.
    pub fn can_install(&self, plugin: &Plugin) -> Result<(), PluginError> {
        self.check_model_ids(plugin, &self.loaded.load())
    }

    /// Installs so far; [`Plugin::installed_as`] numbers each.
    pub fn installs(&self) -> u64 {
        self.installs.load(Ordering::SeqCst)
    }

    /// Checks `spec` without installing it: the dry run of `plugin check`.
    pub async fn check(&self, spec: Spec) -> Result<Arc<Plugin>, PluginError> {
        Ok(Arc::new(self.build(spec).await?))
    }

    /// Unloads `name`. Calls in flight finish; built-ins cannot be removed.
    pub fn remove(&self, name: &str) -> Option<Arc<Plugin>> {
        let _guard = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = HashMap::clone(&self.loaded.load());
        let removed = next.remove(name)?;
        self.loaded.store(Arc::new(next));
        tracing::info!(plugin = %removed.id(), "plugin removed");
        Some(removed)
    }

    async fn build(&self, spec: Spec) -> Result<Plugin, PluginError> {
        let id = format!("{}@{}", spec.name, spec.version);
        let load_error = |why: LoadError| PluginError::Load {
            plugin: id.clone(),
            why,
        };
        let limits = spec
            .limits
            .unwrap_or_else(|| Limits::default_for(spec.kind));
        limits
            .validate()
            .map_err(|e| load_error(LoadError::Limits(e)))?;
        let kind = spec.kind;
        let size_bytes = spec.bytes.len();
        let (sha256, pre) = if kind == Kind::ModelBackend {
            let grant = spec.grant.unwrap_or_default();
            let (sha256, served) =
                super::backend::serve(self.runtime.clone(), &id, &grant, &limits, spec.bytes)
                    .await
                    .map_err(load_error)?;
            (sha256, Prepared::Backend(served))
        } else {
            let runtime = self.runtime.clone();
            let bytes = spec.bytes;
            tokio::task::spawn_blocking(move || {
                super::capabilities::check(kind, &bytes)?;
                // The same bytes may be in use as another plugin (or kind):
                // only what this load compiled is dropped on refusal.
                let cached = runtime.is_cached(&bytes);
                let component = runtime
                    .compile(&bytes)
                    .map_err(|e| LoadError::NotAComponent(format!("{e:#}")))?;
                let pre = super::call::prepare(&runtime, kind, &component).inspect_err(|_| {
                    if !cached {
                        runtime.forget(&bytes);
                    }
                })?;
                Ok::<_, LoadError>((content_hash(&bytes), pre))
            })
            .await
            .map_err(|e| load_error(LoadError::Host(format!("compilation crashed: {e}"))))?
            .map_err(load_error)?
        };
        Ok(Plugin {
            name: spec.name,
            kind,
            version: spec.version,
            sha256,
            source: spec.source,
            limits,
            loaded_at: crate::ids::now(),
            size_bytes,
            pre,
            stats: Stats::default(),
            warm: Warm::new(MAX_IDLE),
            installed: AtomicU64::new(0),
        })
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

    /// Runs `job`, a batch of calls made with the `_in_batch` forms, as one
    /// job of the plugin work queue on the caller's task: one place in its
    /// backlog and one worker for the whole batch.
    pub async fn batch<T>(&self, job: impl Future<Output = T>) -> Result<T, PluginError> {
        self.queue
            .run_here(job)
            .await
            .map_err(|e| PluginError::Queue(e.to_string()))
    }

    /// Runs one call, `job`, as a job of the plugin work queue.
    pub(super) async fn on_queue<T>(
        &self,
        job: impl Future<Output = Result<T, PluginError>>,
    ) -> Result<T, PluginError> {
        self.batch(job).await?
    }
}
