//! A model-backend plugin: one long-lived instance, so weights load once.
//!
//! Calls are serialised on the instance. A call that traps, runs out of
//! memory or time leaves the instance in an unknown state, so it is dropped
//! and the next call starts a fresh one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::plugin::bindings::v0_1_0::model::{ModelBackend, ModelBackendPre};
use crate::plugin::engine::{Runtime, compile_cached, model_engine};
use crate::plugin::manifest::BackendGrant;
use crate::plugin::state::MemoryLimiter;
use crate::plugin::{Kind, Limits, capabilities};

use super::egress::Egress;

type GuestError = crate::plugin::bindings::v0_1_0::template::switchyard::plugin::types::PluginError;

pub use crate::plugin::bindings::v0_1_0::model::exports::switchyard::plugin::backend::{
    ChatRequest, ChatResult, FinishReason, Message, ModelInfo,
};

/// Where and how a backend runs: everything it is granted.
#[derive(Clone)]
pub struct Setup {
    /// Name and version, for errors and logs.
    pub name: String,
    /// Environment variables: the backend's configuration.
    pub env: Vec<(String, String)>,
    /// Host directories preopened at guest paths.
    pub preopens: Vec<(PathBuf, String, FsPerms)>,
    /// `wasi:http` access, if any.
    pub egress: Option<Egress>,
    /// Memory cap of the instance.
    pub memory_bytes: u64,
    /// Wall-clock limit of one call.
    pub timeout: Duration,
    /// A fresh instance per call (stateless proxies, which then run in
    /// parallel) rather than one long-lived instance (models with weights).
    pub fresh_per_call: bool,
}

impl Setup {
    /// The setup an operator's grant describes: its environment, its
    /// network allow-list with the credential read from the host's
    /// environment now, no files, and `limits`' memory cap and timeout.
    pub fn granted(name: String, grant: &BackendGrant, limits: &Limits) -> Result<Setup, String> {
        let bearer = match &grant.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                format!("the environment variable {var} (api_key_env) is not set on the host")
            })?),
            None => None,
        };
        let egress = (!grant.allow_hosts.is_empty()).then(|| Egress {
            allow: grant.allow_hosts.clone(),
            bearer,
        });
        Ok(Setup {
            name,
            env: grant.env.clone().into_iter().collect(),
            preopens: Vec::new(),
            egress,
            memory_bytes: limits.memory_bytes,
            timeout: limits.timeout(),
            fresh_per_call: grant.per_call,
        })
    }
}

/// Store data of a backend instance.
pub struct BackendState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    http: WasiHttpCtx,
    egress: Egress,
    /// Where `output.emit` sends text during a chat call.
    output: Option<mpsc::UnboundedSender<String>>,
}

impl WasiView for BackendState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for BackendState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

impl crate::plugin::bindings::v0_1_0::template::switchyard::plugin::types::Host for BackendState {}

impl crate::plugin::bindings::v0_1_0::model::switchyard::plugin::output::Host for BackendState {
    fn emit(&mut self, text: String) -> bool {
        self.output.as_ref().is_some_and(|tx| tx.send(text).is_ok())
    }
}

struct Live {
    store: Store<BackendState>,
    bindings: ModelBackend,
}

/// A loaded backend component.
pub struct Backend {
    setup: Setup,
    engine: Engine,
    pre: ModelBackendPre<BackendState>,
    live: Mutex<Option<Live>>,
}

/// A failed backend call, already worded for the client.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The backend reported an error: `upstream-failed` when a server it
    /// relies on failed, otherwise about the request.
    #[error("{message}")]
    Reported {
        /// The plugin's error code.
        code: String,
        /// What was wrong.
        message: String,
    },
    /// The backend trapped or hit a limit.
    #[error("{0}")]
    Failed(String),
}

impl Backend {
    /// Compiles (or loads from the runtime's cache) and links `bytes`.
    /// Blocking.
    ///
    /// A backend with a fresh instance per call shares the plugin runtime's
    /// pooled engine, where instantiating is cheap; a long-lived one gets an
    /// engine that allocates its large memory on demand.
    pub fn load(setup: Setup, bytes: &[u8], runtime: &Runtime) -> anyhow::Result<Arc<Backend>> {
        let engine = if setup.fresh_per_call {
            runtime.engine.clone()
        } else {
            model_engine()?
        };
        let component: Component = compile_cached(&engine, runtime.cache_dir(), bytes)?;
        check_imports(&engine, &component, setup.egress.is_some())?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        if setup.egress.is_some() {
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        }
        ModelBackend::add_to_linker::<_, HasSelf<BackendState>>(&mut linker, |s| s)?;
        let pre = linker
            .instantiate_pre(&component)
            .and_then(ModelBackendPre::new)
            .map_err(|e| {
                anyhow::anyhow!(
                    "it does not implement the model-backend world of switchyard:plugin@0.1.0: {e:#}"
                )
            })?;
        Ok(Arc::new(Backend {
            setup,
            engine,
            pre,
            live: Mutex::new(None),
        }))
    }

    /// The models the backend serves.
    pub async fn models(&self) -> Result<Vec<ModelInfo>, CallError> {
        self.call(None, async |b, s| {
            b.switchyard_plugin_backend()
                .call_list_models(s)
                .await
                .map(Ok)
        })
        .await
    }

    /// The backend's readiness. A backend busy with a request is ready.
    pub async fn health(&self) -> Result<(), CallError> {
        if !self.setup.fresh_per_call && self.live.try_lock().is_err() {
            return Ok(());
        }
        self.call(None, async |b, s| {
            b.switchyard_plugin_backend().call_health(s).await
        })
        .await
    }

    /// Generates a reply, sending text to `output` as it is made.
    pub async fn chat(
        &self,
        request: ChatRequest,
        output: mpsc::UnboundedSender<String>,
    ) -> Result<ChatResult, CallError> {
        self.call(Some(output), async move |b, s| {
            b.switchyard_plugin_backend().call_chat(s, &request).await
        })
        .await
    }

    async fn call<R>(
        &self,
        output: Option<mpsc::UnboundedSender<String>>,
        f: impl AsyncFnOnce(
            &ModelBackend,
            &mut Store<BackendState>,
        ) -> wasmtime::Result<Result<R, GuestError>>,
    ) -> Result<R, CallError> {
        let start_failed = |e: anyhow::Error| {
            CallError::Failed(format!("{}: could not start: {e:#}", self.setup.name))
        };
        if self.setup.fresh_per_call {
            let mut live = self.instantiate().await.map_err(start_failed)?;
            return self.run(&mut live, output, f).await.0;
        }
        let mut slot = self.live.lock().await;
        if slot.is_none() {
            *slot = Some(self.instantiate().await.map_err(start_failed)?);
        }
        let (result, poisoned) = self.run(slot.as_mut().expect("set above"), output, f).await;
        if poisoned {
            *slot = None;
        }
        result
    }

    /// Runs `f` under the timeout. Also says whether the instance must be
    /// dropped: after a trap or a timeout its state is unknown.
    async fn run<R>(
        &self,
        live: &mut Live,
        output: Option<mpsc::UnboundedSender<String>>,
        f: impl AsyncFnOnce(
            &ModelBackend,
            &mut Store<BackendState>,
        ) -> wasmtime::Result<Result<R, GuestError>>,
    ) -> (Result<R, CallError>, bool) {
        live.store.data_mut().output = output;
        let outcome =
            tokio::time::timeout(self.setup.timeout, f(&live.bindings, &mut live.store)).await;
        live.store.data_mut().output = None;
        let name = &self.setup.name;
        match outcome {
            Ok(Ok(Ok(value))) => (Ok(value), false),
            Ok(Ok(Err(reported))) => (
                Err(CallError::Reported {
                    code: reported.code,
                    message: reported.message,
                }),
                false,
            ),
            Ok(Err(trap)) => {
                let message = if live.store.data().limiter.exceeded {
                    format!(
                        "{name}: exceeded its memory cap of {} MiB",
                        self.setup.memory_bytes >> 20
                    )
                } else {
                    format!("{name}: trapped: {trap:#}")
                };
                (Err(CallError::Failed(message)), true)
            }
            Err(_) => (
                Err(CallError::Failed(format!(
                    "{name}: did not finish within {} ms",
                    self.setup.timeout.as_millis()
                ))),
                true,
            ),
        }
    }

    async fn instantiate(&self) -> anyhow::Result<Live> {
        let setup = &self.setup;
        let mut wasi = WasiCtx::builder();
        for (key, value) in &setup.env {
            wasi.env(key, value);
        }
        for (host, guest, perms) in &setup.preopens {
            std::fs::create_dir_all(host)?;
            wasi.preopened_dir(host, guest, *perms)?;
        }
        let wasi = wasi.build();
        let state = BackendState {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(setup.memory_bytes),
            http: WasiHttpCtx::new(),
            egress: setup.egress.clone().unwrap_or_default(),
            output: None,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        // Yield to tokio every tick: generation is long, and the host must
        // keep serving meanwhile. Time is bounded by the call's timeout.
        store.epoch_deadline_async_yield_and_update(1);
        let bindings = self.pre.instantiate_async(&mut store).await?;
        Ok(Live { store, bindings })
    }
}

/// Refuses imports outside the model-backend kind, and `wasi:http` without an
/// allow-list to use it with.
fn check_imports(engine: &Engine, component: &Component, egress: bool) -> anyhow::Result<()> {
    let imports =
        capabilities::check(engine, Kind::ModelBackend, component).map_err(anyhow::Error::msg)?;
    let http: Vec<String> = imports
        .into_iter()
        .filter(|i| i.starts_with("wasi:http/"))
        .collect();
    if !egress && !http.is_empty() {
        anyhow::bail!(
            "it imports {} but is granted no network; list the hosts it may call in allow_hosts",
            http.join(", ")
        );
    }
    Ok(())
}
