//! Bindings for `switchyard:plugin@0.1.0` (`wit/v0.1.0`).

/// The `payload-template` world.
pub mod template {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1.0",
        world: "payload-template",
        imports: { default: async },
        exports: { default: async },
    });
}

/// The `event-filter` world.
pub mod filter {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1.0",
        world: "event-filter",
        imports: { default: async },
        exports: { default: async },
        // One Rust type for the shared `types` interface.
        with: { "switchyard:plugin/types": super::template::switchyard::plugin::types },
    });
}

/// The `model-backend` world. Exports are async (generation is long and
/// yields to tokio); the `output` import is a plain function.
pub mod model {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1.0",
        world: "model-backend",
        exports: { default: async },
        with: { "switchyard:plugin/types": super::template::switchyard::plugin::types },
    });
}

/// The `model-backend-parallel` world: a model backend that splits its work
/// with a second instance of itself. Only what it adds is generated here:
/// the `parallel` import (async: `finish` waits for the other thread) and
/// the `worker` export.
pub mod model_parallel {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1.0",
        world: "model-backend-parallel",
        imports: { default: async },
        exports: { default: async },
        with: {
            "switchyard:plugin/types": super::template::switchyard::plugin::types,
            "switchyard:plugin/output": super::model::switchyard::plugin::output,
        },
    });
}
