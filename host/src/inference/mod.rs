//! Inference: model backends behind the OpenAI-compatible API.
//!
//! - [`backend`]: one model-backend plugin and its long-lived instance.
//! - [`wire`]: the chat-completions request and response formats.
//! - [`usage`]: token accounting per team, project, key, model and day.
//! - [`pull`]: fetching the default model.
//!
//! Every chat request runs as a job on the inference queue (bounded; full
//! means 429), and at most `per_project_concurrency` requests of one project
//! are running or queued at once.

pub mod backend;
pub mod pull;
pub mod usage;
pub mod wire;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use self::backend::{Backend, CallError, ChatRequest, ChatResult, ModelInfo, Setup};
use self::usage::Account;
use crate::cfg::Config;
use crate::error::{Error, Result};
use crate::queue::{QueueError, WorkQueue};
use crate::store::Store;

/// The embedded backend's component.
const SMOLLM_WASM: &[u8] = include_bytes!(concat!(
    env!("SWITCHYARD_PLUGIN_BUILD_DIR"),
    "/model_smollm.wasm"
));

/// The inference service.
pub struct Inference {
    backend: std::result::Result<Arc<Backend>, String>,
    models: Vec<ModelInfo>,
    queue: WorkQueue,
    store: Store,
    per_project: usize,
    running: Arc<Mutex<HashMap<String, usize>>>,
}

/// A chat request under way: text as it is generated, then the outcome.
pub struct Running {
    /// Generated text. Closes when generation ends; dropping it stops
    /// generation.
    pub text: mpsc::UnboundedReceiver<String>,
    /// How it ended.
    pub done: oneshot::Receiver<Result<ChatResult>>,
}

impl Inference {
    /// Loads the embedded backend; fetches the model first if it is missing
    /// and `auto_pull` is on. A missing model leaves inference unavailable,
    /// with a message saying what to run, and the rest of the host serving.
    pub async fn start(
        cfg: &Config,
        compile_cache: &Path,
        store: Store,
        queue: WorkQueue,
    ) -> Inference {
        let icfg = &cfg.inference;
        let setup = Setup {
            name: format!("model-smollm@{}", env!("CARGO_PKG_VERSION")),
            model_file: icfg.model_path.clone(),
            model_id: icfg.model_id.clone(),
            cache_dir: icfg
                .cache_dir
                .clone()
                .unwrap_or_else(|| cfg.data_dir.join("models")),
            memory_bytes: icfg.memory_bytes,
            timeout: Duration::from_millis(icfg.timeout_ms),
        };
        let auto_pull = icfg.auto_pull;
        let cache = compile_cache.to_path_buf();
        let loaded = tokio::task::spawn_blocking(move || load(setup, auto_pull, &cache))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        let (backend, models) = match loaded {
            Ok(backend) => match backend.models().await {
                Ok(models) => (Ok(backend), models),
                Err(e) => (Err(e.to_string()), Vec::new()),
            },
            Err(e) => (Err(e), Vec::new()),
        };
        if let Err(why) = &backend {
            tracing::error!("inference is unavailable: {why}");
        }
        Inference {
            backend,
            models,
            queue,
            store,
            per_project: cfg.inference.per_project_concurrency.max(1),
            running: Arc::default(),
        }
    }

    /// The models served.
    pub fn models(&self) -> &[ModelInfo] {
        &self.models
    }

    /// The system check's probe: a backend health call through the queue.
    pub async fn probe(&self) -> anyhow::Result<()> {
        let backend = self.backend.clone().map_err(anyhow::Error::msg)?;
        self.queue
            .run(async move { backend.health().await })
            .await?
            .map_err(anyhow::Error::from)
    }

    /// Starts `request` for `account`.
    pub fn chat(&self, account: Account, request: ChatRequest) -> Result<Running> {
        let backend = self.backend.clone().map_err(Error::Unavailable)?;
        if !self.models.iter().any(|m| m.id == request.model) {
            return Err(Error::NotFound(format!(
                "the model '{}' does not exist; GET /v1/models lists the models served",
                request.model
            )));
        }
        let slot = Slot::take(&self.running, &account.scope, self.per_project)?;
        let (text_tx, text) = mpsc::unbounded_channel();
        let (done_tx, done) = oneshot::channel();
        let store = self.store.clone();
        let queue = self.queue.clone();
        let job = async move {
            let model = request.model.clone();
            let result = backend.chat(request, text_tx).await;
            if let Ok(r) = &result
                && let Err(e) = usage::record(
                    &store,
                    &account,
                    &model,
                    r.prompt_tokens,
                    r.completion_tokens,
                )
            {
                tracing::error!(error = %e, "recording usage failed");
            }
            result
        };
        tokio::spawn(async move {
            let outcome = match queue.run(job).await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(CallError::Reported(m))) => Err(Error::InvalidRequest {
                    message: m,
                    param: None,
                }),
                Ok(Err(CallError::Failed(m))) => Err(Error::PluginFailed(m)),
                Err(e @ QueueError::Full { .. }) => Err(Error::RateLimited(e.to_string())),
                Err(e) => Err(Error::Unavailable(e.to_string())),
            };
            drop(slot);
            let _ = done_tx.send(outcome);
        });
        Ok(Running { text, done })
    }
}

fn load(setup: Setup, auto_pull: bool, cache: &Path) -> std::result::Result<Arc<Backend>, String> {
    let file: PathBuf = setup.model_file.clone();
    if !file.exists() {
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
    Backend::load(setup, SMOLLM_WASM, cache).map_err(|e| format!("loading model-smollm: {e:#}"))
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
