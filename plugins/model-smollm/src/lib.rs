//! `model-smollm`: the embedded chat model. Runs a llama-architecture GGUF
//! (SmolLM2-135M-Instruct by default) with candle inside WebAssembly.
//!
//! The host preopens the model's directory read-only at `/model` and a cache
//! directory read-write at `/cache`, and names the file in `MODEL_FILE` and
//! the model's id in `MODEL_ID`. Weights load on the first call and stay
//! loaded: the host keeps this instance for the life of the process.
//!
//! The host may keep a second instance on another core (the `parallel`
//! import): prompt evaluation hands it the prompt's first part, and large
//! matrix products half their rows (`split`).

mod activation;
mod generate;
mod llama;
mod quant;
mod sample;
mod split;
mod tokenizer;
mod weights;

wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "model-backend-parallel" });

use std::cell::RefCell;
use std::path::Path;

use candle_core::quantized::gguf_file::Content;
use exports::switchyard::plugin::backend::{ChatRequest, ChatResult, Guest, ModelInfo};
use switchyard::plugin::types::PluginError;

/// Used when the GGUF carries no chat template: SmolLM2's own.
const DEFAULT_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Everything loaded from the model file.
pub struct Model {
    weights: llama::Llama,
    tokenizer: tokenizers::Tokenizer,
    template: String,
    eos: Vec<u32>,
    context: usize,
}

thread_local! {
    static MODEL: RefCell<Option<Model>> = const { RefCell::new(None) };
}

fn model_id() -> String {
    std::env::var("MODEL_ID").unwrap_or_else(|_| "SmolLM2-135M-Instruct".into())
}

fn err(message: impl Into<String>) -> PluginError {
    PluginError {
        code: "model-error".into(),
        message: message.into(),
        position: None,
    }
}

fn load() -> Result<Model, String> {
    let file = std::env::var("MODEL_FILE").map_err(|_| "MODEL_FILE is not set".to_string())?;
    let source = Path::new("/model").join(&file);
    let stem = Path::new(&file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let cached = Path::new("/cache").join(format!("{stem}.q8_0.gguf"));
    let (content, mut reader) = weights::open(&source, &cached)
        .map_err(|e| format!("loading {}: {e}", source.display()))?;
    let tokenizer = tokenizer::from_gguf(&content)?;
    let template = metadata_string(&content, "tokenizer.chat_template")
        .unwrap_or_else(|| DEFAULT_TEMPLATE.to_string());
    let mut eos: Vec<u32> = ["tokenizer.ggml.eos_token_id"]
        .iter()
        .filter_map(|k| content.metadata.get(*k).and_then(|v| v.to_u32().ok()))
        .collect();
    // Chat models end a turn with their end-of-turn marker.
    eos.extend(tokenizer.token_to_id("<|im_end|>"));
    let context = content
        .metadata
        .get("llama.context_length")
        .and_then(|v| v.to_u32().ok())
        .unwrap_or(2048) as usize;
    let weights =
        llama::load(&content, &mut reader).map_err(|e| format!("reading the weights: {e}"))?;
    Ok(Model {
        weights,
        tokenizer,
        template,
        eos,
        context,
    })
}

fn metadata_string(content: &Content, key: &str) -> Option<String> {
    content
        .metadata
        .get(key)
        .and_then(|v| v.to_string().ok())
        .cloned()
}

/// Runs `f` with the model, loading it first if needed.
fn with_model<R>(f: impl FnOnce(&mut Model) -> Result<R, String>) -> Result<R, PluginError> {
    MODEL.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(load().map_err(err)?);
        }
        f(slot.as_mut().expect("loaded above")).map_err(err)
    })
}

struct SmolLm;

impl Guest for SmolLm {
    fn list_models() -> Vec<ModelInfo> {
        vec![ModelInfo {
            id: model_id(),
            owned_by: "switchyard".into(),
            created: 1_730_419_200,
        }]
    }

    /// Cheap: the model file is readable. Weights load on the first chat.
    fn health() -> Result<(), PluginError> {
        let file = std::env::var("MODEL_FILE").map_err(|_| err("MODEL_FILE is not set"))?;
        std::fs::metadata(Path::new("/model").join(&file))
            .map(|_| ())
            .map_err(|e| err(format!("the model file {file} cannot be read: {e}")))
    }

    fn chat(request: ChatRequest) -> Result<ChatResult, PluginError> {
        if request.model != model_id() {
            return Err(err(format!(
                "this backend serves {}, not {}",
                model_id(),
                request.model
            )));
        }
        with_model(|model| generate::chat(model, &request))
    }
}

/// The second instance's side: the same model, given work to do.
impl exports::switchyard::plugin::worker::Guest for SmolLm {
    fn run(task: Vec<u8>) -> Result<Vec<u8>, String> {
        let result = with_model(|model| match task.is_empty() {
            true => Ok(Vec::new()),
            false => split::run(&mut model.weights, &task),
        });
        result.map_err(|e| e.message)
    }
}

export!(SmolLm);
