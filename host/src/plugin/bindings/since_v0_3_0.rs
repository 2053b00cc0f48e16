//! Bindings for `switchyard:plugin@0.3.0` (`wit/v0.3.0`): the model backend
//! that also serves embeddings, text completions and the Responses API
//! (`forward`, streamed through `output.emit-event`), and whose errors
//! carry the upstream's HTTP status.

/// The `model-backend` world at 0.3.0. Exports are async, as at 0.2.0.
pub mod model {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.3.0",
        world: "model-backend",
        exports: { default: async },
    });
}
