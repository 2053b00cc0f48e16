//! The state shared by every request: configuration, the store and the queues.

use std::sync::Arc;

use crate::cfg::Config;
use crate::queue::WorkQueue;
use crate::store::Store;

/// Everything a handler may use. Cheap to clone.
#[derive(Clone)]
pub struct App {
    /// The configuration the host started with.
    pub cfg: Arc<Config>,
    /// The one store handle.
    pub store: Store,
    /// Plugin work: renders and filters (`cpu_queue` in the system check).
    pub plugin_queue: WorkQueue,
    /// Model inference (`gpu_queue` in the system check).
    pub inference_queue: WorkQueue,
}

impl App {
    /// Builds the state and starts the queues' workers. Needs a tokio runtime.
    pub fn start(cfg: Config, store: Store) -> App {
        App {
            plugin_queue: WorkQueue::start("plugin", &cfg.queues.plugin),
            inference_queue: WorkQueue::start("inference", &cfg.queues.inference),
            cfg: Arc::new(cfg),
            store,
        }
    }
}
