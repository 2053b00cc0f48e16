//! The state shared by every request: configuration, the store, the plugin
//! host and the queues; and the system check over them ([`health`]).

pub mod health;

use std::sync::Arc;
use std::time::Duration;

use crate::automation::matcher::Matcher;
use crate::automation::send::Sender;
use crate::automation::worker::Dispatcher;
use crate::cfg::Config;
use crate::domain::access::Access;
use crate::domain::seal::Sealer;
use crate::inference::Inference;
use crate::plugin::Plugins;
use crate::plugin::Watcher;
use crate::queue::WorkQueue;
use crate::store::Store;
use crate::tasks::{Stage, Tasks};

/// Everything a handler may use: one pointer, so that the extractors and
/// middleware that clone it per request copy one `Arc`, not eleven.
#[derive(Clone)]
pub struct App(Arc<Parts>);

impl std::ops::Deref for App {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

/// What an [`App`] holds.
pub struct Parts {
    /// The configuration the host started with.
    pub cfg: Arc<Config>,
    /// The one store handle.
    pub store: Store,
    /// Seals and opens secrets.
    pub sealer: Sealer,
    /// Loaded plugins and the plugin work queue (`cpu_queue`).
    pub plugins: Arc<Plugins>,
    /// The watched plugins directory.
    pub watcher: Arc<Watcher>,
    /// Model backends and their queue (`gpu_queue` in the system check).
    pub inference: Arc<Inference>,
    /// Sends webhook requests under the SSRF guard.
    pub sender: Sender,
    /// Delivers the outbox.
    pub dispatcher: Dispatcher,
    /// Turns events into deliveries.
    pub matcher: Matcher,
    /// What lets a request's caller in, kept.
    pub access: Arc<Access>,
    /// The host's loops, stopped in order by [`App::stop`].
    pub tasks: Tasks,
    /// Exports traces while the app lives.
    pub traces: Option<crate::traces::Exporting>,
}

impl App {
    /// Starts the plugin host (loading the built-ins and the plugins
    /// directory), the queues and the loops. Needs a tokio runtime.
    pub async fn start(cfg: Config, store: Store, sealer: Sealer) -> anyhow::Result<App> {
        crate::telemetry::install();
        let traces = crate::traces::start(cfg.telemetry.otlp_endpoint.as_deref())?;
        let tasks = Tasks::default();
        let cache_dir = cfg
            .plugins
            .cache_dir
            .clone()
            .unwrap_or_else(|| cfg.data_dir.join("cache"));
        let plugins =
            Plugins::start(&cache_dir, &cfg.queues.plugin, crate::plugin::builtins()).await?;
        // Built-in backends first: they reserve their model ids before any
        // backend plugin in the directory is loaded.
        let queue = WorkQueue::start("inference", &cfg.queues.inference);
        let inference = Inference::start(&cfg, store.clone(), queue, plugins.clone(), &tasks).await;
        let watcher = Watcher::new(&cfg.plugins_dir, plugins.clone());
        let interval = Duration::from_millis(cfg.plugins.watch_interval_ms);
        watcher.start(&tasks, interval).await;
        // Uploads last: an upload replaces a plugin of the same name.
        crate::automation::uploads::Sync::start(&tasks, store.clone(), plugins.clone()).await;
        let proxy = cfg.delivery.proxy_url()?;
        let egress = crate::automation::send::Egress {
            proxy: proxy.as_ref(),
            no_proxy: &cfg.delivery.no_proxy,
        };
        let sender = Sender::new(
            cfg.webhooks.allow_private.clone(),
            Duration::from_millis(cfg.webhooks.timeout_ms),
            cfg.webhooks.max_response_bytes,
            egress,
        )?;
        let delivery = cfg.delivery.clone();
        let dispatching = Dispatcher::start(
            store.clone(),
            sealer.clone(),
            sender.clone(),
            delivery,
            &tasks,
        );
        let dispatcher = dispatching.0.clone();
        let matcher = Matcher::start(
            store.clone(),
            sealer.clone(),
            plugins.clone(),
            dispatching,
            &tasks,
        );
        let app = App(Arc::new(Parts {
            access: Arc::new(Access::new(store.clone())),
            matcher,
            dispatcher,
            sender,
            inference: Arc::new(inference),
            cfg: Arc::new(cfg),
            store,
            sealer,
            plugins,
            watcher,
            tasks,
            traces,
        }));
        app.recover().await?;
        app.spawn_upkeep();
        Ok(app)
    }

    /// Matches the events a crash left in the inbox (the dispatcher's first
    /// scan picks up the outbox), then sweeps for events whose matching
    /// hit a full plugin queue.
    async fn recover(&self) -> anyhow::Result<()> {
        let recovered = self.matcher.sweep_inbox(0).await?.matched;
        if recovered > 0 {
            tracing::info!(
                events = recovered,
                "matched events left over from the last run"
            );
        }
        let interval = Duration::from_millis(self.cfg.delivery.poll_interval_ms.max(10));
        self.matcher.spawn_sweeper(&self.tasks, interval);
        Ok(())
    }

    /// Expiry of history, sessions and idempotency keys.
    fn spawn_upkeep(&self) {
        let (tasks, store) = (&self.tasks, &self.store);
        crate::automation::outbox::spawn_expiry(tasks, store.clone(), self.cfg.history.keep());
        let sessions = crate::domain::auth::SESSION_SWEEP;
        crate::domain::auth::spawn_session_sweeper(tasks, store.clone(), sessions);
        let keys = crate::domain::idempotency::SWEEP;
        crate::domain::idempotency::spawn_sweeper(tasks, store.clone(), keys);
    }

    /// Stops the host's loops in order, each awaited before the next:
    /// intake (the inbox sweep, plugin watching), matching (what it holds
    /// is written), sending (the sends under way finish, until `until`),
    /// recording (every attempt handed over is written), upkeep. The
    /// caller flushes the store after. Returns how many sends were cut off
    /// at `until`; they go again after a restart.
    pub async fn stop(&self, until: tokio::time::Instant) -> usize {
        self.tasks.stop(Stage::Intake).await;
        self.tasks.stop(Stage::Matching).await;
        let cut_off = self.dispatcher.stop(until).await;
        self.tasks.stop(Stage::Recording).await;
        self.tasks.stop(Stage::Upkeep).await;
        cut_off
    }
}
