//! The tokenizer, built from the GGUF's own vocabulary and merges.
//!
//! candle's GGUF tokenizer builder is compiled out on wasm32, so this builds
//! the byte-level BPE that SmolLM2 (and GPT-2 style llama models) use:
//! digits split one by one, then byte-level pre-tokenization; tokens whose
//! `token_type` is 3 (control) are special, so chat markers encode as one id.

use candle_core::quantized::gguf_file::Content;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

const CONTROL: i32 = 3;

/// Builds the tokenizer described by `content`'s `tokenizer.ggml.*` keys.
pub fn from_gguf(content: &Content) -> Result<Tokenizer, String> {
    let get = |key: &str| {
        content
            .metadata
            .get(key)
            .ok_or_else(|| format!("the model file has no {key}"))
    };
    let text = |v: &candle_core::quantized::gguf_file::Value| {
        v.to_string().cloned().map_err(|e| e.to_string())
    };
    let tokens = get("tokenizer.ggml.tokens")?
        .to_vec()
        .map_err(|e| e.to_string())?
        .iter()
        .map(text)
        .collect::<Result<Vec<String>, String>>()?;
    let merges = get("tokenizer.ggml.merges")?
        .to_vec()
        .map_err(|e| e.to_string())?
        .iter()
        .map(|m| {
            let m = text(m)?;
            let (a, b) = m.split_once(' ').ok_or(format!("bad merge '{m}'"))?;
            Ok((a.to_string(), b.to_string()))
        })
        .collect::<Result<Vec<(String, String)>, String>>()?;
    let types: Vec<i32> = match content.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|t| t.to_i32().unwrap_or(1))
            .collect(),
        None => Vec::new(),
    };
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), id as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| e.to_string())?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![
        PreTokenizerWrapper::Digits(Digits::new(true)),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
    ]))));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, t)| **t == CONTROL)
        .map(|(token, _)| AddedToken::from(token.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(special)
        .map_err(|e| e.to_string())?;
    Ok(tokenizer)
}
