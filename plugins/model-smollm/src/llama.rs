//! The llama architecture's forward pass, with a key/value cache.
//!
//! The same computation as candle-transformers' `quantized_llama`, op for op,
//! but its matrix products run on [`Matrix`], which candle's model cannot be
//! given. The token embedding is read from the (tied) quantized matrix row by
//! row instead of being kept dequantized (113 MiB of f32 for SmolLM2).

use std::io::{Read, Seek};
use std::sync::Arc;

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{D, DType, Device, IndexOp, Module, Result, Tensor, bail};
use candle_nn::kv_cache::KvCache;

use crate::quant::{Matrix, Registry};

/// The longest context the rotary tables cover.
const MAX_SEQ_LEN: usize = 4096;
/// Positions a layer's key/value cache holds before it grows by as many.
const CACHE_STEP: usize = 512;

/// A loaded model.
pub struct Llama {
    embedding: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
    matrices: Registry,
}

enum Embedding {
    /// Rows dequantized as they are looked up.
    Rows(Arc<Matrix>),
    /// A type without a kernel here: dequantized whole.
    Dense(Tensor),
}

struct Layer {
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    o: QMatMul,
    gate: QMatMul,
    down: QMatMul,
    up: QMatMul,
    attention_norm: RmsNorm,
    ffn_norm: RmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    cos: Tensor,
    sin: Tensor,
    /// Keys and values (1, kv_heads, positions, head_dim), appended in
    /// place: concatenating copied the whole cache for every token.
    cache: KvCache,
}

/// Where a layer's keys and values come from and go to, beyond its own
/// cache: prompt evaluation can be split by position between two instances
/// (see `split`). The instance with the first positions sends each layer's
/// keys and values as soon as it has them; the one with the rest receives
/// them as its cache, just before its attention needs them.
pub enum Cache<'a> {
    /// Only the layer's own cache.
    Own,
    /// Also sends each layer's keys and values on, in layer order.
    Send(&'a mut dyn FnMut(&Tensor, &Tensor) -> Result<()>),
    /// The earlier positions' keys and values, layer by layer, in place of
    /// the cache.
    Receive(&'a mut dyn FnMut() -> Result<(Tensor, Tensor)>),
}

/// Reads the model's tensors (all matrices Q8_0) from a GGUF file.
pub fn load<R: Read + Seek>(content: &Content, reader: &mut R) -> Result<Llama> {
    let meta = |key: &str| match content.metadata.get(key) {
        Some(value) => value.to_u32().map(|v| v as usize),
        None => bail!("the model file has no {key}"),
    };
    let heads = meta("llama.attention.head_count")?;
    let kv_heads = meta("llama.attention.head_count_kv")?;
    let embedding_length = meta("llama.embedding_length")?;
    let rope_dim = meta("llama.rope.dimension_count")?;
    let eps = f64::from(
        content
            .metadata
            .get("llama.attention.layer_norm_rms_epsilon")
            .map_or(Ok(1e-5), |v| v.to_f32())?,
    );
    let freq_base = content
        .metadata
        .get("llama.rope.freq_base")
        .map_or(Ok(10_000.0), |v| v.to_f32())?;
    let (cos, sin) = rotary_tables(rope_dim, freq_base)?;
    let mut tensor = |name: &str| content.tensor(reader, name, &Device::Cpu);
    let mut matrices = Registry::default();
    let token_embd = tensor("token_embd.weight")?;
    let (embedding, tied) = match Matrix::from_qtensor(&token_embd)? {
        Some(m) => {
            let m = matrices.add(m);
            (
                Embedding::Rows(m.clone()),
                QMatMul::from_qtensor(m.to_qtensor()?)?,
            )
        }
        None => (
            Embedding::Dense(token_embd.dequantize(&Device::Cpu)?),
            QMatMul::from_qtensor(token_embd)?,
        ),
    };
    let output = match tensor("output.weight") {
        Ok(t) => matmul(t, &mut matrices)?,
        Err(_) => tied,
    };
    let norm = RmsNorm::from_qtensor(tensor("output_norm.weight")?, eps)?;
    let mut layers = Vec::new();
    for i in 0..meta("llama.block_count")? {
        let mut get = |part: &str| tensor(&format!("blk.{i}.{part}.weight"));
        layers.push(Layer {
            q: matmul(get("attn_q")?, &mut matrices)?,
            k: matmul(get("attn_k")?, &mut matrices)?,
            v: matmul(get("attn_v")?, &mut matrices)?,
            o: matmul(get("attn_output")?, &mut matrices)?,
            gate: matmul(get("ffn_gate")?, &mut matrices)?,
            down: matmul(get("ffn_down")?, &mut matrices)?,
            up: matmul(get("ffn_up")?, &mut matrices)?,
            attention_norm: RmsNorm::from_qtensor(get("attn_norm")?, eps)?,
            ffn_norm: RmsNorm::from_qtensor(get("ffn_norm")?, eps)?,
            heads,
            kv_heads,
            head_dim: embedding_length / heads,
            cos: cos.clone(),
            sin: sin.clone(),
            cache: KvCache::new(2, CACHE_STEP),
        });
    }
    Ok(Llama {
        embedding,
        layers,
        norm,
        output,
        matrices,
    })
}

/// A product on our kernels where there is one, else on candle's.
fn matmul(tensor: QTensor, matrices: &mut Registry) -> Result<QMatMul> {
    match Matrix::from_qtensor(&tensor)? {
        Some(m) => QMatMul::from_qtensor(matrices.add(m).to_qtensor()?),
        None => QMatMul::from_qtensor(tensor),
    }
}

fn rotary_tables(dim: usize, base: f32) -> Result<(Tensor, Tensor)> {
    let theta: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / dim as f32))
        .collect();
    let theta = Tensor::new(theta.as_slice(), &Device::Cpu)?;
    let angles = Tensor::arange(0, MAX_SEQ_LEN as u32, &Device::Cpu)?
        .to_dtype(DType::F32)?
        .reshape((MAX_SEQ_LEN, 1))?
        .matmul(&theta.reshape((1, theta.elem_count()))?)?;
    Ok((angles.cos()?, angles.sin()?))
}

impl Llama {
    /// The matrices our kernels multiply by, in load order.
    pub fn matrices(&self) -> &Registry {
        &self.matrices
    }

    /// Forgets the previous sequence.
    pub fn clear_kv_cache(&mut self) {
        for layer in &mut self.layers {
            layer.cache.reset();
        }
    }

    /// The logits after `ids` (shape (1, n)) placed at `position`.
    pub fn forward(&mut self, ids: &Tensor, position: usize) -> Result<Tensor> {
        let last = self.evaluate(ids, position, Cache::Own)?;
        self.logits(&last)
    }

    /// The logits of a last position's output from [`Llama::evaluate`].
    pub fn logits(&self, last: &Tensor) -> Result<Tensor> {
        self.output.forward(&self.norm.forward(last)?)
    }

    /// Runs `ids` (shape (1, n)) through the layers at `position`; the last
    /// position's output, shape (1, width).
    pub fn evaluate(&mut self, ids: &Tensor, position: usize, mut cache: Cache) -> Result<Tensor> {
        let (_, len) = ids.dims2()?;
        if position + len > MAX_SEQ_LEN {
            bail!("the sequence would be longer than {MAX_SEQ_LEN} tokens");
        }
        let mask = match len {
            1 => None,
            _ => Some(build_causal_mask(len, position, &Device::Cpu)?),
        };
        let mut x = self.embed(ids)?;
        for layer in &mut self.layers {
            let input = layer.attention_norm.forward(&x)?;
            let attention = layer.attention(&input, mask.as_ref(), position, &mut cache)?;
            let x1 = (attention + &x)?;
            let ffn = layer.ffn(&layer.ffn_norm.forward(&x1)?)?;
            x = (ffn + x1)?;
        }
        x.i((.., len - 1, ..))
    }

    fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let ids = ids.flatten_all()?;
        match &self.embedding {
            Embedding::Rows(matrix) => {
                let ids = ids.to_vec1::<u32>()?;
                let mut rows = Vec::with_capacity(ids.len() * matrix.cols());
                for &id in &ids {
                    matrix.dequantize_row(id as usize, &mut rows)?;
                }
                Tensor::from_vec(rows, (1, ids.len(), matrix.cols()), &Device::Cpu)
            }
            Embedding::Dense(table) => table.index_select(&ids, 0)?.unsqueeze(0),
        }
    }
}

impl Layer {
    fn attention(
        &mut self,
        x: &Tensor,
        mask: Option<&Tensor>,
        position: usize,
        cache: &mut Cache,
    ) -> Result<Tensor> {
        let (batch, len, width) = x.dims3()?;
        let heads =
            |t: Tensor, n: usize| t.reshape((batch, len, n, self.head_dim))?.transpose(1, 2);
        let q = heads(self.q.forward(x)?, self.heads)?;
        let k = heads(self.k.forward(x)?, self.kv_heads)?;
        let v = heads(self.v.forward(x)?, self.kv_heads)?.contiguous()?;
        let q = self.rotate(&q, position)?;
        let k = self.rotate(&k, position)?;
        if position == 0 {
            self.cache.reset();
        }
        match cache {
            Cache::Own => {}
            Cache::Send(send) => send(&k, &v)?,
            Cache::Receive(receive) => {
                // The keys received are the sequence's first.
                self.cache.reset();
                let (k0, v0) = receive()?;
                self.cache.append(&k0, &v0)?;
            }
        }
        let (k, v) = self.cache.append(&k, &v)?;
        let y = match mask {
            Some(mask) => self.prompt_attention(&q, &k, &v, mask)?,
            None => self.token_attention(&q, &k, &v)?,
        };
        let y = y.transpose(1, 2)?.reshape((batch, len, width))?;
        self.o.forward(&y)
    }

    /// Attention of several positions (the causal `mask` over the keys'
    /// positions), with each key/value head repeated for its query heads:
    /// the shapes the products always had, which give every position the
    /// same results whether the prompt is split or not.
    fn prompt_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
    ) -> Result<Tensor> {
        let groups = self.heads / self.kv_heads;
        let k = repeat_kv(k.clone(), groups)?;
        let v = repeat_kv(v.clone(), groups)?;
        let scores = (q.matmul(&k.t()?)? / (self.head_dim as f64).sqrt())?;
        let mask = mask.broadcast_as(scores.shape())?;
        let minus_infinity =
            Tensor::new(f32::NEG_INFINITY, &Device::Cpu)?.broadcast_as(scores.shape().dims())?;
        let scores = mask.where_cond(&minus_infinity, &scores)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        weights.matmul(&v.contiguous()?)
    }

    /// Attention of one position, without repeating the cache for each
    /// query head (that copied the whole cache three times per token): the
    /// query heads h·g..(h+1)·g that share key/value head h go in as one
    /// g-row matrix.
    fn token_attention(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let (batch, heads, _, dim) = q.dims4()?;
        let q = q.reshape((batch, self.kv_heads, heads / self.kv_heads, dim))?;
        let scores = (q.matmul(&k.t()?)? / (dim as f64).sqrt())?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        weights.matmul(v)?.reshape((batch, heads, 1, dim))
    }

    /// Rotary position embedding, interleaved as llama GGUFs store it.
    fn rotate(&self, x: &Tensor, position: usize) -> Result<Tensor> {
        let len = x.dim(D::Minus2)?;
        let cos = self.cos.narrow(0, position, len)?;
        let sin = self.sin.narrow(0, position, len)?;
        candle_nn::rotary_emb::rope_i(&x.contiguous()?, &cos, &sin)
    }

    fn ffn(&self, x: &Tensor) -> Result<Tensor> {
        let hidden = crate::activation::swiglu(&self.gate.forward(x)?, &self.up.forward(x)?)?;
        self.down.forward(&hidden)
    }
}

// The three helpers below are candle-transformers' (`quantized_nn::RmsNorm`,
// `utils::build_causal_mask`, `utils::repeat_kv`), written here: they were
// all this crate used of it, and it was a minute of every cold build.

/// RMS normalisation with a learned scale, dequantized once at load.
struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn from_qtensor(weight: QTensor, eps: f64) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: weight.dequantize(&weight.device())?,
            eps: eps as f32,
        })
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm(x, &self.weight, self.eps)
    }
}

/// The mask of a causal attention over `len` new positions after
/// `position` cached ones: 1 where a query must not see a key.
fn build_causal_mask(len: usize, position: usize, device: &Device) -> Result<Tensor> {
    let keys = position + len;
    let mask: Vec<u8> = (0..len)
        .flat_map(|i| (0..keys).map(move |j| u8::from(j > position + i)))
        .collect();
    Tensor::from_slice(&mask, (len, keys), device)
}

/// Each key/value head repeated `times` times, for grouped-query
/// attention (`cat` is faster than a broadcast's strided copy).
fn repeat_kv(xs: Tensor, times: usize) -> Result<Tensor> {
    if times == 1 {
        return Ok(xs);
    }
    let (batch, heads, len, dim) = xs.dims4()?;
    Tensor::cat(&vec![&xs; times], 2)?.reshape((batch, heads * times, len, dim))
}
