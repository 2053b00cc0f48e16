//! Bindings for `switchyard:plugin@0.1.0` (`wit/v0.1.0`).
#![allow(missing_docs)]

/// The `payload-template` world.
pub mod template {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "payload-template",
        imports: { default: async },
        exports: { default: async },
    });
}

/// The `event-filter` world.
pub mod filter {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "event-filter",
        imports: { default: async },
        exports: { default: async },
        // One Rust type for the shared `types` interface.
        with: { "switchyard:plugin/types": super::template::switchyard::plugin::types },
    });
}
