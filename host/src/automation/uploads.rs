//! Plugins uploaded through the operator API are kept in the store, so a
//! restart loads them again and, with a shared store, every host runs the
//! same ones: each host reads the store's digests when told another host
//! changed them, loads what changed with the same atomic swap as an upload,
//! and unloads what was removed.
//! Compiled code stays cached per host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::automation::automations;
use crate::error::{Error, Result};
use crate::model::StoredPlugin;
use crate::plugin::BackendGrant;
use crate::plugin::{Kind, Limits, Plugin, PluginError, Plugins, is_builtin};
use crate::plugin::{Source, Spec};
use crate::store::Store;
use crate::tasks::{Stage, Tasks};

/// The grant an upload's fields describe (`None` when none is given), for
/// the operator API and the console alike: `allow_hosts` comma-separated
/// `host:port`s, `api_key_env`, `per_call` and the environment. Refused
/// for a kind other than a model backend, and when a value is wrong.
pub fn grant_of(
    kind: Kind,
    env: std::collections::BTreeMap<String, String>,
    allow_hosts: Option<&str>,
    api_key_env: Option<String>,
    per_call: Option<bool>,
) -> Result<Option<BackendGrant>> {
    let given =
        !env.is_empty() || allow_hosts.is_some() || api_key_env.is_some() || per_call.is_some();
    if !given {
        return Ok(None);
    }
    if kind != Kind::ModelBackend {
        return Err(Error::invalid(
            "kind",
            format!(
                "allow_hosts, api_key_env, per_call and env.* are for model-backend plugins, and this one is a {kind}"
            ),
        ));
    }
    let grant = BackendGrant {
        env,
        allow_hosts: allow_hosts
            .into_iter()
            .flat_map(|hosts| hosts.split(','))
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .collect(),
        api_key_env,
        per_call: per_call.unwrap_or(false),
        proxy: None,
    };
    grant
        .validate()
        .map_err(|e| Error::invalid(e.field, e.message))?;
    Ok(Some(grant))
}

/// Installs an uploaded plugin, for the operator API and the console alike:
/// a replacement must be the same kind; the component is compiled and
/// checked, and so is every automation that calls it, before anything
/// changes (on failure the old version keeps serving); then it is kept in
/// the store and swapped in. Returns it and the version it replaced.
pub async fn install(
    store: &Store,
    plugins: &Arc<Plugins>,
    spec: Spec,
) -> Result<(Arc<Plugin>, Option<Arc<Plugin>>)> {
    let previous = plugins.get(&spec.name);
    if let Some(old) = previous.as_ref().filter(|old| old.kind != spec.kind) {
        return Err(Error::Conflict(format!(
            "plugin '{}' is a {}; a replacement must be the same kind (remove it first to change kinds)",
            spec.name, old.kind
        )));
    }
    let kept = stored(&spec);
    let candidate = plugins.check(spec).await?;
    if previous.is_some() {
        let broken = automations::broken_by(store, plugins, &candidate).await?;
        if !broken.is_empty() {
            let list: Vec<String> = broken
                .iter()
                .map(|(handle, why)| format!("{} ({why})", handle.describe()))
                .collect();
            return Err(Error::InvalidRequest {
                message: format!(
                    "replacing plugin '{}' would break {}; the old version keeps serving: fix or delete those automations first",
                    candidate.name,
                    list.join("; ")
                ),
                param: None,
            });
        }
    }
    plugins.can_install(&candidate)?;
    // Stored first: this host's plugin sync unloads an upload that is
    // installed but not (yet) stored.
    store
        .put_plugin(&StoredPlugin {
            sha256: candidate.sha256.clone(),
            ..kept
        })
        .await?;
    Ok((plugins.install(candidate)?, previous))
}

/// Removes an uploaded plugin. One that automations use is refused, naming
/// them, unless `force`, which disables them; built-ins stay.
pub async fn remove(store: &Store, plugins: &Plugins, name: &str, force: bool) -> Result<()> {
    if is_builtin(name) {
        return Err(Error::Conflict(format!(
            "'{name}' is a built-in plugin: it can be replaced (PUT) but not removed"
        )));
    }
    let plugin = plugins.get(name).ok_or_else(|| {
        Error::NotFound(format!(
            "no plugin named '{name}' is loaded; GET /v1/admin/plugins lists them"
        ))
    })?;
    let users = automations::using_plugin(store, name, plugin.kind).await?;
    if !users.is_empty() && !force {
        let names: Vec<String> = users.iter().map(|a| a.handle().describe()).collect();
        return Err(Error::Conflict(format!(
            "plugin '{name}' is used by {}; change them first, or remove it anyway with ?force=true (they will be disabled)",
            names.join(", ")
        )));
    }
    let handles: Vec<_> = users.iter().map(|a| a.handle()).collect();
    let reason = format!("its template plugin '{name}' was removed");
    automations::disable(store, &handles, &reason).await?;
    store.delete_plugin(name).await?;
    plugins.remove(name);
    Ok(())
}

/// The stored form of an upload (its `sha256` is the loaded plugin's).
pub fn stored(spec: &Spec) -> StoredPlugin {
    StoredPlugin {
        name: spec.name.clone(),
        kind: spec.kind.to_string(),
        version: spec.version.clone(),
        sha256: String::new(),
        settings: json!({"limits": spec.limits, "grant": spec.grant}),
        wasm: spec.bytes.clone(),
        uploaded_at_ms: crate::ids::now_ms(),
    }
}

/// The upload a stored plugin was made from.
fn spec(stored: StoredPlugin) -> anyhow::Result<Spec> {
    let kind: Kind = stored.kind.parse().map_err(anyhow::Error::msg)?;
    let limits: Option<Limits> = serde_json::from_value(stored.settings["limits"].clone())?;
    let grant: Option<BackendGrant> = serde_json::from_value(stored.settings["grant"].clone())?;
    Ok(Spec {
        name: stored.name,
        kind,
        version: stored.version,
        limits,
        source: Source::Upload,
        grant,
        bytes: stored.wasm,
    })
}

/// Keeps this host's uploaded plugins in step with the store.
pub struct Sync {
    store: Store,
    plugins: Arc<Plugins>,
    /// Digests that failed to load here, so they are not compiled again
    /// on every poll; the error is in the log.
    failed: Mutex<HashMap<String, String>>,
}

impl Sync {
    /// Loads every stored upload now, then again whenever the store says
    /// another host changed them (or every [`super::SAFETY_POLL`]).
    pub async fn start(tasks: &Tasks, store: Store, plugins: Arc<Plugins>) -> Arc<Sync> {
        let sync = Arc::new(Sync {
            store,
            plugins,
            failed: Mutex::default(),
        });
        if let Err(e) = sync.once().await {
            tracing::error!(error = %e, "loading the uploaded plugins failed");
        }
        let polling = sync.clone();
        tasks.spawn(Stage::Intake, async move {
            loop {
                tokio::select! {
                    () = polling.store.plugins_changed() => {}
                    () = tokio::time::sleep(super::SAFETY_POLL) => {}
                }
                if let Err(e) = polling.once().await {
                    tracing::warn!(error = %e, "checking the store for plugin changes failed");
                }
            }
        });
        sync
    }

    /// One pass: load what is new or replaced, unload what was removed.
    async fn once(&self) -> Result<()> {
        // An upload on this host may land between this read and the
        // unloading below: what was installed since is left for the next
        // pass. (A compile takes seconds, so when a plugin was built says
        // nothing.)
        let installs_read = self.plugins.installs();
        let stored: HashMap<String, String> =
            self.store.plugin_digests().await?.into_iter().collect();
        for (name, sha256) in &stored {
            let running = self.plugins.get(name);
            let current = running
                .as_ref()
                .is_some_and(|p| p.source == Source::Upload && &p.sha256 == sha256);
            if current || self.failed_before(name, sha256) {
                continue;
            }
            let Some(upload) = self.store.plugin(name).await? else {
                continue;
            };
            let loaded = match spec(upload) {
                Ok(spec) => self.load(spec).await.map_err(|e| e.to_string()),
                Err(e) => Err(format!("{e:#}")),
            };
            if let Err(e) = loaded {
                tracing::error!(plugin = %name, error = %e, "an uploaded plugin failed to load on this host");
                self.lock().insert(name.clone(), sha256.clone());
            }
        }
        for plugin in self.plugins.list() {
            if plugin.source == Source::Upload
                && !stored.contains_key(&plugin.name)
                && plugin.installed_as() <= installs_read
            {
                self.plugins.remove(&plugin.name);
            }
        }
        Ok(())
    }

    /// Builds an upload and installs it, unless this host's own upload of
    /// the same bytes was installed while it compiled: the store tells
    /// this host of its own uploads too, and installing again would start
    /// the plugin's statistics afresh under the calls it already served.
    async fn load(&self, spec: Spec) -> std::result::Result<(), PluginError> {
        let built = self.plugins.check(spec).await?;
        let running = self.plugins.get(&built.name);
        if running.is_some_and(|p| p.source == Source::Upload && p.sha256 == built.sha256) {
            return Ok(());
        }
        self.plugins.install(built).map(drop)
    }

    fn failed_before(&self, name: &str, sha256: &str) -> bool {
        self.lock().get(name).is_some_and(|s| s == sha256)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner())
    }
}
