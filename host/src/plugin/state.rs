//! Every plugin instance's `Store`, built in one place: a WASI context with
//! only what the plugin is granted, captured stdout/stderr, the memory
//! limiter, and the epoch deadline that paces its calls.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

/// Most of a plugin's stdout or stderr kept from one call; the rest is
/// dropped, never refused, so printing a lot cannot make a call fail.
const OUTPUT_CAPACITY: usize = 64 * 1024;

/// Store data of an instance: the part every kind shares. A kind that
/// needs more (a model backend's `wasi:http`) wraps it and implements
/// `AsMut<State>`.
pub struct State {
    wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    pub(super) stdout: Capture,
    pub(super) stderr: Capture,
}

/// A host directory preopened for a plugin at a guest path.
pub type Preopen = (PathBuf, String, FsPerms);

impl State {
    /// A context with no files, no environment, no arguments and no network.
    pub fn new(memory_bytes: u64) -> State {
        State::granted(memory_bytes, &[], &[]).expect("nothing to open")
    }

    /// A context with `env` and `preopens` (created if missing), and still no
    /// sockets: a backend reaches the network only through `wasi:http`.
    pub fn granted(
        memory_bytes: u64,
        env: &[(String, String)],
        preopens: &[Preopen],
    ) -> std::io::Result<State> {
        let stdout = Capture::default();
        let stderr = Capture::default();
        let mut wasi = WasiCtx::builder();
        for (key, value) in env {
            wasi.env(key, value);
        }
        for (host, guest, perms) in preopens {
            std::fs::create_dir_all(host)?;
            wasi.preopened_dir(host, guest, *perms)
                .map_err(std::io::Error::other)?;
        }
        // Sockets are linked (toolchains import them) and every use is
        // denied: wasmtime's defaults, stated here so they stay so.
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        Ok(State {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory_bytes),
            stdout,
            stderr,
        })
    }
}

impl AsMut<State> for State {
    fn as_mut(&mut self) -> &mut State {
        self
    }
}

/// How a store's calls are bounded in CPU. Either way the instance yields
/// to the async executor at every epoch tick, so a busy plugin cannot starve
/// the host's other work.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Interrupted after this many ticks: templates and filters.
    Budget(u64),
    /// Never interrupted; only the call's wall-clock timeout bounds it:
    /// model backends, whose generation may take minutes.
    Unbounded,
}

/// The one store builder: `data` under its memory limiter, armed for a
/// first call paced as `pace` says.
pub fn new_store<T: AsMut<State> + Send + 'static>(
    engine: &Engine,
    data: T,
    pace: Pace,
) -> Store<T> {
    let mut store = Store::new(engine, data);
    store.limiter(|data| &mut data.as_mut().limiter);
    arm(&mut store, pace);
    store
}

/// Readies `store` for a call: a fresh CPU budget (a kept instance's
/// deadline passed while it sat idle) and a cleared memory-cap flag.
pub fn arm<T: AsMut<State> + Send + 'static>(store: &mut Store<T>, pace: Pace) {
    store.data_mut().as_mut().limiter.exceeded = false;
    store.set_epoch_deadline(1);
    match pace {
        Pace::Budget(budget) => {
            let mut used = 0;
            store.epoch_deadline_callback(move |_| {
                used += 1;
                Ok(if used >= budget {
                    UpdateDeadline::Interrupt
                } else {
                    UpdateDeadline::Yield(1)
                })
            });
        }
        Pace::Unbounded => store.epoch_deadline_async_yield_and_update(1),
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A plugin's stdout or stderr since it was last taken, up to
/// [`OUTPUT_CAPACITY`] bytes.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    /// What was written since the last call, emptied for the next.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn append(&self, bytes: &[u8]) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let room = OUTPUT_CAPACITY.saturating_sub(kept.len());
        kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(OUTPUT_CAPACITY)
    }
}

#[async_trait::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Refuses memory growth past the plugin's cap, and remembers that it did so
/// the error can say "memory cap" rather than a bare trap.
pub struct MemoryLimiter {
    cap: usize,
    pub(crate) exceeded: bool,
}

impl MemoryLimiter {
    /// A limiter allowing `memory_bytes`.
    pub fn new(memory_bytes: u64) -> MemoryLimiter {
        MemoryLimiter {
            cap: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
            exceeded: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.exceeded = true;
            wasmtime::bail!("memory cap of {} bytes exceeded", self.cap);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
