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
}

impl App {
    /// Starts the plugin host (loading the built-ins and the plugins
    /// directory) and the queues. Needs a tokio runtime.
    pub async fn start(cfg: Config, store: Store, sealer: Sealer) -> anyhow::Result<App> {
        crate::telemetry::install();
        let cache_dir = cfg
            .plugins
            .cache_dir
            .clone()
            .unwrap_or_else(|| cfg.data_dir.join("cache"));
        let plugins =
            Plugins::start(&cache_dir, &cfg.queues.plugin, crate::plugin::builtins()).await?;
        // Built-in backends first: they reserve their model ids before any
        // backend plugin in the directory is loaded.
        let inference = Inference::start(
            &cfg,
            store.clone(),
            WorkQueue::start("inference", &cfg.queues.inference),
            plugins.clone(),
        )
        .await;
        let watcher = Watcher::new(&cfg.plugins_dir, plugins.clone());
        watcher
            .start(Duration::from_millis(cfg.plugins.watch_interval_ms))
            .await;
        // Uploads last: an upload replaces a plugin of the same name.
        crate::automation::uploads::Sync::start(store.clone(), plugins.clone()).await;
        let sender = Sender::new(
            cfg.webhooks.allow_private.clone(),
            Duration::from_millis(cfg.webhooks.timeout_ms),
            cfg.webhooks.max_response_bytes,
        )?;
        let dispatcher = Dispatcher::start(
            store.clone(),
            sealer.clone(),
            sender.clone(),
            cfg.delivery.clone(),
        );
        let matcher = Matcher::new(
            store.clone(),
            sealer.clone(),
            plugins.clone(),
            dispatcher.clone(),
        );
        dispatcher.set_events(Arc::new(matcher.clone()));
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
        }));
        // Events a crash left unmatched; the dispatcher's first scan picks up
        // the outbox.
        let recovered = app.matcher.sweep_inbox(0).await?.matched;
        if recovered > 0 {
            tracing::info!(
                events = recovered,
                "matched events left over from the last run"
            );
        }
        // Later, events whose matching hit a full plugin queue.
        app.matcher.spawn_sweeper(Duration::from_millis(
            app.cfg.delivery.poll_interval_ms.max(10),
        ));
        crate::automation::outbox::spawn_expiry(app.store.clone(), app.cfg.history.keep());
        crate::domain::auth::spawn_session_sweeper(
            app.store.clone(),
            crate::domain::auth::SESSION_SWEEP,
        );
        crate::domain::idempotency::spawn_sweeper(
            app.store.clone(),
            crate::domain::idempotency::SWEEP,
        );
        Ok(app)
    }
}
