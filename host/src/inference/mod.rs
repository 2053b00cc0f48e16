//! Inference: model backends behind the OpenAI-compatible API.
//!
//! - [`backend`]: the one trait inference calls backends through, and the
//!   request and response types it speaks. The backends themselves
//!   (wasmtime instances, egress, second instances) are plugins:
//!   [`crate::plugin::backend`].
//! - [`ask`]: chat and the other endpoints, as one kind of job.
//! - [`cache`]: exact-match answers kept for a while.
//! - [`wire`]: the chat-completions request and response formats.
//! - [`text`]: completions and responses served by a model that only chats.
//! - [`usage`]: token accounting per team, project, key, model and day.
//! - [`limits`]: rate limits and budgets of keys and projects.
//! - [`prices`]: what answers cost in USD.
//! - [`routes`]: model ids served by several deployments, with retries,
//!   cooldowns and fallbacks.
//! - [`pull`]: fetching the default model.
//!
//! Every request runs as a job on the inference queue (bounded; full
//! means 429), and at most `per_project_concurrency` requests of one project
//! are running or queued at once.

pub mod ask;
pub mod backend;
pub mod cache;
pub mod limits;
pub mod prices;
pub mod pull;
pub mod routes;
pub mod text;
pub mod usage;
pub mod wire;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use self::ask::Ask;
use self::backend::{
    CallError, ChatRequest, ChatResult, ForwardRequest, ForwardResult, ModelBackend, ModelInfo,
    Piece,
};
use self::usage::Account;
use crate::plugin::{Backend, Instances, Setup};
use wasmtime_wasi::FsPerms;

use crate::cfg::{Config, UpstreamConfig};
use crate::error::{Error, Result};
use crate::plugin::BackendGrant;
use crate::plugin::Runtime;
use crate::plugin::{Kind, Limits, Plugin, Plugins};
use crate::queue::WorkQueue;
use crate::store::Store;
use crate::traces;
use opentelemetry::KeyValue;
use opentelemetry::context::FutureExt;

/// The inference service.
pub struct Inference {
    backends: Vec<Route>,
    /// Model id → the backend serving it.
    routes: HashMap<String, Route>,
    /// Backends that failed to load, with why: for the system check and for
    /// requests naming their models.
    missing: Vec<(String, String)>,
    models: Vec<ModelInfo>,
    queue: WorkQueue,
    store: Store,
    per_project: usize,
    /// The same for proxy backends.
    upstream_per_project: usize,
    running: Arc<Mutex<HashMap<String, usize>>>,
    /// Where operators' backend plugins are loaded.
    plugins: Arc<Plugins>,
    limiter: Arc<limits::Limiter>,
    router: Arc<routes::Routes>,
    prices: Arc<prices::Prices>,
    cache: Arc<cache::Cache>,
}

/// One way to serve a request: a backend, its plugin if it is one, and
/// the route's deployment it stands for.
struct Attempt {
    backend: Route,
    plugin: Option<Arc<Plugin>>,
    deployment: Option<routes::Deployment>,
}

/// A backend as inference holds it.
type Route = Arc<dyn ModelBackend>;

/// A request under way: what is generated as it comes, then the outcome
/// (a [`ChatResult`] or a [`ForwardResult`]).
pub struct Running<T = ChatResult> {
    /// Generated text (whole choices, events). Closes when generation
    /// ends; dropping it stops generation.
    pub output: mpsc::UnboundedReceiver<Piece>,
    /// How it ended.
    pub done: oneshot::Receiver<Result<T>>,
    /// The rate-limit headers its answer carries.
    pub headers: axum::http::HeaderMap,
    /// The route's deployment serving it, once one answers.
    pub deployment: Arc<std::sync::OnceLock<String>>,
}

/// The backends the configuration asks for: the embedded model and each
/// upstream, by model id, with how to set each up and its component.
fn built_in_backends(cfg: &Config) -> Vec<(String, Setup, &'static [u8])> {
    let embedded = crate::plugin::components();
    let mut specs = Vec::new();
    if cfg.inference.embedded {
        let id = cfg.inference.model_id.clone();
        specs.push((id, smollm(cfg), embedded.model_smollm));
    }
    for upstream in &cfg.inference.upstreams {
        let via = upstream
            .via_proxy
            .then(|| cfg.delivery.proxy.clone())
            .flatten();
        match proxy(upstream, via) {
            Ok(setup) => specs.push((upstream.name.clone(), setup, embedded.model_openai)),
            Err(e) => tracing::error!(upstream = %upstream.name, "upstream not served: {e}"),
        }
    }
    specs
}

impl Inference {
    /// Loads the embedded backend; fetches the model first if it is missing
    /// and `auto_pull` is on. A missing model leaves inference unavailable,
    /// with a message saying what to run, and the rest of the host serving.
    pub async fn start(
        cfg: &Config,
        store: Store,
        queue: WorkQueue,
        plugins: Arc<Plugins>,
        tasks: &crate::tasks::Tasks,
    ) -> Inference {
        let (store_for_limits, store_for_cache) = (store.clone(), store.clone());
        let mut inference = Inference {
            backends: Vec::new(),
            routes: HashMap::new(),
            missing: Vec::new(),
            models: Vec::new(),
            queue,
            store,
            per_project: cfg.inference.per_project_concurrency.max(1),
            upstream_per_project: cfg.inference.upstream_per_project_concurrency.max(1),
            running: Arc::default(),
            plugins,
            limiter: limits::Limiter::start(store_for_limits, tasks),
            router: Arc::new(routes::Routes::new(&cfg.inference.routes)),
            prices: Arc::new(prices::Prices::new(&cfg.inference)),
            cache: cache::Cache::start(&cfg.inference, store_for_cache, tasks),
        };
        for (id, setup, wasm) in built_in_backends(cfg) {
            match inference.load_built_in(cfg, setup, wasm).await {
                Ok((backend, models)) => inference.add(backend, models),
                Err(why) => {
                    tracing::error!("inference backend for {id} is unavailable: {why}");
                    inference.missing.push((id, why));
                }
            }
        }
        let routed: Vec<ModelInfo> = inference
            .router
            .models()
            .filter(|id| !inference.routes.contains_key(*id))
            .map(|id| ModelInfo {
                id: id.to_string(),
                owned_by: "switchyard".into(),
                created: crate::ids::now(),
            })
            .collect();
        inference.models.extend(routed);
        inference.warn_of_unserved_deployments(&cfg.inference.routes);
        let configured = cfg.inference.upstreams.iter().flat_map(|u| &u.models);
        let ids = configured
            .map(|m| m.split('=').next().unwrap_or(m).to_string())
            .chain([cfg.inference.model_id.clone()])
            .chain(inference.routes.keys().cloned());
        inference.plugins.reserve_models(ids);
        let free = cfg
            .inference
            .embedded
            .then_some(cfg.inference.model_id.as_str());
        inference.warn_of_unpriced_models(free);
        crate::telemetry::inference_models_served(inference.models.iter().map(|m| m.id.as_str()));
        inference
    }

    /// Logs the models served without a price: their answers cost nothing
    /// in usage and USD budgets. The embedded model (`free`) runs here and
    /// costs nothing, so it needs no price.
    fn warn_of_unpriced_models(&self, free: Option<&str>) {
        let models = self.models();
        let priced = models
            .iter()
            .map(|m| m.id.as_str())
            .filter(|id| Some(*id) != free);
        let unpriced = self.prices.unpriced(priced);
        if !unpriced.is_empty() {
            tracing::warn!(models = %unpriced.join(", "), "these models have no [[inference.prices]] entry: their answers count no cost, and USD budgets do not limit them");
        }
    }

    /// Loads a built-in backend (off the async workers: it compiles, and
    /// may fetch the model) and lists its models.
    async fn load_built_in(
        &self,
        cfg: &Config,
        setup: Setup,
        wasm: &'static [u8],
    ) -> std::result::Result<(Arc<Backend>, Vec<ModelInfo>), String> {
        let embedded = crate::plugin::components();
        let model_file =
            std::ptr::eq(wasm, embedded.model_smollm).then(|| cfg.inference.model_path.clone());
        let (plugins, auto_pull) = (self.plugins.clone(), cfg.inference.auto_pull);
        let backend = tokio::task::spawn_blocking(move || {
            load(setup, wasm, model_file, auto_pull, plugins.runtime())
        })
        .await
        .map_err(|e| e.to_string())??;
        let models = backend.models().await.map_err(|e| e.to_string())?;
        Ok((backend, models))
    }

    /// Logs each route deployment or fallback no backend serves (yet: a
    /// plugin may bring it later), so a typo shows at start.
    fn warn_of_unserved_deployments(&self, routes: &[crate::cfg::RouteConfig]) {
        for route in routes {
            let named = route
                .deployments
                .iter()
                .map(|d| &d.model)
                .chain(&route.fallbacks);
            for model in named {
                if self.route(model).is_err() && !self.router.has(model) {
                    tracing::error!(route = %route.model, %model, "a route names a model no backend serves; requests skip it until one does");
                }
            }
        }
    }

    fn add(&mut self, backend: Route, models: Vec<ModelInfo>) {
        for model in models {
            if self.routes.contains_key(&model.id) {
                tracing::warn!(model = %model.id, "served by two backends; the first one wins");
                continue;
            }
            self.routes.insert(model.id.clone(), backend.clone());
            self.models.push(model);
        }
        self.backends.push(backend);
    }

    /// Whether the response cache is on.
    pub fn caches(&self) -> bool {
        self.cache.enabled()
    }

    /// The models served: the built-in backends', then the plugins'.
    pub fn models(&self) -> Vec<ModelInfo> {
        let mut models = self.models.clone();
        models.extend(self.plugins.backend_models());
        models
    }

    /// The system check's probe: a backend health call through the queue.
    pub async fn probe(&self) -> anyhow::Result<()> {
        if let Some((id, why)) = self.missing.first() {
            anyhow::bail!("the backend for {id} is unavailable: {why}");
        }
        let mut backends = self.backends.clone();
        let plugins = self.plugins.list();
        backends.extend(plugins.iter().filter_map(|p| {
            let backend: Route = p.served()?.backend.clone();
            Some(backend)
        }));
        self.queue
            .run(async move {
                for backend in backends {
                    backend.health().await?;
                }
                Ok::<(), CallError>(())
            })
            .await?
            .map_err(anyhow::Error::from)
    }

    /// Chat requests waiting for a worker of the inference queue.
    pub fn waiting(&self) -> usize {
        self.queue.waiting()
    }

    /// Starts `request` for `account` (answered from the cache if it
    /// holds what was `asked`); refuses at once when a rate limit or
    /// budget is spent, the project is at its concurrency limit or the
    /// queue is full.
    ///
    /// A request without `max_tokens` is sent with the model's output cap,
    /// so that what it is admitted against bounds what it may spend.
    pub async fn chat(
        &self,
        account: Account,
        mut request: ChatRequest,
        asked: Option<cache::Asked>,
    ) -> Result<Running> {
        let attempts = self.attempts(&request.model)?;
        if !attempts[0].backend.passes_through() {
            wire::refuse_passthrough(&request)?;
        }
        let cap = self.prices.output_cap(&request.model);
        request.max_tokens.get_or_insert(cap);
        let most = limits::estimate(&request);
        self.run(account, attempts, request, most, asked).await
    }

    /// Starts a request to an endpoint besides chat, as [`Self::chat`]
    /// does. A backend that only chats serves completions and responses
    /// through chat; what it cannot serve is refused here, before anything
    /// is spent.
    pub async fn forward(
        &self,
        account: Account,
        mut request: ForwardRequest,
        asked: Option<cache::Asked>,
    ) -> Result<Running<ForwardResult>> {
        let attempts = self.attempts(&request.model)?;
        if !attempts[0].backend.forwards() {
            text::check(&request)?;
        }
        let cap = self.prices.output_cap(&request.model);
        limits::cap_output(&mut request, cap);
        let most = limits::estimate_body(&request);
        self.run(account, attempts, request, most, asked).await
    }

    /// What a request to `model` may use at most: the estimate's tokens,
    /// at the highest price any of its deployments charges.
    fn need(&self, model: &str, most: limits::Estimate) -> limits::Need {
        let cost = self.prices.most(model).map_or(0.0, |p| {
            p.usd(prices::Tokens {
                prompt: most.prompt,
                completion: most.output,
                ..prices::Tokens::default()
            })
        });
        limits::Need {
            tokens: most.prompt + most.output,
            nanos: prices::nanos(cost),
        }
    }

    /// Answers from the cache, or admits `request` (`need` at most) and
    /// queues its job.
    async fn run<A: Ask>(
        &self,
        account: Account,
        attempts: Vec<Attempt>,
        request: A,
        most: limits::Estimate,
        asked: Option<cache::Asked>,
    ) -> Result<Running<A::Answer>> {
        let need = self.need(request.model(), most);
        traces::annotate(|| {
            vec![
                KeyValue::new("switchyard.team", account.team().to_string()),
                KeyValue::new("gen_ai.request.model", request.model().to_string()),
            ]
        });
        let place = self
            .cache
            .slot(account.team(), request.model(), asked.as_ref());
        if let Some(place) = &place
            && let Some(kept) = self.cache.get(place).await
        {
            return self.answer_from_cache(account, request.model(), kept).await;
        }
        // Local and upstream work are limited apart: a project busy with
        // the embedded model still reaches its upstream models.
        let (limit, counted) = if attempts[0].backend.is_proxy() {
            (
                self.upstream_per_project,
                format!("{} (upstream models)", account.scope),
            )
        } else {
            (self.per_project, account.scope.clone())
        };
        let slot = Slot::take(&self.running, &counted, limit)?;
        let admission = traces::child("inference.admit", Vec::new);
        let admitted = self.limiter.admit(&account.limits, need).await;
        if let Some(cx) = &admission {
            let refused = admitted.as_ref().err().map(ToString::to_string);
            traces::end(cx, Vec::new(), refused.as_deref());
        }
        let admitted = admitted?;
        let mut headers = admitted.headers.clone();
        if place.is_some() {
            crate::telemetry::inference_cache(false);
            headers.insert(cache::HEADER, axum::http::HeaderValue::from_static("miss"));
        }
        let keep = place
            .filter(cache::Slot::keeps)
            .map(|p| (p, self.cache.clone()));
        // Shared with the job, to give it all back if the job never runs.
        let admitted = Arc::new(admitted);
        let (limiter, refund) = (self.limiter.clone(), admitted.clone());
        let (output_tx, output) = mpsc::unbounded_channel();
        let (done_tx, done) = oneshot::channel();
        let deployment = Arc::new(std::sync::OnceLock::new());
        let (store, router, served_by) =
            (self.store.clone(), self.router.clone(), deployment.clone());
        let prices = self.prices.clone();
        // The job runs in the request's trace, after a span of its wait.
        let queued = traces::child("inference.queue", Vec::new);
        let request_cx = opentelemetry::Context::current();
        // The job reports its own outcome, so no task waits on it. If it
        // panics, `done` closes and the caller reports the job dropped.
        let job = async move {
            if let Some(cx) = &queued {
                traces::end(cx, Vec::new(), None);
            }
            let model = request.model().to_string();
            let team = account.team().to_string();
            let routing = traces::child("inference.route", || {
                vec![KeyValue::new("gen_ai.request.model", model.clone())]
            });
            let serving = async {
                match keep {
                    None => serve(attempts, &team, request, output_tx, &router, &served_by).await,
                    Some((place, cache)) => {
                        let (tx, rx) = mpsc::unbounded_channel();
                        let served = serve(attempts, &team, request, tx, &router, &served_by);
                        let (result, pieces) = tokio::join!(served, tee(rx, output_tx));
                        if let (Ok(answer), Some(pieces)) = (&result, pieces) {
                            cache.put(&place, &cache::Kept { pieces, answer }).await;
                        }
                        result
                    }
                }
            };
            let result = match &routing {
                Some(cx) => serving.with_context(cx.clone()).await,
                None => serving.await,
            };
            let price = prices.of(&model, served_by.get().map_or("", String::as_str));
            let used = match &result {
                Ok(answer) => usage::Used::of::<A>(answer, price, most),
                Err(CallError::Left { pieces, .. }) => usage::Used::left(most, *pieces, price),
                Err(_) => usage::Used::default(),
            };
            // What was generated is billed, whether or not the client stayed.
            let billed = matches!(&result, Ok(_) | Err(CallError::Left { .. }));
            limiter.settle(&admitted, used.need());
            if let Some(cx) = &routing {
                let served = served_by.get().cloned().unwrap_or_default();
                let attrs = vec![
                    KeyValue::new("switchyard.deployment", served),
                    KeyValue::new("gen_ai.usage.input_tokens", i64::from(used.prompt)),
                    KeyValue::new("gen_ai.usage.output_tokens", i64::from(used.completion)),
                    KeyValue::new("switchyard.cost_usd", used.cost_usd),
                ];
                let failed = result.as_ref().err().map(ToString::to_string);
                traces::end(cx, attrs, failed.as_deref());
            }
            if billed {
                let tokens = (used.prompt, used.completion);
                crate::telemetry::inference_used(&model, &account.scope, tokens, used.cost_usd);
                let served = served_by.get().map_or("", String::as_str);
                if let Err(e) = usage::record(&store, &account, (&model, served), &used).await {
                    tracing::error!(error = %e, "recording usage failed");
                }
            }
            drop(slot);
            let _ = done_tx.send(result.map_err(call_error));
        }
        .with_context(request_cx);
        if let Err(e) = self.queue.submit(job) {
            self.limiter.cancel(&refund);
            return Err(Error::RateLimited(e.to_string()));
        }
        Ok(Running {
            output,
            done,
            headers,
            deployment,
        })
    }

    /// A request answered with `kept`: no backend is asked and nothing is
    /// spent, but the request counts against its rate limits and in usage,
    /// as a cache hit.
    async fn answer_from_cache<T: Send + 'static>(
        &self,
        account: Account,
        model: &str,
        kept: cache::Kept<T>,
    ) -> Result<Running<T>> {
        let admitted = self
            .limiter
            .admit(&account.limits, limits::Need::default())
            .await?;
        let (output_tx, output) = mpsc::unbounded_channel();
        for piece in kept.pieces {
            let _ = output_tx.send(piece);
        }
        let (done_tx, done) = oneshot::channel();
        let _ = done_tx.send(Ok(kept.answer));
        crate::telemetry::inference_cache(true);
        let hit = usage::Used {
            cache_hit: true,
            ..usage::Used::default()
        };
        if let Err(e) = usage::record(&self.store, &account, (model, ""), &hit).await {
            tracing::error!(error = %e, "recording usage failed");
        }
        let mut headers = admitted.headers.clone();
        headers.insert(cache::HEADER, axum::http::HeaderValue::from_static("hit"));
        Ok(Running {
            output,
            done,
            headers,
            deployment: Arc::default(),
        })
    }

    /// What to try for `model`, in order: its route's deployments and
    /// fallbacks, or the one backend serving it.
    fn attempts(&self, model: &str) -> Result<Vec<Attempt>> {
        let Some(plan) = self.router.plan(model) else {
            let (backend, plugin) = self.route(model)?;
            return Ok(vec![Attempt {
                backend,
                plugin,
                deployment: None,
            }]);
        };
        let mut attempts = Vec::with_capacity(plan.len());
        for deployment in plan {
            match self.route(&deployment.model) {
                Ok((backend, plugin)) => attempts.push(Attempt {
                    backend,
                    plugin,
                    deployment: Some(deployment),
                }),
                Err(e) => {
                    tracing::warn!(route = %model, deployment = %deployment.name, "deployment skipped: {e}")
                }
            }
        }
        if attempts.is_empty() {
            let wait = self.router.next_ready(model).map_or(String::new(), |d| {
                format!("; the first is tried again in {}s", d.as_secs().max(1))
            });
            return Err(Error::Unavailable(format!(
                "every deployment of '{model}' failed recently and is cooling down, and its fallbacks are unavailable{wait}"
            )));
        }
        Ok(attempts)
    }

    /// The backend serving `model` (and its plugin, if it is one).
    fn route(&self, model: &str) -> Result<(Route, Option<Arc<Plugin>>)> {
        if let Some(backend) = self.routes.get(model) {
            return Ok((backend.clone(), None));
        }
        if let Some(plugin) = self.plugins.backend_for(model)
            && let Some(served) = plugin.served()
        {
            return Ok((served.backend.clone(), Some(plugin)));
        }
        if let Some((_, why)) = self.missing.iter().find(|(id, _)| id == model) {
            return Err(Error::Unavailable(format!(
                "the model '{model}' is unavailable: {why}"
            )));
        }
        Err(Error::ModelNotFound(format!(
            "the model '{model}' does not exist; GET /v1/models lists the models served"
        )))
    }
}

/// Tries `attempts` in turn until one answers or fails in a way the next
/// cannot help: the client's error, or a failure after the first piece
/// reached the client. A failed deployment cools down.
async fn serve<A: Ask>(
    attempts: Vec<Attempt>,
    team: &str,
    request: A,
    output: mpsc::UnboundedSender<Piece>,
    router: &routes::Routes,
    served_by: &std::sync::OnceLock<String>,
) -> std::result::Result<A::Answer, CallError> {
    let last = attempts.len() - 1;
    let mut outcome = Err(CallError::Failed("no deployment was tried".into()));
    for (i, attempt) in attempts.into_iter().enumerate() {
        let Some(deployment) = &attempt.deployment else {
            // A model without a route: straight through.
            return call(&attempt, team, request, output).await;
        };
        let span = traces::child("inference.attempt", || {
            vec![
                KeyValue::new("switchyard.deployment", deployment.name.clone()),
                KeyValue::new("gen_ai.request.model", deployment.model.clone()),
            ]
        });
        let asked = request.for_model(&deployment.model);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sent = std::sync::atomic::AtomicBool::new(false);
        let forward = async {
            while let Some(piece) = rx.recv().await {
                if !sent.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    let _ = served_by.set(deployment.name.clone());
                }
                let _ = output.send(piece);
            }
        };
        let both = async { tokio::join!(call(&attempt, team, asked, tx), forward).0 };
        let both = both.with_context(span.clone().unwrap_or_else(opentelemetry::Context::current));
        outcome = match tokio::time::timeout(deployment.timeout, both).await {
            Ok(result) => result,
            Err(_) => Err(CallError::TimedOut(format!(
                "the deployment '{}' did not answer within {} ms",
                deployment.name,
                deployment.timeout.as_millis()
            ))),
        };
        if let Some(cx) = &span {
            let failed = outcome.as_ref().err().map(ToString::to_string);
            traces::end(cx, Vec::new(), failed.as_deref());
        }
        match &outcome {
            Ok(_) => {
                let _ = served_by.set(deployment.name.clone());
                return outcome;
            }
            Err(e) if sent.load(std::sync::atomic::Ordering::Relaxed) || !routes::retryable(e) => {
                return outcome;
            }
            Err(e) => {
                tracing::warn!(deployment = %deployment.name, error = %e, "deployment failed; trying the next");
                router.cool(deployment);
                if i == last {
                    return outcome;
                }
            }
        }
    }
    outcome
}

/// Passes what `rx` receives on to `output`, keeping a copy: the copy, if
/// all of it reached the client. A client gone stops the copy and, with
/// `rx` dropped, the generation.
async fn tee(
    mut rx: mpsc::UnboundedReceiver<Piece>,
    output: mpsc::UnboundedSender<Piece>,
) -> Option<Vec<Piece>> {
    let mut pieces = Vec::new();
    while let Some(piece) = rx.recv().await {
        pieces.push(piece.clone());
        output.send(piece).ok()?;
    }
    Some(pieces)
}

/// One backend call, counted in the plugin's stats and the metrics.
async fn call<A: Ask>(
    attempt: &Attempt,
    team: &str,
    request: A,
    output: mpsc::UnboundedSender<Piece>,
) -> std::result::Result<A::Answer, CallError> {
    let started = std::time::Instant::now();
    let span = traces::child("plugin.call", || {
        vec![
            KeyValue::new("switchyard.plugin", attempt.backend.name().to_string()),
            KeyValue::new("gen_ai.request.model", request.model().to_string()),
        ]
    });
    let asked = request.ask(attempt.backend.as_ref(), team, output);
    let result = match &span {
        Some(cx) => asked.with_context(cx.clone()).await,
        None => asked.await,
    };
    if let Some(cx) = &span {
        let failed = result.as_ref().err().map(ToString::to_string);
        traces::end(cx, Vec::new(), failed.as_deref());
    }
    let failed = matches!(result, Err(CallError::Failed(_) | CallError::TimedOut(_)));
    if let Some(plugin) = &attempt.plugin {
        plugin.stats().record(started.elapsed(), failed);
    }
    crate::telemetry::plugin_call(
        attempt.backend.name(),
        Kind::ModelBackend.as_str(),
        failed,
        started.elapsed(),
    );
    result
}

/// A failed backend call as the client sees it. An upstream's answer to a
/// bad request is the client's to fix, so it is passed on as one (a 502
/// would have SDKs retry it); the upstream's other failures are ours.
fn call_error(e: CallError) -> Error {
    match e {
        CallError::Reported {
            code,
            message,
            status,
        } if code == "upstream-failed" => match status {
            Some(400 | 413 | 422) => Error::InvalidRequest {
                message,
                param: None,
            },
            Some(429) => Error::RateLimited(message),
            _ => Error::BadGateway(message),
        },
        CallError::Reported { code, message, .. } => Error::InvalidRequest {
            param: (code == "unsupported-endpoint").then(|| "model".into()),
            message,
        },
        CallError::Failed(m) | CallError::Left { message: m, .. } => Error::PluginFailed(m),
        CallError::TimedOut(m) => Error::GatewayTimeout(m),
    }
}

/// The embedded model's grant: its model directory read-only, the cache
/// directory read-write, and nothing else.
fn smollm(cfg: &Config) -> Setup {
    let icfg = &cfg.inference;
    let file = &icfg.model_path;
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cache = icfg
        .cache_dir
        .clone()
        .unwrap_or_else(|| cfg.data_dir.join("models"));
    Setup {
        name: format!("model-smollm@{}", env!("CARGO_PKG_VERSION")),
        env: vec![
            ("MODEL_FILE".into(), name),
            ("MODEL_ID".into(), icfg.model_id.clone()),
        ],
        preopens: vec![
            (dir.to_path_buf(), "/model".into(), FsPerms::ReadOnly),
            (cache, "/cache".into(), FsPerms::ReadWrite),
        ],
        egress: None,
        memory_bytes: icfg.memory_bytes,
        timeout: Duration::from_millis(icfg.timeout_ms),
        instances: Instances::Single,
        second_instance: icfg.second_instance,
    }
}

/// An upstream proxy's grant: its upstream's host only, with the key added
/// by the host; warm instances reused within a team.
fn proxy(upstream: &UpstreamConfig, via: Option<String>) -> std::result::Result<Setup, String> {
    let url = url::Url::parse(&upstream.base_url).map_err(|e| format!("base_url: {e}"))?;
    let host = url.host_str().ok_or("base_url has no host")?;
    let port = url.port_or_known_default().ok_or("base_url has no port")?;
    let grant = BackendGrant {
        env: [
            ("UPSTREAM_URL".to_string(), upstream.base_url.clone()),
            ("MODELS".to_string(), upstream.models.join(",")),
        ]
        .into(),
        allow_hosts: upstream
            .allow_hosts
            .clone()
            .unwrap_or_else(|| vec![format!("{host}:{port}")]),
        api_key_env: upstream.api_key_env.clone(),
        per_call: true,
        proxy: via,
    };
    let limits = Limits {
        memory_bytes: 64 << 20,
        timeout_ms: upstream.timeout_ms,
        ..Limits::default_for(Kind::ModelBackend)
    };
    let name = format!(
        "model-openai@{} ({})",
        env!("CARGO_PKG_VERSION"),
        upstream.name
    );
    Ok(Setup {
        instances: Instances::PerTeam,
        ..Setup::granted(name, &grant, &limits).map_err(|e| e.to_string())?
    })
}

fn load(
    setup: Setup,
    wasm: &'static [u8],
    model_file: Option<PathBuf>,
    auto_pull: bool,
    runtime: &Runtime,
) -> std::result::Result<Arc<Backend>, String> {
    if let Some(file) = model_file.filter(|f| !f.exists()) {
        if !auto_pull {
            return Err(format!(
                "the model file {} is missing; {}",
                file.display(),
                pull::hint(&file)
            ));
        }
        pull::pull(&file).map_err(|e| {
            format!(
                "the model file {} is missing and fetching it failed ({e:#}); {}",
                file.display(),
                pull::hint(&file)
            )
        })?;
    }
    let name = setup.name.clone();
    Backend::load(setup, wasm, runtime).map_err(|e| format!("loading {name}: {e:#}"))
}

/// One of a project's concurrent requests; released on drop.
struct Slot {
    running: Arc<Mutex<HashMap<String, usize>>>,
    scope: String,
}

impl Slot {
    fn take(
        running: &Arc<Mutex<HashMap<String, usize>>>,
        scope: &str,
        limit: usize,
    ) -> Result<Slot> {
        let mut map = running.lock().unwrap_or_else(|p| p.into_inner());
        let count = map.entry(scope.to_string()).or_default();
        if *count >= limit {
            return Err(Error::RateLimited(format!(
                "Concurrency limit reached: {scope} already has {limit} chat requests running; retry when one finishes"
            )));
        }
        *count += 1;
        Ok(Slot {
            running: running.clone(),
            scope: scope.to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = map.get_mut(&self.scope) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.scope);
            }
        }
    }
}
