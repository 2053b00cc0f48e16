//! One chat completion: the chat template, prompt evaluation in one batch,
//! then sampling token by token with stop sequences held back until they
//! can no longer match.

use crate::sample::{Sampler, Sampling};
use candle_core::{Device, Tensor};

use crate::Model;
use crate::exports::switchyard::plugin::backend::{ChatRequest, ChatResult, FinishReason};
use crate::switchyard::plugin::output;

/// Generates a reply to `request`, emitting text as it becomes final.
pub fn chat(model: &mut Model, request: &ChatRequest) -> Result<ChatResult, String> {
    let prompt = render_prompt(&model.template, request)?;
    let encoding = model
        .tokenizer
        .encode(prompt, false)
        .map_err(|e| format!("tokenizing the prompt: {e}"))?;
    let prompt_ids = encoding.get_ids().to_vec();
    let room = model.context.saturating_sub(prompt_ids.len());
    if room == 0 {
        return Err(format!(
            "the prompt is {} tokens; this model's context is {}",
            prompt_ids.len(),
            model.context
        ));
    }
    let limit = request.max_tokens.map_or(room, |m| (m as usize).min(room));
    let mut sampler = Sampler::new(request.seed.unwrap_or(0), sampling(request));
    let mut stream = Stream::new(&request.stop);
    model.weights.clear_kv_cache();
    let mut generated: Vec<u32> = Vec::new();
    let mut next = evaluate_prompt(model, &prompt_ids, &mut sampler)?;
    let mut finish = FinishReason::Length;
    while generated.len() < limit {
        if model.eos.contains(&next) {
            finish = FinishReason::Stop;
            break;
        }
        generated.push(next);
        let text = model
            .tokenizer
            .decode(&generated, true)
            .map_err(|e| format!("decoding: {e}"))?;
        match stream.push(&text) {
            Push::Continue => {}
            Push::Stopped => {
                finish = FinishReason::Stop;
                break;
            }
            Push::ClientGone => break,
        }
        if generated.len() == limit {
            break;
        }
        let position = prompt_ids.len() + generated.len() - 1;
        next = forward(model, &[next], position, &mut sampler)?;
    }
    if matches!(finish, FinishReason::Length) || !stream.stopped {
        stream.flush();
    }
    Ok(ChatResult {
        finish_reason: finish,
        prompt_tokens: prompt_ids.len() as u32,
        completion_tokens: generated.len() as u32,
    })
}

fn sampling(request: &ChatRequest) -> Sampling {
    let temperature = f64::from(request.temperature.unwrap_or(1.0));
    if temperature <= 0.0 {
        return Sampling::ArgMax;
    }
    match request.top_p {
        Some(p) if p < 1.0 => Sampling::TopP {
            p: f64::from(p),
            temperature,
        },
        _ => Sampling::All { temperature },
    }
}

/// Evaluates the prompt, split with the second instance if there is one,
/// and samples the first token.
fn evaluate_prompt(model: &mut Model, ids: &[u32], sampler: &mut Sampler) -> Result<u32, String> {
    let split = crate::split::prompt(&mut model.weights, ids)
        .map_err(|e| format!("running the model: {e}"))?;
    match split {
        Some(logits) => sample(&logits, sampler),
        None => forward(model, ids, 0, sampler),
    }
}

fn sample(logits: &Tensor, sampler: &mut Sampler) -> Result<u32, String> {
    let logits = logits.squeeze(0).map_err(|e| e.to_string())?;
    sampler
        .sample(&logits)
        .map_err(|e| format!("sampling: {e}"))
}

/// Runs `ids` through the model at `position` and samples the next token.
fn forward(
    model: &mut Model,
    ids: &[u32],
    position: usize,
    sampler: &mut Sampler,
) -> Result<u32, String> {
    let input = Tensor::new(ids, &Device::Cpu)
        .and_then(|t| t.unsqueeze(0))
        .map_err(|e| e.to_string())?;
    let logits = model
        .weights
        .forward(&input, position)
        .map_err(|e| format!("running the model: {e}"))?;
    sample(&logits, sampler)
}

fn render_prompt(template: &str, request: &ChatRequest) -> Result<String, String> {
    let mut env = minijinja::Environment::new();
    env.add_template("chat", template)
        .map_err(|e| format!("the model's chat template is invalid: {e}"))?;
    let messages: Vec<minijinja::Value> = request
        .messages
        .iter()
        .map(|m| {
            minijinja::context! { role => m.role.clone(), content => m.content.clone() }
        })
        .collect();
    env.get_template("chat")
        .and_then(|t| {
            t.render(minijinja::context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => "",
                eos_token => "",
            })
        })
        .map_err(|e| format!("applying the chat template: {e}"))
}

enum Push {
    Continue,
    Stopped,
    ClientGone,
}

/// The text so far, what has been emitted, and the stop sequences.
struct Stream<'a> {
    stops: &'a [String],
    text: String,
    emitted: usize,
    stopped: bool,
}

impl<'a> Stream<'a> {
    fn new(stops: &'a [String]) -> Self {
        Stream {
            stops,
            text: String::new(),
            emitted: 0,
            stopped: false,
        }
    }

    /// Takes the whole decoded text so far; emits what is now final.
    fn push(&mut self, text: &str) -> Push {
        // A token that ends inside a UTF-8 sequence decodes to U+FFFD; wait.
        if text.ends_with('\u{FFFD}') {
            return Push::Continue;
        }
        self.text = text.to_string();
        if let Some(at) = self.first_stop() {
            self.stopped = true;
            return self.emit_to(at).map_or(Push::ClientGone, |_| Push::Stopped);
        }
        let safe = self.text.len() - self.held_back();
        self.emit_to(safe)
            .map_or(Push::ClientGone, |_| Push::Continue)
    }

    fn flush(&mut self) {
        let _ = self.emit_to(self.text.len());
    }

    /// Emits text up to byte `end`; `None` when the client has gone.
    fn emit_to(&mut self, end: usize) -> Option<()> {
        if end <= self.emitted {
            return Some(());
        }
        let piece = &self.text[self.emitted..end];
        self.emitted = end;
        output::emit(piece).then_some(())
    }

    fn first_stop(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.text[self.emitted..].find(s.as_str()))
            .min()
            .map(|at| self.emitted + at)
    }

    /// The longest tail of the text that could still begin a stop sequence.
    fn held_back(&self) -> usize {
        let tail = &self.text[self.emitted..];
        self.stops
            .iter()
            .flat_map(|stop| {
                (1..stop.len().min(tail.len() + 1))
                    .rev()
                    .filter(|&n| stop.is_char_boundary(n) && tail.ends_with(&stop[..n]))
                    .take(1)
            })
            .max()
            .unwrap_or(0)
    }
}
