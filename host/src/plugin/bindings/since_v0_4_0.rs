//! Bindings for `switchyard:plugin@0.4.0` (`wit/v0.4.0`): the model backend
//! whose answers say how many prompt tokens the upstream read from and
//! wrote to its prompt cache.

/// The `model-backend` world at 0.4.0. Exports are async, as at 0.2.0.
pub mod model {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.4.0",
        world: "model-backend",
        exports: { default: async },
    });
}
