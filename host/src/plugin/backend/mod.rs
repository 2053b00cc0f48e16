//! A model-backend plugin and its instances, kept as its [`Instances`] says.
//!
//! A call that traps, runs out of memory or time leaves its instance in an
//! unknown state, so that instance is dropped and the next call starts a
//! fresh one.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::plugin::bindings::BackendPre;
use crate::plugin::bindings::since_v0_1_0::model as v1;
use crate::plugin::bindings::since_v0_1_0::model_parallel::{
    ModelBackendParallel, ModelBackendParallelPre,
};
use crate::plugin::bindings::since_v0_2_0::model as v2;
use crate::plugin::bindings::since_v0_3_0::model as v3;
use crate::plugin::bindings::since_v0_4_0::model as v4;
use crate::plugin::engine::{Runtime, compile_cached, model_engine};
use crate::plugin::failure::{failure, log_output};
use crate::plugin::manifest::BackendGrant;
use crate::plugin::state::{Pace, Preopen, State, arm, new_store};
use crate::plugin::warm::{HOST, Warm};
use crate::plugin::{Kind, Limits, LoadError, capabilities};

pub mod chat;
pub mod egress;
pub mod parallel;

use self::egress::Egress;
use self::parallel::Parallel;

type GuestError =
    crate::plugin::bindings::since_v0_1_0::template::switchyard::plugin::types::PluginError;

pub use self::chat::{
    ChatRequest, ChatResult, Endpoint, FinishReason, ForwardRequest, ForwardResult, Message,
    ModelInfo,
};

/// An error a backend reported, whichever version it was built against.
struct Reported {
    code: String,
    message: String,
    /// The upstream's HTTP status (0.3.0 backends on).
    status: Option<u16>,
}

impl From<GuestError> for Reported {
    fn from(e: GuestError) -> Self {
        Reported {
            code: e.code,
            message: e.message,
            status: None,
        }
    }
}

impl From<v2::switchyard::plugin::types::PluginError> for Reported {
    fn from(e: v2::switchyard::plugin::types::PluginError) -> Self {
        v2_error(e).into()
    }
}

/// From 0.3.0 on, an error carries the upstream's status.
macro_rules! reported_from {
    ($($v:ident),*) => {$(
        impl From<$v::switchyard::plugin::types::PluginError> for Reported {
            fn from(e: $v::switchyard::plugin::types::PluginError) -> Self {
                Reported {
                    code: e.code,
                    message: e.message,
                    status: e.status,
                }
            }
        }
    )*};
}
reported_from!(v3, v4);

/// What a backend sends while it generates (kept as JSON in the response
/// cache).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Piece {
    /// Text of the first choice.
    Text(String),
    /// A whole streamed choice, as JSON, for the client as it is
    /// (0.2.0 backends: tool-call deltas, log probabilities, other choices).
    Choice(String),
    /// A server-sent event of a forwarded reply, for the client as it is
    /// (0.3.0 backends): its `event:` name, if any, and its `data:`.
    Event(Option<String>, String),
}

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

/// Loads a backend granted `grant` and lists its models; also returns
/// the component's SHA-256. One that cannot start or lists nothing is
/// refused.
pub async fn serve(
    runtime: Arc<Runtime>,
    id: &str,
    grant: &BackendGrant,
    limits: &Limits,
    bytes: Vec<u8>,
) -> Result<(String, Served), LoadError> {
    let setup = Setup::granted(id.to_string(), grant, limits)?;
    let (sha256, backend) = tokio::task::spawn_blocking(move || {
        let backend = Backend::load(setup, &bytes, &runtime)?;
        Ok::<_, LoadError>((crate::plugin::engine::content_hash(&bytes), backend))
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

/// A backend's bindings, by the WIT version it was built against.
type Bindings = crate::plugin::bindings::Backend;

/// Where and how a backend runs: everything it is granted.
#[derive(Clone)]
pub struct Setup {
    /// Name and version, for errors and logs.
    pub name: String,
    /// Environment variables: the backend's configuration.
    pub env: Vec<(String, String)>,
    /// Host directories preopened at guest paths.
    pub preopens: Vec<Preopen>,
    /// `wasi:http` access, if any.
    pub egress: Option<Egress>,
    /// Memory cap of the instance.
    pub memory_bytes: u64,
    /// Wall-clock limit of one call.
    pub timeout: Duration,
    /// How instances are kept between calls.
    pub instances: Instances,
    /// For an [`Instances::Single`] backend that exports `worker`: keep a
    /// second instance on a thread of its own, for its `parallel` calls.
    pub second_instance: bool,
}

/// How a backend's instances are kept between calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instances {
    /// One long-lived instance that serves one call at a time, so a model
    /// loads its weights once.
    Single,
    /// A fresh instance for every call: calls run side by side and share no
    /// state.
    PerCall,
    /// Calls run side by side on warm instances, each reused only for
    /// calls of the team it first served. For the host's own stateless
    /// upstream proxy, whose requests spent a tenth of their time being
    /// instantiated and torn down.
    PerTeam,
}

/// Warm instances a [`Instances::PerTeam`] backend keeps, across all teams.
const MAX_IDLE: usize = 64;

impl Setup {
    /// The setup an operator's grant describes: its environment, its
    /// network allow-list with the credential read from the host's
    /// environment now, no files, and `limits`' memory cap and timeout.
    pub fn granted(
        name: String,
        grant: &BackendGrant,
        limits: &Limits,
    ) -> Result<Setup, LoadError> {
        let bearer = match &grant.api_key_env {
            Some(var) => {
                Some(std::env::var(var).map_err(|_| LoadError::MissingCredential(var.clone()))?)
            }
            None => None,
        };
        let proxy = match &grant.proxy {
            None => None,
            Some(url) => Some(url.parse().map_err(|_| LoadError::BadProxy(url.clone()))?),
        };
        let egress = (!grant.allow_hosts.is_empty()).then(|| Egress {
            allow: grant.allow_hosts.clone(),
            bearer,
            proxy,
        });
        Ok(Setup {
            name,
            env: grant.env.clone().into_iter().collect(),
            preopens: Vec::new(),
            egress,
            memory_bytes: limits.memory_bytes,
            timeout: limits.timeout(),
            instances: if grant.per_call {
                Instances::PerCall
            } else {
                Instances::Single
            },
            // Twice the memory: for the host's own model only, for now.
            second_instance: false,
        })
    }
}

/// Store data of a backend instance: every kind's, and `wasi:http`.
pub struct BackendState {
    base: State,
    http: WasiHttpCtx,
    egress: Egress,
    /// Where `output` sends what is generated during a chat call.
    output: Option<mpsc::UnboundedSender<Piece>>,
    /// Pieces sent during this call.
    sent: u32,
    /// The second instance, for `parallel` calls.
    parallel: Option<Parallel>,
    /// In a second instance, during a task: where `parallel.send` goes.
    parts: Option<parallel::Parts>,
}

impl AsMut<State> for BackendState {
    fn as_mut(&mut self) -> &mut State {
        &mut self.base
    }
}

impl WasiView for BackendState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.base.ctx()
    }
}

impl WasiHttpView for BackendState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.base.table,
            hooks: &mut self.egress,
        }
    }
}

impl crate::plugin::bindings::since_v0_1_0::template::switchyard::plugin::types::Host
    for BackendState
{
}

impl BackendState {
    fn send(&mut self, piece: Piece) -> bool {
        self.sent = self.sent.saturating_add(1);
        self.output
            .as_ref()
            .is_some_and(|tx| tx.send(piece).is_ok())
    }
}

impl v1::switchyard::plugin::output::Host for BackendState {
    fn emit(&mut self, text: String) -> bool {
        self.send(Piece::Text(text))
    }
}

impl v2::switchyard::plugin::types::Host for BackendState {}

/// From 0.3.0 on, `output` streams text, whole choices and events.
macro_rules! output_host {
    ($($v:ident),*) => {$(
        impl $v::switchyard::plugin::types::Host for BackendState {}

        impl $v::switchyard::plugin::output::Host for BackendState {
            fn emit(&mut self, text: String) -> bool {
                self.send(Piece::Text(text))
            }

            fn emit_choice(&mut self, choice: String) -> bool {
                self.send(Piece::Choice(choice))
            }

            fn emit_event(&mut self, event: Option<String>, data: String) -> bool {
                self.send(Piece::Event(event, data))
            }
        }
    )*};
}
output_host!(v3, v4);

impl v2::switchyard::plugin::output::Host for BackendState {
    fn emit(&mut self, text: String) -> bool {
        self.send(Piece::Text(text))
    }

    fn emit_choice(&mut self, choice: String) -> bool {
        self.send(Piece::Choice(choice))
    }
}

impl crate::plugin::bindings::since_v0_1_0::model_parallel::switchyard::plugin::parallel::Host
    for BackendState
{
    async fn start(&mut self, task: Vec<u8>) -> bool {
        self.parallel.as_mut().is_some_and(|p| p.start(task))
    }

    async fn finish(&mut self) -> Result<Vec<u8>, String> {
        match &mut self.parallel {
            Some(p) => p.finish().await,
            None => Err(NO_SECOND_INSTANCE.into()),
        }
    }

    async fn receive(&mut self) -> Result<Vec<u8>, String> {
        match &mut self.parallel {
            Some(p) => p.receive().await,
            None => Err(NO_SECOND_INSTANCE.into()),
        }
    }

    async fn send(&mut self, part: Vec<u8>) -> bool {
        self.parts.as_ref().is_some_and(|tx| tx.send(part).is_ok())
    }
}

const NO_SECOND_INSTANCE: &str = "this instance has no second instance: start returned false";

/// A backend's second instance, as its thread runs it.
struct SecondInstance {
    store: Store<BackendState>,
    bindings: ModelBackendParallel,
    name: String,
    timeout: Duration,
}

impl parallel::Worker for SecondInstance {
    async fn run(
        &mut self,
        task: Vec<u8>,
        parts: parallel::Parts,
    ) -> Result<parallel::Reply, String> {
        arm(&mut self.store, Pace::Unbounded);
        self.store.data_mut().parts = Some(parts);
        let worker = self.bindings.switchyard_plugin_worker();
        let _ticking = crate::plugin::engine::Ticking::start();
        let run = tokio::time::timeout(self.timeout, worker.call_run(&mut self.store, &task)).await;
        // Dropping the sender tells `receive` that no more parts come.
        self.store.data_mut().parts = None;
        let name = &self.name;
        match run {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(trap)) => Err(format!("{name}: the second instance trapped: {trap:#}")),
            Err(_) => Err(format!(
                "{name}: the second instance did not finish a task within {} ms",
                self.timeout.as_millis()
            )),
        }
    }
}

struct BackendInstance {
    store: Store<BackendState>,
    bindings: Bindings,
}

/// A loaded backend component.
pub struct Backend {
    setup: Setup,
    engine: Engine,
    pre: BackendPre<BackendState>,
    /// The same, for a backend that exports `worker` and is given a second
    /// instance.
    pre_parallel: Option<ModelBackendParallelPre<BackendState>>,
    /// The instance of a [`Instances::Single`] backend.
    live: Mutex<Option<BackendInstance>>,
    /// Idle instances of a [`Instances::PerTeam`] backend with the team
    /// each serves, the most recently used last.
    idle: Warm<BackendInstance>,
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
        /// The HTTP status the upstream answered, when a 0.3.0 backend
        /// says.
        status: Option<u16>,
    },
    /// The backend trapped or hit a limit.
    #[error("{0}")]
    Failed(String),
    /// The backend did not finish within its time limit (an upstream that
    /// hangs, a model that takes too long).
    #[error("{0}")]
    TimedOut(String),
    /// Nobody read the reply any more (a client that hung up, a stopped
    /// chat), so the call was stopped after it had sent `pieces`.
    #[error("{message}")]
    Left {
        /// What happened.
        message: String,
        /// Pieces (text, choices, events) sent before it stopped: what was
        /// generated, for billing.
        pieces: u32,
    },
}

impl Backend {
    /// Compiles (or loads from the runtime's cache) and links `bytes`.
    /// Blocking.
    ///
    /// A backend with many instances shares the plugin runtime's pooled
    /// engine, where instantiating is cheap; a long-lived one gets an engine
    /// that allocates its large memory on demand.
    pub fn load(setup: Setup, bytes: &[u8], runtime: &Runtime) -> Result<Arc<Backend>, LoadError> {
        let host = |e: anyhow::Error| LoadError::Host(format!("{e:#}"));
        let engine = match setup.instances {
            Instances::Single => model_engine().map_err(host)?,
            Instances::PerCall | Instances::PerTeam => runtime.engine.clone(),
        };
        check_imports(bytes, setup.egress.is_some())?;
        let component: Component = compile_cached(&engine, runtime.cache_dir(), bytes)
            .map_err(|e| LoadError::NotAComponent(format!("{e:#}")))?;
        let linker = linker(&engine, setup.egress.is_some()).map_err(host)?;
        let not_a_backend = |e: wasmtime::Error| LoadError::WrongWorld {
            kind: Kind::ModelBackend,
            versions: "0.4.0, @0.3.0, @0.2.0 or @0.1.0",
            detail: format!("{e:#}"),
        };
        let instance_pre = linker.instantiate_pre(&component).map_err(not_a_backend)?;
        let exports = |version: &str| {
            let name = format!("switchyard:plugin/backend@{version}");
            component.get_export_index(None, &name).is_some()
        };
        let pre = if exports("0.4.0") {
            BackendPre::V0_4_0(
                v4::ModelBackendPre::new(instance_pre.clone()).map_err(not_a_backend)?,
            )
        } else if exports("0.3.0") {
            BackendPre::V0_3_0(
                v3::ModelBackendPre::new(instance_pre.clone()).map_err(not_a_backend)?,
            )
        } else if exports("0.2.0") {
            BackendPre::V0_2_0(
                v2::ModelBackendPre::new(instance_pre.clone()).map_err(not_a_backend)?,
            )
        } else {
            BackendPre::V0_1_0(
                v1::ModelBackendPre::new(instance_pre.clone()).map_err(not_a_backend)?,
            )
        };
        let exports_worker = component
            .get_export_index(None, "switchyard:plugin/worker@0.1.0")
            .is_some();
        let pre_parallel =
            (setup.instances == Instances::Single && setup.second_instance && exports_worker)
                .then(|| ModelBackendParallelPre::new(instance_pre))
                .transpose()
                .map_err(not_a_backend)?;
        Ok(Arc::new(Backend {
            setup,
            engine,
            pre,
            pre_parallel,
            live: Mutex::new(None),
            idle: Warm::new(MAX_IDLE),
        }))
    }

    /// Whether it calls out to an upstream (it was granted hosts to call):
    /// the work happens elsewhere.
    pub fn is_proxy(&self) -> bool {
        self.setup.egress.is_some()
    }

    /// Its name and version, for logs and metrics.
    pub fn name(&self) -> &str {
        &self.setup.name
    }

    /// Whether it takes the OpenAI fields the host passes through (tools,
    /// response formats, log probabilities, several choices): built against
    /// 0.2.0 or later.
    pub fn passes_through(&self) -> bool {
        !matches!(self.pre, BackendPre::V0_1_0(_))
    }

    /// Whether it has `forward`, for the endpoints besides chat: built
    /// against 0.3.0 or later.
    pub fn forwards(&self) -> bool {
        matches!(self.pre, BackendPre::V0_3_0(_) | BackendPre::V0_4_0(_))
    }

    /// The models the backend serves.
    pub async fn models(&self) -> Result<Vec<ModelInfo>, CallError> {
        self.call(HOST, None, async |b, s| match b {
            Bindings::V0_1_0(b) => {
                let models = b.switchyard_plugin_backend().call_list_models(s).await?;
                Ok(Ok(models.into_iter().map(ModelInfo::from).collect()))
            }
            Bindings::V0_2_0(b) => {
                let models = b.switchyard_plugin_backend().call_list_models(s).await?;
                Ok(Ok(models.into_iter().map(ModelInfo::from).collect()))
            }
            Bindings::V0_3_0(b) => {
                let models = b.switchyard_plugin_backend().call_list_models(s).await?;
                Ok(Ok(models.into_iter().map(ModelInfo::from).collect()))
            }
            Bindings::V0_4_0(b) => {
                let models = b.switchyard_plugin_backend().call_list_models(s).await?;
                Ok(Ok(models.into_iter().map(ModelInfo::from).collect()))
            }
        })
        .await
    }

    /// The backend's readiness. A backend busy with a request is ready.
    pub async fn health(&self) -> Result<(), CallError> {
        if self.setup.instances == Instances::Single && self.live.try_lock().is_err() {
            return Ok(());
        }
        self.call(HOST, None, async |b, s| match b {
            Bindings::V0_1_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_health(s)
                .await?
                .map_err(Reported::from)),
            Bindings::V0_2_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_health(s)
                .await?
                .map_err(Reported::from)),
            Bindings::V0_3_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_health(s)
                .await?
                .map_err(Reported::from)),
            Bindings::V0_4_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_health(s)
                .await?
                .map_err(Reported::from)),
        })
        .await
    }

    /// Generates a reply for `team`'s request, sending text to `output` as
    /// it is made.
    pub async fn chat(
        &self,
        team: &str,
        request: ChatRequest,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ChatResult, CallError> {
        self.call(team, Some(output), async move |b, s| match b {
            Bindings::V0_4_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_chat(s, &request.into())
                .await?
                .map(ChatResult::from)
                .map_err(Reported::from)),
            Bindings::V0_3_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_chat(s, &request.into())
                .await?
                .map(ChatResult::from)
                .map_err(Reported::from)),
            Bindings::V0_2_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_chat(s, &request.into())
                .await?
                .map(ChatResult::from)
                .map_err(Reported::from)),
            Bindings::V0_1_0(b) => {
                // The host refused what 0.1.0 cannot carry (`extra`) before.
                let result = b
                    .switchyard_plugin_backend()
                    .call_chat(s, &request.into())
                    .await?;
                Ok(result.map(ChatResult::from).map_err(Reported::from))
            }
        })
        .await
    }

    /// Serves `team`'s request to an endpoint besides chat, sending a
    /// streamed reply's events to `output`. A backend built before 0.3.0
    /// has no such call: the answer is `unsupported-endpoint`.
    pub async fn forward(
        &self,
        team: &str,
        request: ForwardRequest,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ForwardResult, CallError> {
        let unsupported = Reported {
            code: "unsupported-endpoint".into(),
            message: format!(
                "the model '{}' does not serve /v1/{}: its backend {} was built before switchyard:plugin@0.3.0",
                request.model,
                request.endpoint.path(),
                self.name()
            ),
            status: None,
        };
        self.call(team, Some(output), async move |b, s| match b {
            Bindings::V0_4_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_forward(s, &request.into())
                .await?
                .map(ForwardResult::from)
                .map_err(Reported::from)),
            Bindings::V0_3_0(b) => Ok(b
                .switchyard_plugin_backend()
                .call_forward(s, &request.into())
                .await?
                .map(ForwardResult::from)
                .map_err(Reported::from)),
            Bindings::V0_1_0(_) | Bindings::V0_2_0(_) => Ok(Err(unsupported)),
        })
        .await
    }

    async fn call<R>(
        &self,
        team: &str,
        output: Option<mpsc::UnboundedSender<Piece>>,
        f: impl AsyncFnOnce(
            &Bindings,
            &mut Store<BackendState>,
        ) -> wasmtime::Result<Result<R, Reported>>,
    ) -> Result<R, CallError> {
        let start_failed = |e: anyhow::Error| {
            CallError::Failed(format!("{}: could not start: {e:#}", self.setup.name))
        };
        match self.setup.instances {
            Instances::PerCall => {
                let mut live = self.instantiate().await.map_err(start_failed)?;
                self.run(&mut live, output, f).await.0
            }
            Instances::PerTeam => {
                let (mut live, calls) = match self.idle.take(team) {
                    Some(kept) => kept,
                    None => (self.instantiate().await.map_err(start_failed)?, 0),
                };
                let (result, poisoned) = self.run(&mut live, output, f).await;
                if !poisoned {
                    self.idle.keep(team, live, calls + 1);
                }
                result
            }
            Instances::Single => {
                let mut slot = self.live.lock().await;
                if slot.is_none() {
                    *slot = Some(self.instantiate().await.map_err(start_failed)?);
                }
                let (result, poisoned) =
                    self.run(slot.as_mut().expect("set above"), output, f).await;
                if poisoned {
                    *slot = None;
                }
                result
            }
        }
    }

    /// Runs `f` under the timeout. Also says whether the instance must be
    /// dropped: after a trap or a timeout its state is unknown.
    async fn run<R>(
        &self,
        live: &mut BackendInstance,
        output: Option<mpsc::UnboundedSender<Piece>>,
        f: impl AsyncFnOnce(
            &Bindings,
            &mut Store<BackendState>,
        ) -> wasmtime::Result<Result<R, Reported>>,
    ) -> (Result<R, CallError>, bool) {
        // A stateless instance is dropped as soon as nobody reads its reply
        // (a client that hung up, a stopped chat): one blocked on its
        // upstream would otherwise hold it until the timeout. A model's
        // single instance stops by itself at its next emit, which is cheaper
        // than loading it again.
        let reader = output
            .clone()
            .filter(|_| self.setup.instances != Instances::Single);
        live.store.data_mut().output = output;
        live.store.data_mut().sent = 0;
        arm(&mut live.store, Pace::Unbounded);
        let ticking = crate::plugin::engine::Ticking::start();
        let call = tokio::time::timeout(self.setup.timeout, f(&live.bindings, &mut live.store));
        let outcome = match reader {
            Some(reader) => tokio::select! {
                outcome = call => Some(outcome),
                () = reader.closed() => None,
            },
            None => Some(call.await),
        };
        drop(ticking);
        live.store.data_mut().output = None;
        let name = &self.setup.name;
        let stderr = log_output(name, &live.store.data().base);
        let Some(outcome) = outcome else {
            let message = format!("{name}: stopped, as nobody reads the reply any more");
            let pieces = live.store.data().sent;
            return (Err(CallError::Left { message, pieces }), true);
        };
        self.judge(outcome, live, &stderr)
    }

    /// What a finished call comes to, and whether its instance must go.
    fn judge<R>(
        &self,
        outcome: std::result::Result<
            wasmtime::Result<Result<R, Reported>>,
            tokio::time::error::Elapsed,
        >,
        live: &BackendInstance,
        stderr: &[u8],
    ) -> (Result<R, CallError>, bool) {
        let name = &self.setup.name;
        match outcome {
            Ok(Ok(Ok(value))) => (Ok(value), false),
            Ok(Ok(Err(reported))) => (
                Err(CallError::Reported {
                    code: reported.code,
                    message: reported.message,
                    status: reported.status,
                }),
                false,
            ),
            Ok(Err(trap)) => {
                // A backend yields at every tick, so only memory and time bound it.
                let limits = Limits {
                    memory_bytes: self.setup.memory_bytes,
                    cpu_ms: 0,
                    timeout_ms: self.setup.timeout.as_millis() as u64,
                };
                let what = failure(&trap, &live.store.data().base, &limits, stderr);
                (Err(CallError::Failed(format!("{name}: {what}"))), true)
            }
            Err(_) => (
                Err(CallError::TimedOut(format!(
                    "{name}: did not finish within {} ms",
                    self.setup.timeout.as_millis()
                ))),
                true,
            ),
        }
    }

    /// A fresh instance, with its second instance if it gets one.
    async fn instantiate(&self) -> anyhow::Result<BackendInstance> {
        // Start-up runs guest code too: let it yield while it loads.
        let _ticking = crate::plugin::engine::Ticking::start();
        let mut store = self.store()?;
        if let Some(pre) = &self.pre_parallel {
            let mut second = self.store()?;
            let bindings = pre.instantiate_async(&mut second).await?;
            let worker = SecondInstance {
                store: second,
                bindings,
                name: self.setup.name.clone(),
                timeout: self.setup.timeout,
            };
            store.data_mut().parallel = Some(Parallel::spawn(&self.setup.name, worker));
        }
        let bindings = self.pre.instantiate(&mut store).await?;
        Ok(BackendInstance { store, bindings })
    }

    /// A store for an instance, with the setup's grants and limits.
    fn store(&self) -> anyhow::Result<Store<BackendState>> {
        let setup = &self.setup;
        let state = BackendState {
            base: State::granted(setup.memory_bytes, &setup.env, &setup.preopens)?,
            http: WasiHttpCtx::new(),
            egress: setup.egress.clone().unwrap_or_default(),
            output: None,
            sent: 0,
            parallel: None,
            parts: None,
        };
        Ok(new_store(&self.engine, state, Pace::Unbounded))
    }
}

/// A linker with what backends may import: WASI, our interfaces, and
/// `wasi:http` when they may use it.
fn linker(engine: &Engine, http: bool) -> anyhow::Result<Linker<BackendState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    if http {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    }
    v1::ModelBackend::add_to_linker::<_, HasSelf<BackendState>>(&mut linker, |s| s)?;
    v2::ModelBackend::add_to_linker::<_, HasSelf<BackendState>>(&mut linker, |s| s)?;
    v3::ModelBackend::add_to_linker::<_, HasSelf<BackendState>>(&mut linker, |s| s)?;
    v4::ModelBackend::add_to_linker::<_, HasSelf<BackendState>>(&mut linker, |s| s)?;
    crate::plugin::bindings::since_v0_1_0::model_parallel::switchyard::plugin::parallel::add_to_linker::<
        _,
        HasSelf<BackendState>,
    >(&mut linker, |s| s)?;
    Ok(linker)
}

/// A 0.2.0 plugin's error (a backend's or a filter's) as the host's one
/// error type.
pub(crate) fn v2_error(e: v2::switchyard::plugin::types::PluginError) -> GuestError {
    GuestError {
        code: e.code,
        message: e.message,
        position: e.position,
    }
}

/// Refuses imports outside the model-backend kind, and `wasi:http` without an
/// allow-list to use it with.
fn check_imports(bytes: &[u8], egress: bool) -> Result<(), LoadError> {
    let imports = capabilities::check(Kind::ModelBackend, bytes)?;
    let http: Vec<String> = imports
        .into_iter()
        .filter(|i| i.starts_with("wasi:http/"))
        .collect();
    if !egress && !http.is_empty() {
        return Err(LoadError::NoNetworkGranted(http));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `remember` fixture, whose reply is every message its instance
    /// has seen, and its compile cache, which must outlive it.
    fn remember(instances: Instances) -> (Arc<Backend>, tempfile::TempDir) {
        fixture("remember", instances, false)
    }

    /// Fixture `name`, loaded as `instances` says, and its compile cache.
    fn fixture(
        name: &str,
        instances: Instances,
        second_instance: bool,
    ) -> (Arc<Backend>, tempfile::TempDir) {
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(cache.path()).unwrap();
        let path = format!("{}/{name}.wasm", switchyard_components::DIR);
        let bytes = std::fs::read(path).unwrap();
        let setup = Setup {
            name: format!("{name}@0.1.0"),
            env: Vec::new(),
            preopens: Vec::new(),
            egress: None,
            memory_bytes: 64 << 20,
            timeout: Duration::from_secs(10),
            instances,
            second_instance,
        };
        (Backend::load(setup, &bytes, &runtime).unwrap(), cache)
    }

    /// A request of one user message, `text`.
    fn say(text: &str) -> ChatRequest {
        ChatRequest {
            model: String::new(),
            messages: vec![Message {
                role: "user".into(),
                content: text.into(),
                extra: None,
            }],
            max_tokens: None,
            temperature: None,
            top_p: None,
            seed: None,
            stop: Vec::new(),
            streamed: false,
            extra: None,
        }
    }

    async fn reply(backend: &Backend, team: &str, text: &str) -> String {
        let (tx, mut rx) = mpsc::unbounded_channel();
        backend.chat(team, say(text), tx).await.unwrap();
        match rx.recv().await.unwrap() {
            Piece::Text(text) => text,
            other => panic!("a 0.1.0 backend sent {other:?}"),
        }
    }

    #[test]
    fn a_grant_naming_an_unset_credential_is_refused_by_name() {
        let grant = BackendGrant {
            api_key_env: Some("SWITCHYARD_TEST_NEVER_SET".into()),
            allow_hosts: vec!["127.0.0.1:9".into()],
            ..BackendGrant::default()
        };
        let limits = Limits::default_for(Kind::ModelBackend);
        let Err(err) = Setup::granted("b@1".into(), &grant, &limits) else {
            panic!("an unset credential must be refused");
        };
        assert_eq!(
            err,
            LoadError::MissingCredential("SWITCHYARD_TEST_NEVER_SET".into())
        );
    }

    #[test]
    fn a_backend_importing_http_without_hosts_is_refused_before_compiling() {
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(cache.path()).unwrap();
        let path = format!("{}/model_openai.wasm", switchyard_components::DIR);
        let setup = Setup {
            egress: None,
            ..Setup::granted(
                "model-openai@1".into(),
                &BackendGrant::default(),
                &Limits::default_for(Kind::ModelBackend),
            )
            .unwrap()
        };
        let Err(err) = Backend::load(setup, &std::fs::read(path).unwrap(), &runtime) else {
            panic!("a backend that imports wasi:http needs granted hosts");
        };
        assert!(
            matches!(&err, LoadError::NoNetworkGranted(i) if !i.is_empty()),
            "{err:?}"
        );
        assert_eq!(
            std::fs::read_dir(cache.path()).unwrap().count(),
            0,
            "nothing compiled"
        );
    }

    #[tokio::test]
    async fn a_trap_reports_the_end_of_the_backends_stderr() {
        let (backend, _cache) = remember(Instances::PerTeam);
        let (tx, _rx) = mpsc::unbounded_channel();
        let Err(CallError::Failed(message)) = backend.chat("red", say("panic"), tx).await else {
            panic!("the call must fail");
        };
        assert!(message.starts_with("remember@0.1.0: trapped"), "{message}");
        assert!(message.contains("asked to panic"), "{message}");
        // The failed instance was dropped; the team's next call starts afresh.
        assert_eq!(reply(&backend, "red", "one").await, "one");
    }

    #[tokio::test]
    async fn per_team_instances_serve_only_their_own_team() {
        let (backend, _cache) = remember(Instances::PerTeam);
        assert_eq!(reply(&backend, "red", "one").await, "one");
        assert_eq!(
            reply(&backend, "red", "two").await,
            "one two",
            "red's instance is kept for red"
        );
        assert_eq!(
            reply(&backend, "blue", "three").await,
            "three",
            "blue must not get red's instance"
        );
        assert_eq!(reply(&backend, "red", "four").await, "one two four");
    }

    #[tokio::test]
    async fn per_call_instances_share_nothing() {
        let (backend, _cache) = remember(Instances::PerCall);
        assert_eq!(reply(&backend, "red", "one").await, "one");
        assert_eq!(reply(&backend, "red", "two").await, "two");
    }

    /// The `halves` fixture's reply to `text` once its second instance is
    /// ready (it gets ready in the background), split into the first
    /// instance's id and the rest.
    async fn halves_reply(backend: &Backend, text: &str) -> (String, String) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let reply = reply(backend, "red", text).await;
            let (main, theirs) = reply.split_once("; ").unwrap();
            if theirs != "no second instance" {
                return (main.to_string(), theirs.to_string());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second instance was not ready within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_second_instance_does_the_work_handed_to_it() {
        let (backend, _cache) = fixture("halves", Instances::Single, true);
        let (main, theirs) = halves_reply(&backend, "sum").await;
        let (done, by) = theirs.split_once(" by ").unwrap();
        assert_eq!(done, "sum done", "{theirs}");
        assert_ne!(format!("main {by}"), main, "done by another instance");
        let (again, theirs) = halves_reply(&backend, "more").await;
        assert_eq!(again, main, "the first instance is kept");
        assert_eq!(theirs, format!("more done by {by}"), "and so is the second");
    }

    #[tokio::test]
    async fn parts_a_second_instance_sends_come_in_order_before_its_result() {
        let (backend, _cache) = fixture("halves", Instances::Single, true);
        let (_, theirs) = halves_reply(&backend, "parts 3").await;
        let rest = theirs.strip_prefix("part 0, part 1, part 2, parts 3 done by ");
        assert!(rest.is_some(), "{theirs}");
        let (_, theirs) = halves_reply(&backend, "sum").await;
        assert!(
            theirs.starts_with("sum done by "),
            "none from a task that sends none"
        );
        let (_, theirs) = halves_reply(&backend, "parts 2 trap").await;
        assert!(
            theirs.starts_with("part 0, part 1, failed: halves@0.1.0: the second instance trapped"),
            "parts sent before a trap still arrive: {theirs}"
        );
    }

    #[tokio::test]
    async fn a_second_instance_that_traps_leaves_the_first_working_alone() {
        let (backend, _cache) = fixture("halves", Instances::Single, true);
        let (main, theirs) = halves_reply(&backend, "trap").await;
        assert!(
            theirs.starts_with("failed: halves@0.1.0: the second instance trapped"),
            "{theirs}"
        );
        let reply = reply(&backend, "red", "sum").await;
        let (again, theirs) = reply.split_once("; ").unwrap();
        assert_eq!(again, main, "the first instance is not harmed");
        assert_eq!(theirs, "no second instance");
    }

    #[tokio::test]
    async fn only_a_single_backend_given_the_setting_gets_a_second_instance() {
        for (instances, second) in [
            (Instances::Single, false),
            (Instances::PerTeam, true),
            (Instances::PerCall, true),
        ] {
            let (backend, _cache) = fixture("halves", instances, second);
            tokio::time::sleep(Duration::from_millis(200)).await;
            let reply = reply(&backend, "red", "sum").await;
            assert!(
                reply.ends_with("; no second instance"),
                "{instances:?}: {reply}"
            );
        }
    }
}
