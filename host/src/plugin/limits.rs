//! Per-call limits on a plugin: memory, CPU time and wall-clock time.
//!
//! CPU is bounded by epoch interruption: the engine's epoch ticks every
//! [`EPOCH_TICK`], and a call may run for `cpu_ms` worth of ticks. Epochs
//! cannot interrupt a guest blocked inside a host call, so the whole call is
//! also wrapped in a wall-clock timeout.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Kind;

/// How often the engine's epoch advances.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// The largest linear memory any plugin may have (the pool's slot size).
pub const MAX_MEMORY_BYTES: u64 = 4 << 30;

/// Limits for one plugin's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest linear memory, in bytes.
    pub memory_bytes: u64,
    /// CPU budget of one call, in milliseconds of running time.
    pub cpu_ms: u64,
    /// Wall-clock budget of one call, in milliseconds.
    pub timeout_ms: u64,
}

impl Limits {
    /// Safe defaults for each kind: templates and filters are small and
    /// quick; a model backend may hold weights and generate for minutes.
    /// A backend yields to the host every tick, so only its wall-clock
    /// `timeout_ms` bounds a call; `cpu_ms` does not apply to it.
    pub fn default_for(kind: Kind) -> Limits {
        match kind {
            Kind::PayloadTemplate | Kind::EventFilter => Limits {
                memory_bytes: 64 << 20,
                cpu_ms: 100,
                timeout_ms: 1_000,
            },
            Kind::ModelBackend => Limits {
                memory_bytes: 512 << 20,
                cpu_ms: 120_000,
                timeout_ms: 120_000,
            },
        }
    }

    /// Checks values an operator supplied.
    pub fn validate(&self) -> Result<(), String> {
        if self.memory_bytes < (1 << 20) || self.memory_bytes > MAX_MEMORY_BYTES {
            return Err(format!(
                "memory must be between 1 MiB and {} MiB",
                MAX_MEMORY_BYTES >> 20
            ));
        }
        if self.cpu_ms == 0 || self.timeout_ms == 0 {
            return Err("cpu_ms and timeout_ms must be positive".into());
        }
        Ok(())
    }

    /// The CPU budget in epoch ticks.
    pub fn cpu_ticks(&self) -> u64 {
        (self.cpu_ms * 1000 / EPOCH_TICK.as_micros() as u64).max(1)
    }

    /// The wall-clock budget.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}
