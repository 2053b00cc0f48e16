//! The one wasmtime [`Engine`], its epoch ticker, and the compile cache.
//!
//! This module is deliberately the only place that configures wasmtime.
//! Compiled code is cached on disk under the content hash of the component and
//! the engine's compatibility hash, so a restart or reload does not recompile.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, OnceLock};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, EngineWeak, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::limits::{EPOCH_TICK, MAX_MEMORY_BYTES};
use super::state::State;

/// How much of a freed memory or table stays mapped for the next instance.
/// Every call instantiates afresh, so returning pages to the kernel and
/// faulting them back in cost more than the call itself; with PAGEMAP_SCAN
/// (Linux 6.7+) only the pages a call dirtied are reset.
const KEEP_RESIDENT: usize = 2 << 20;

/// The engine, the linker every plugin is instantiated with, and the cache.
pub struct Runtime {
    /// The shared engine.
    pub engine: Engine,
    /// WASI (as constrained per call by [`State`]) and nothing else.
    pub linker: Linker<State>,
    cache_dir: PathBuf,
}

impl Runtime {
    /// Builds the engine and starts its epoch ticker.
    pub fn new(cache_dir: &Path) -> anyhow::Result<Arc<Runtime>> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(512)
            .total_core_instances(1024)
            .total_memories(512)
            .total_tables(1024)
            .max_memory_size(MAX_MEMORY_BYTES as usize)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine =
            Engine::new(&config).map_err(|e| anyhow::anyhow!("configuring wasmtime: {e:#}"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        std::fs::create_dir_all(cache_dir)
            .with_context(|| format!("creating plugin cache {}", cache_dir.display()))?;
        start_ticker(&engine);
        Ok(Arc::new(Runtime {
            engine,
            linker,
            cache_dir: cache_dir.to_path_buf(),
        }))
    }

    /// Compiles `bytes`, or loads the cached compilation. Blocking: call it
    /// from a blocking thread.
    pub fn compile(&self, bytes: &[u8]) -> anyhow::Result<Component> {
        compile_cached(&self.engine, &self.cache_dir, bytes)
    }

    /// Whether `bytes` has a cached compilation.
    pub fn is_cached(&self, bytes: &[u8]) -> bool {
        cache_path(&self.engine, &self.cache_dir, bytes).exists()
    }

    /// Drops the cached compilation of `bytes`: a refused component leaves
    /// nothing behind.
    pub fn forget(&self, bytes: &[u8]) {
        let path = cache_path(&self.engine, &self.cache_dir, bytes);
        for path in [path.with_extension("lock"), sum_path(&path), path] {
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "could not remove a refused plugin's compiled code");
            }
        }
    }

    /// Where compiled code is cached.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }
}

/// The engine for long-lived model backends: instances holding hundreds of
/// MiB of weights, so memories are allocated on demand rather than from the
/// pool sized for many small template and filter instances. Epoch ticks let
/// a generating model yield to tokio. One engine (and one epoch thread)
/// serves every such backend.
pub fn model_engine() -> anyhow::Result<Engine> {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    if let Some(engine) = ENGINE.get() {
        return Ok(engine.clone());
    }
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::OnDemand);
    let engine =
        Engine::new(&config).map_err(|e| anyhow::anyhow!("configuring wasmtime: {e:#}"))?;
    // Two first callers may race: only the engine that is kept gets a ticker.
    Ok(ENGINE
        .get_or_init(|| {
            start_ticker(&engine);
            engine
        })
        .clone())
}

/// Compiles `bytes` for `engine`, or loads the compilation cached in `dir`
/// under the component's content hash and the engine's compatibility hash.
/// Blocking.
pub fn compile_cached(engine: &Engine, dir: &Path, bytes: &[u8]) -> anyhow::Result<Component> {
    let path = cache_path(engine, dir, bytes);
    // Hosts sharing a cache (tests, several instances on one machine) wait
    // for whichever compiles first instead of all compiling at once.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("lock"))?;
    lock.lock()?;
    if path.exists() {
        match checked(&path) {
            // SAFETY: the file was written by `precompile_component` of an
            // engine with the same compatibility hash (it is in the name),
            // in a cache directory only this host writes to, and it reads
            // back as it was written (its checksum).
            Ok(()) => match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok(component),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring a bad cache entry")
                }
            },
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring a damaged cache entry; compiling again")
            }
        }
    }
    let compiled = engine.precompile_component(bytes)?;
    // Durable, then its checksum: a power cut leaves no entry that maps as
    // code without reading back as written.
    crate::files::replace(&path, &compiled)?;
    crate::files::replace(&sum_path(&path), checksum(&compiled).as_bytes())?;
    drop(compiled);
    release_freed_memory();
    // Mapped from the file, as a restart would: only the pages it runs
    // are resident, where a copy of the whole image would be.
    // SAFETY: just written by this engine.
    Ok(unsafe { Component::deserialize_file(engine, &path)? })
}

/// Where the checksum of the cache entry at `path` is kept.
fn sum_path(path: &Path) -> PathBuf {
    path.with_extension("cwasm.sum")
}

/// A cache entry's checksum, as its `.sum` file holds it: length and CRC-32.
fn checksum(bytes: &[u8]) -> String {
    format!("{} {:08x}", bytes.len(), crc32fast::hash(bytes))
}

/// `Ok` if the cache entry at `path` reads back as its checksum says.
fn checked(path: &Path) -> anyhow::Result<()> {
    use std::io::Read;
    let want = std::fs::read_to_string(sum_path(path))
        .map_err(|e| anyhow::anyhow!("its checksum does not read ({e})"))?;
    let mut file = std::fs::File::open(path)?;
    let (mut hasher, mut len) = (crc32fast::Hasher::new(), 0usize);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n;
    }
    let got = format!("{len} {:08x}", hasher.finalize());
    anyhow::ensure!(
        got == want.trim(),
        "it reads {got}, its checksum says {want}"
    );
    Ok(())
}

/// Hands the heap that a compile freed back to the system. Cranelift's
/// working memory for a large component (the embedded model: ~165 MiB) is
/// freed when it finishes, but glibc keeps freed pages in its arenas, so a
/// host's first start (which compiles) held twice the memory of a restart
/// (which loads from the cache). The `switchyard` binary allocates with
/// mimalloc, which returns freed pages itself; this serves what links the
/// library with glibc's allocator (the tests).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn cache_path(engine: &Engine, dir: &Path, bytes: &[u8]) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let engine = hasher.finish();
    dir.join(format!("{}-{engine:016x}.cwasm", content_hash(bytes)))
}

/// The hex SHA-256 of a component: its cache key, and what listings show.
/// Blocking: a component may be tens of MiB.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Calls running now, of every plugin and backend.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Set by every call that starts; the ticker clears it each tick, so it
/// knows whether the host is still busy.
static STARTED: AtomicBool = AtomicBool::new(false);
/// The ticker is waiting on [`WAKE`]: a starting call must wake it.
static ASLEEP: AtomicBool = AtomicBool::new(false);
static WAKE: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

/// Ticks without a call before the ticker sleeps. Under load calls come
/// and go between ticks; waking a sleeping thread for each would cost a
/// futex call and a context switch per call, so the ticker stays awake
/// until the host has been idle this long (200 ms), and an idle host
/// still burns nothing.
const IDLE_TICKS: u32 = 200;

/// Marks a call in flight while it lives: the epoch ticks only then.
pub struct Ticking(());

impl Ticking {
    /// Counts the call in, waking the ticker if it sleeps.
    pub fn start() -> Ticking {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        STARTED.store(true, Ordering::Relaxed);
        // The ticker sets ASLEEP before its last look at RUNNING, so
        // either it sees this call or this call sees it asleep.
        if ASLEEP.load(Ordering::SeqCst) {
            let _lock = WAKE.0.lock().unwrap_or_else(|p| p.into_inner());
            WAKE.1.notify_all();
        }
        Ticking(())
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sleeps until a call is running; returns at once if one is.
fn sleep_until_called() {
    ASLEEP.store(true, Ordering::SeqCst);
    let idle = WAKE.0.lock().unwrap_or_else(|p| p.into_inner());
    // A call that starts after the flag is set notifies under the lock,
    // so no wake-up is missed between this check and the wait.
    let _idle = WAKE
        .1
        .wait_while(idle, |_| RUNNING.load(Ordering::SeqCst) == 0)
        .unwrap_or_else(|p| p.into_inner());
    ASLEEP.store(false, Ordering::SeqCst);
}

/// Advances `engine`'s epoch every tick while calls run (see [`Ticking`]),
/// until the engine is dropped. One thread ticks every engine: each extra
/// thread waking every millisecond costs the host context switches under
/// load.
fn start_ticker(engine: &Engine) {
    static ENGINES: Mutex<Vec<EngineWeak>> = Mutex::new(Vec::new());
    static THREAD: Once = Once::new();
    ENGINES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(engine.weak());
    THREAD.call_once(|| {
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(|| {
                let mut idle_ticks = IDLE_TICKS;
                loop {
                    let busy = STARTED.swap(false, Ordering::Relaxed)
                        || RUNNING.load(Ordering::SeqCst) > 0;
                    idle_ticks = if busy { 0 } else { idle_ticks + 1 };
                    if idle_ticks >= IDLE_TICKS {
                        sleep_until_called();
                        idle_ticks = 0;
                    }
                    let mut engines = ENGINES.lock().unwrap_or_else(|p| p.into_inner());
                    engines.retain(|weak| match weak.upgrade() {
                        Some(engine) => {
                            engine.increment_epoch();
                            true
                        }
                        None => false,
                    });
                    drop(engines);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .expect("starting the epoch thread");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding 5 of issue 67: a cache entry that does not read back as it
    /// was written (a power cut's zeros, a torn file) is compiled again
    /// rather than mapped as code.
    #[test]
    fn a_damaged_cache_entry_is_compiled_again_not_mapped() {
        let engine = model_engine().unwrap();
        let dir = tempfile::tempdir().unwrap();
        // The smallest component: the preamble of the component layer.
        let bytes = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
        compile_cached(&engine, dir.path(), &bytes).unwrap();
        let path = cache_path(&engine, dir.path(), &bytes);
        let written = std::fs::read(&path).unwrap();
        checked(&path).unwrap();
        let mut damaged = written.clone();
        let mid = damaged.len() / 2;
        damaged[mid..mid + 16].iter_mut().for_each(|b| *b ^= 0xff);
        std::fs::write(&path, &damaged).unwrap();
        assert!(checked(&path).is_err(), "zeros inside read as whole");
        compile_cached(&engine, dir.path(), &bytes).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), written, "compiled again");
        std::fs::write(&path, b"").unwrap();
        assert!(checked(&path).is_err(), "an empty entry reads as whole");
        std::fs::remove_file(sum_path(&path)).unwrap();
        assert!(
            checked(&path).is_err(),
            "an entry without its checksum reads as whole"
        );
    }
}
