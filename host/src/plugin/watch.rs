//! The watched plugins directory: `NAME.wasm` with `NAME.toml`.
//!
//! The directory is scanned when the kernel says something in it changed
//! (inotify, through the `notify` crate), so an idle host does not read it;
//! where that cannot be had, it is polled. A plugin is (re)loaded when the
//! hash of its files changes, and unloaded when its files go away. A bad
//! plugin is reported in the log and in [`Watcher::errors`]; whatever was
//! loaded under that name before keeps serving.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::loaded::{Source, Spec};
use super::manifest::{Manifest, validate_name};
use super::registry::Plugins;
use crate::tasks::{Stage, Tasks};

/// How long after a change the directory is scanned.
const SETTLE: Duration = Duration::from_millis(100);

/// Watches one directory for plugins.
pub struct Watcher {
    dir: PathBuf,
    plugins: Arc<Plugins>,
    seen: Mutex<HashMap<String, String>>,
    errors: Mutex<HashMap<String, String>>,
}

impl Watcher {
    /// A watcher of `dir` that loads into `plugins`.
    pub fn new(dir: &Path, plugins: Arc<Plugins>) -> Arc<Watcher> {
        Arc::new(Watcher {
            dir: dir.to_path_buf(),
            plugins,
            seen: Mutex::default(),
            errors: Mutex::default(),
        })
    }

    /// Watches the directory, scans it once now, then again on every
    /// change until intake stops (every `interval` while it cannot be
    /// watched). A missing directory is watched for through its parent.
    /// Watching starts before the first scan, so a change made meanwhile
    /// is either seen by that scan or wakes the next.
    pub async fn start(self: &Arc<Self>, tasks: &Tasks, interval: Duration) {
        let changed = Arc::new(tokio::sync::Notify::new());
        let mut watching = self.watch(changed.clone()).map(|w| (w, self.dir.is_dir()));
        self.scan().await;
        let this = self.clone();
        tasks.spawn(Stage::Intake, async move {
            loop {
                match watching {
                    Some(_) => changed.notified().await,
                    None => tokio::time::sleep(interval).await,
                }
                // A file being copied in sends several events: scan once.
                tokio::time::sleep(SETTLE).await;
                // The directory came or went: watch it, or its parent.
                if watching
                    .as_ref()
                    .is_none_or(|(_, at)| *at != this.dir.is_dir())
                {
                    watching = this.watch(changed.clone()).map(|w| (w, this.dir.is_dir()));
                }
                this.scan().await;
            }
        });
    }

    /// An inotify watch on the directory, or on its parent while it does
    /// not exist; `None` (and a debug line) if neither can be had.
    fn watch(&self, changed: Arc<tokio::sync::Notify>) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher as _;
        // Watching the parent, only the directory's own name matters (the
        // parent may be a busy working directory).
        let (target, only) = if self.dir.is_dir() {
            (self.dir.clone(), None)
        } else {
            let parent = self.dir.parent().filter(|p| !p.as_os_str().is_empty());
            let name = self.dir.file_name().map(|n| n.to_os_string());
            (parent.unwrap_or(Path::new(".")).to_path_buf(), name)
        };
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let ours = match (&only, &event) {
                (Some(name), Ok(event)) => event
                    .paths
                    .iter()
                    .any(|p| p.file_name() == Some(name.as_os_str())),
                _ => true,
            };
            if ours {
                changed.notify_one();
            }
        })
        .and_then(|mut w| {
            w.watch(&target, notify::RecursiveMode::NonRecursive)
                .map(|()| w)
        });
        if let Err(e) = &watcher {
            tracing::debug!(dir = %target.display(), error = %e, "cannot watch the plugins directory; polling it");
        }
        watcher.ok()
    }

    /// Why plugins in the directory failed to load, by name.
    pub fn errors(&self) -> HashMap<String, String> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One pass over the directory.
    pub async fn scan(&self) {
        let found = match self.read_dir() {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), error = %e, "plugins directory not readable");
                HashMap::new()
            }
        };
        let previous = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (name, (hash, wasm, manifest)) in &found {
            if previous.get(name) == Some(hash) {
                continue;
            }
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone(), hash.clone());
            match self.load(name, wasm, manifest).await {
                Ok(()) => {
                    self.errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(name);
                }
                Err(e) => {
                    tracing::error!(plugin = %name, error = %e, "plugin in the plugins directory was not loaded");
                    self.errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), e);
                }
            }
        }
        for name in previous.keys().filter(|n| !found.contains_key(*n)) {
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(name);
            self.errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(name);
            if self
                .plugins
                .get(name)
                .is_some_and(|p| p.source == Source::Directory)
            {
                self.plugins.remove(name);
            }
        }
    }

    async fn load(&self, name: &str, wasm: &Path, manifest: &Path) -> Result<(), String> {
        validate_name(name)?;
        let text = std::fs::read_to_string(manifest)
            .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
        let manifest =
            Manifest::parse(&text).map_err(|e| format!("invalid manifest {name}.toml: {e}"))?;
        let kind = manifest.kind()?;
        let bytes =
            std::fs::read(wasm).map_err(|e| format!("cannot read {}: {e}", wasm.display()))?;
        let spec = Spec {
            name: name.to_string(),
            kind,
            version: manifest.version.clone(),
            limits: Some(manifest.limits.apply(kind)),
            source: Source::Directory,
            grant: manifest.backend.clone(),
            bytes,
        };
        self.plugins
            .load(spec)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Plugins in the directory: name → (hash of both files, wasm path, manifest path).
    fn read_dir(&self) -> std::io::Result<HashMap<String, (String, PathBuf, PathBuf)>> {
        let mut found = HashMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let wasm = entry?.path();
            if wasm.extension().and_then(|e| e.to_str()) != Some("wasm") {
                continue;
            }
            let Some(name) = wasm
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            let manifest = wasm.with_extension("toml");
            let mut hasher = Sha256::new();
            hasher.update(std::fs::read(&wasm)?);
            hasher.update(std::fs::read(&manifest).unwrap_or_default());
            found.insert(name, (hex::encode(hasher.finalize()), wasm, manifest));
        }
        Ok(found)
    }
}
