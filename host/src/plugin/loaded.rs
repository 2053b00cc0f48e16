//! A loaded plugin: what it is, its checked component, the instances kept
//! of it, and its call statistics; and what is asked of the registry to
//! load one.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use wasmtime::Store;

use super::backend::Served;
use super::bindings::{Filter, FilterPre, Template, TemplatePre};
use super::limits::Limits;
use super::manifest::BackendGrant;
use super::state::State;
use super::types::{Kind, PluginError};
use super::warm::Warm;

/// Where a plugin came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Embedded in the binary.
    Builtin,
    /// The watched plugins directory.
    Directory,
    /// Uploaded through the operator API.
    Upload,
}

/// A component checked against its world, ready to instantiate.
pub enum Prepared {
    /// A `payload-template`.
    Template(TemplatePre<State>),
    /// An `event-filter`, at the version it was built against.
    Filter(FilterPre<State>),
    /// A `model-backend`, instantiated, with the models it serves.
    Backend(Served),
}

/// One loaded plugin.
pub struct Plugin {
    /// Unique name.
    pub name: String,
    /// Its kind (WIT world).
    pub kind: Kind,
    /// Version, from its manifest.
    pub version: String,
    /// SHA-256 of the component bytes, hex.
    pub sha256: String,
    /// Where it came from.
    pub source: Source,
    /// Limits applied to every call.
    pub limits: Limits,
    /// Unix seconds.
    pub loaded_at: u64,
    /// Size of the component in bytes.
    pub size_bytes: usize,
    /// The checked, pre-linked component of its kind.
    pub pre: Prepared,
    pub(super) stats: Stats,
    /// Idle instances of a template or filter, by the team each served.
    pub(super) warm: Warm<Instance>,
    /// Which install it was (see [`Plugins::installs`]); 0 until installed.
    pub(super) installed: AtomicU64,
}

/// What to load.
pub struct Spec {
    /// Unique name.
    pub name: String,
    /// Expected kind.
    pub kind: Kind,
    /// Version label.
    pub version: String,
    /// Limits; `None` for the kind's defaults.
    pub limits: Option<Limits>,
    /// Where it came from.
    pub source: Source,
    /// What a model backend is granted; `None` grants nothing.
    pub grant: Option<BackendGrant>,
    /// The component.
    pub bytes: Vec<u8>,
}

/// Call counters and recent latencies.
#[derive(Default)]
pub struct Stats {
    calls: AtomicU64,
    failures: AtomicU64,
    recent_us: Mutex<Vec<u32>>,
}

const RECENT: usize = 1024;

impl Stats {
    pub(crate) fn record(&self, took: Duration, failed: bool) {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) as usize;
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        let us = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
        let mut recent = self.recent_us.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() < RECENT {
            recent.push(us);
        } else {
            recent[n % RECENT] = us;
        }
    }

    /// Median latency of recent calls, in microseconds.
    pub fn p50_us(&self) -> Option<u32> {
        let mut recent = self
            .recent_us
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if recent.is_empty() {
            return None;
        }
        recent.sort_unstable();
        Some(recent[recent.len() / 2])
    }

    /// Calls made.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Calls that trapped or hit a limit.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

impl Plugin {
    /// Which install this was: later installs have larger numbers.
    pub fn installed_as(&self) -> u64 {
        self.installed.load(Ordering::SeqCst)
    }

    /// `name@version`, as errors and logs name it.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    pub(super) fn failed(&self, what: String) -> PluginError {
        PluginError::Failed {
            plugin: self.id(),
            what,
        }
    }

    pub(super) fn reported(
        &self,
        e: super::bindings::since_v0_1_0::template::switchyard::plugin::types::PluginError,
    ) -> PluginError {
        PluginError::Reported {
            plugin: self.id(),
            code: e.code,
            message: e.message,
            position: e.position,
        }
    }

    /// Call statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

/// An instance of a template or filter plugin, with its store.
pub struct Instance {
    pub(super) store: Store<State>,
    pub(super) bound: Bound,
}

/// The exports of an instance, by kind.
pub enum Bound {
    /// A `payload-template`'s.
    Template(Template),
    /// An `event-filter`'s, at the version it was built against.
    Filter(Filter),
}
