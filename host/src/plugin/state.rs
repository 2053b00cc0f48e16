//! The data of a template or filter instance's `Store`: a WASI context with
//! nothing in it, captured stdout/stderr, and the memory limiter.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Most of a plugin's stdout or stderr kept from one call; the rest is
/// dropped, never refused, so printing a lot cannot make a call fail.
const OUTPUT_CAPACITY: usize = 64 * 1024;

/// Store data of an instance.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    pub(super) stdout: Capture,
    pub(super) stderr: Capture,
}

impl State {
    /// A context with no files, no environment, no arguments and no network.
    pub fn new(memory_bytes: u64) -> State {
        let stdout = Capture::default();
        let stderr = Capture::default();
        // Sockets are linked (toolchains import them) and every use is
        // denied: wasmtime's defaults, stated here so they stay so.
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        State {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory_bytes),
            stdout,
            stderr,
        }
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
