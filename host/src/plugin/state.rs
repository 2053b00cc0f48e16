//! The data of one plugin call's `Store`: a WASI context with nothing in it,
//! captured stdout/stderr, and the memory limiter.

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Most a plugin may print to stdout or stderr in one call.
const OUTPUT_CAPACITY: usize = 64 * 1024;

/// Store data for one call.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    pub(super) stdout: MemoryOutputPipe,
    pub(super) stderr: MemoryOutputPipe,
}

impl State {
    /// A context with no files, no environment, no arguments and no network.
    pub fn new(memory_bytes: u64) -> State {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPACITY);
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
