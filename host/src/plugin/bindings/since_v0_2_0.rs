//! Bindings for `switchyard:plugin@0.2.0` (`wit/v0.2.0`): the model backend
//! that passes OpenAI's tool calls, structured output, log probabilities and
//! several choices through; and the event filter with change and z-score
//! conditions. Templates stay at 0.1.0.

/// The `model-backend` world. Exports are async (generation is long and
/// yields to tokio); the `output` import is a plain function.
pub mod model {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2.0",
        world: "model-backend",
        exports: { default: async },
    });
}

/// The `event-filter` world at 0.2.0: change and z-score conditions, the
/// event's collection, and a verdict that says what fired.
pub mod filter {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2.0",
        world: "event-filter",
        imports: { default: async },
        exports: { default: async },
        with: { "switchyard:plugin/types": super::model::switchyard::plugin::types },
    });
}
