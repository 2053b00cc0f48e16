//! Splitting work with the second instance the host keeps of this
//! component on another core (the `parallel` import). Two kinds of task:
//!
//! - **Products**: this instance hands over the quantized activations and a
//!   range of a matrix's weight groups; the second computes those products
//!   with the same kernels (so the results are the same, bit for bit) and
//!   hands them back. Decoding uses it for the output layer.
//! - **A prompt's first part**: prompt evaluation is split by position. The
//!   second instance runs the first part through the layers and sends each
//!   layer's keys and values as soon as it has them; this instance runs the
//!   rest at the same time, taking them as its cache just before its own
//!   attention needs them. Causal attention means the first part needs
//!   nothing from the rest, so the two meet once per layer, and everything
//!   else (attention, norms, quantizing) is split too, not only products.
//!
//! A task is a little-endian u32 naming its kind, then for products five
//! more u32s (matrix, first group, end group, rows, values per row, rows
//! per pack) and the packed activations, whose result is the products, f32
//! little-endian, row by row; for a prompt's first part, its token ids,
//! whose parts are a layer's keys' four dimensions as u32s then the keys
//! and values, f32 little-endian.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{Device, Result, Tensor, bail};

use crate::llama::{Cache, Llama};
use crate::quant::{Activations, GROUP, Registry};

const PRODUCTS: u32 = 0;
const PREFIX: u32 = 1;
const HEADER: usize = 7 * 4;

/// The chunk candle's f32 sum (softmax's denominator) adds in SIMD lanes
/// before it adds the rest in order: 16 values with wasm SIMD, 32 with AVX.
/// A first part that is a whole number of chunks long gives its positions
/// the same sums as in the whole prompt, where their rows are longer only by
/// zeros; any other length changes the order of their additions, and so the
/// last bits of everything after.
const SUM_CHUNK: usize = if cfg!(target_arch = "wasm32") { 16 } else { 32 };

/// False in the second instance, and while a prompt's first part is out:
/// then there is nobody to hand products to.
static HAND_OVER: AtomicBool = AtomicBool::new(true);

/// Hands the products of `activations` with `groups` of matrix `id` to the
/// second instance; false if there is none ready.
pub fn hand_over(id: usize, groups: Range<usize>, activations: &Activations) -> bool {
    HAND_OVER.load(Ordering::Relaxed) && host::start(&task(id, groups, activations))
}

fn task(id: usize, groups: Range<usize>, activations: &Activations) -> Vec<u8> {
    let (rows, cols, pack, data) = activations.parts();
    let mut task = Vec::with_capacity(HEADER + data.len());
    for n in [
        PRODUCTS as usize,
        id,
        groups.start,
        groups.end,
        rows,
        cols,
        pack,
    ] {
        task.extend((n as u32).to_le_bytes());
    }
    task.extend_from_slice(data);
    task
}

/// Writes the products handed over into the last `width` columns of `out`
/// (rows of `stride` values); false if the second instance failed, and the
/// caller must compute them itself.
pub fn take_back(out: &mut [f32], stride: usize, width: usize) -> bool {
    let Ok(bytes) = host::finish() else {
        return false;
    };
    if bytes.len() != 4 * width * (out.len() / stride) {
        return false;
    }
    for (row, bytes) in out.chunks_mut(stride).zip(bytes.chunks_exact(4 * width)) {
        for (value, b) in row[stride - width..].iter_mut().zip(bytes.chunks_exact(4)) {
            *value = f32::from_le_bytes(word(b));
        }
    }
    true
}

/// The logits after prompt `ids` (from position 0), its first part
/// evaluated by the second instance; `None` if the prompt is short or
/// there is no second instance (or it failed), and the caller must evaluate
/// it all here.
pub fn prompt(model: &mut Llama, ids: &[u32]) -> Result<Option<Tensor>> {
    let Some(first) = first_part(ids.len()) else {
        return Ok(None);
    };
    let mut task = PREFIX.to_le_bytes().to_vec();
    task.extend(ids[..first].iter().flat_map(|id| id.to_le_bytes()));
    if !host::start(&task) {
        return Ok(None);
    }
    HAND_OVER.store(false, Ordering::Relaxed);
    let rest = Tensor::new(&ids[first..], &Device::Cpu)?.unsqueeze(0)?;
    let mut receive = || match host::receive() {
        Ok(part) => from_part(&part),
        Err(e) => bail!("the second instance sent no keys and values: {e}"),
    };
    let last = model.evaluate(&rest, first, Cache::Receive(&mut receive));
    HAND_OVER.store(true, Ordering::Relaxed);
    let finished = host::finish();
    match (last, finished) {
        (Ok(last), Ok(_)) => model.logits(&last).map(Some),
        _ => {
            model.clear_kv_cache();
            Ok(None)
        }
    }
}

/// How many of a prompt of `len` positions the second instance evaluates:
/// the whole number of sum chunks nearest half, and no more chunks than the
/// whole prompt's sums take in lanes, leaving this instance at least one
/// position; `None` for a prompt of one chunk or less, which is evaluated here alone (with its large products split).
pub fn first_part(len: usize) -> Option<usize> {
    let nearest = (len / 2 + SUM_CHUNK / 2) / SUM_CHUNK;
    let first = nearest.min(len.saturating_sub(1) / SUM_CHUNK) * SUM_CHUNK;
    (first > 0).then_some(first)
}

/// The second instance's side of a task: its result.
pub fn run(model: &mut Llama, task: &[u8]) -> std::result::Result<Vec<u8>, String> {
    HAND_OVER.store(false, Ordering::Relaxed);
    let mut words = task.chunks_exact(4).map(|b| u32::from_le_bytes(word(b)));
    match words.next() {
        Some(PRODUCTS) => products(model.matrices(), task),
        Some(PREFIX) if task.len().is_multiple_of(4) => {
            let ids: Vec<u32> = words.collect();
            prefix(model, &ids).map_err(|e| format!("evaluating a prompt's first part: {e}"))
        }
        _ => Err(format!(
            "a task of {} bytes is of no kind known here",
            task.len()
        )),
    }
}

/// Runs `ids` through the layers from position 0, sending each layer's
/// keys and values.
fn prefix(model: &mut Llama, ids: &[u32]) -> Result<Vec<u8>> {
    model.clear_kv_cache();
    let ids = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
    let mut send = |k: &Tensor, v: &Tensor| match host::send(&to_part(k, v)?) {
        true => Ok(()),
        false => bail!("the first instance is not listening"),
    };
    model.evaluate(&ids, 0, Cache::Send(&mut send))?;
    Ok(Vec::new())
}

/// A layer's keys and values as a part: the keys' dimensions, then both.
fn to_part(k: &Tensor, v: &Tensor) -> Result<Vec<u8>> {
    let dims = k.dims4()?;
    let mut part = Vec::with_capacity(16 + 8 * k.elem_count());
    for n in <[usize; 4]>::from(dims) {
        part.extend((n as u32).to_le_bytes());
    }
    for t in [k, v] {
        part.extend(
            t.flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .flat_map(|x| x.to_le_bytes()),
        );
    }
    Ok(part)
}

fn from_part(part: &[u8]) -> Result<(Tensor, Tensor)> {
    let Some((header, data)) = part.split_at_checked(16) else {
        bail!("a part of {} bytes has no header", part.len());
    };
    let dims: Vec<usize> = header
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(word(b)) as usize)
        .collect();
    let count: usize = dims.iter().product();
    if data.len() != 8 * count {
        bail!(
            "a part of {} bytes does not hold keys and values of {dims:?}",
            part.len()
        );
    }
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(word(b)))
        .collect();
    let (k, v) = values.split_at(count);
    let tensor = |x: &[f32]| Tensor::from_slice(x, dims.as_slice(), &Device::Cpu);
    Ok((tensor(k)?, tensor(v)?))
}

/// Four bytes of a chunk of four.
fn word(b: &[u8]) -> [u8; 4] {
    [b[0], b[1], b[2], b[3]]
}

/// The second instance's side of a products task.
fn products(matrices: &Registry, task: &[u8]) -> std::result::Result<Vec<u8>, String> {
    if task.len() < HEADER {
        return Err(format!("a task of {} bytes has no header", task.len()));
    }
    let (header, data) = task.split_at(HEADER);
    let field = |i: usize| u32::from_le_bytes(word(&header[4 + 4 * i..])) as usize;
    let [id, start, end, rows, cols, pack] = std::array::from_fn(field);
    let matrix = matrices
        .get(id)
        .ok_or_else(|| format!("there is no matrix {id}"))?;
    if start > end || end > matrix.groups() || cols != matrix.cols() {
        return Err(format!(
            "groups {start}..{end} of {cols} values do not fit matrix {id}"
        ));
    }
    let activations = Activations::from_parts(rows, cols, pack, data.to_vec())
        .ok_or_else(|| format!("{} bytes are not {rows} packed rows of {cols}", data.len()))?;
    let width = (end - start) * GROUP;
    let mut out = vec![0f32; rows * width];
    matrix.products(&activations, start..end, &mut out, width, start * GROUP);
    Ok(out.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// The `parallel` import; native builds (the kernels' tests) have no host.
#[cfg(target_arch = "wasm32")]
mod host {
    pub use crate::switchyard::plugin::parallel::{finish, receive, send, start};
}

#[cfg(not(target_arch = "wasm32"))]
mod host {
    pub fn start(_task: &[u8]) -> bool {
        false
    }

    pub fn finish() -> Result<Vec<u8>, String> {
        Err("no host".into())
    }

    pub fn receive() -> Result<Vec<u8>, String> {
        Err("no host".into())
    }

    pub fn send(_part: &[u8]) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Matrix;
    use crate::quant::tests::{quantized, values};
    use candle_core::quantized::GgmlDType;
    use candle_core::quantized::gguf_file::Content;
    use std::fs::File;
    use std::io::BufReader;
    use std::path::Path;

    /// The second instance's half is the same, bit for bit, as the same
    /// columns of the whole product, for both kinds and both pack sizes
    /// (five rows: two full packs of two and one of one).
    #[test]
    fn a_handed_over_half_matches_the_whole_product() {
        let (m, k, n) = (5, 96, 16);
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
            let mut matrices = Registry::default();
            matrices.add(
                Matrix::from_qtensor(&quantized(n, k, dtype))
                    .unwrap()
                    .unwrap(),
            );
            let matrix = matrices.get(0).unwrap();
            let pack = if dtype == GgmlDType::Q4_1 { 2 } else { 1 };
            let activations = Activations::quantize(&values(m * k, 53), k, pack);
            let mut whole = vec![0f32; m * n];
            matrix.products(&activations, 0..n / GROUP, &mut whole, n, 0);
            let half = products(&matrices, &task(0, 2..4, &activations)).unwrap();
            let half: Vec<f32> = half
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let want: Vec<f32> = whole.chunks(n).flat_map(|row| row[8..].to_vec()).collect();
            assert_eq!(half, want, "{dtype:?}");
        }
    }

    /// A layer's keys and values arrive as they were sent, shape included;
    /// a part cut short is refused.
    #[test]
    fn keys_and_values_cross_whole() {
        let k = Tensor::new(values(2 * 3 * 64, 7), &Device::Cpu)
            .and_then(|t| t.reshape((1, 2, 3, 64)))
            .unwrap();
        let v = (&k * 2.0).unwrap();
        let part = to_part(&k, &v).unwrap();
        let (k2, v2) = from_part(&part).unwrap();
        for (sent, got) in [(&k, &k2), (&v, &v2)] {
            assert_eq!(got.dims(), &[1, 2, 3, 64]);
            let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(flat(got), flat(sent));
        }
        assert!(from_part(&part[..part.len() - 4]).is_err());
        assert!(from_part(&part[..12]).is_err());
    }

    /// The embedded model, as `switchyard model pull` (and `.ci/run`)
    /// fetch it.
    fn smollm() -> Llama {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let file = File::open(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; fetch it with `cargo run -- model pull`",
                path.display()
            )
        });
        let mut reader = BufReader::new(file);
        let content = Content::read(&mut reader).unwrap();
        crate::llama::load(&content, &mut reader).unwrap()
    }

    /// A prompt evaluated in two parts, as the two instances do, gives the
    /// same last output and then the same next tokens' outputs (which read
    /// every layer's keys and values), bit for bit, as evaluated whole: a
    /// reply does not depend on whether the second instance was ready.
    /// Split at half (28 of 56 positions) instead, it does not.
    #[test]
    fn a_prompt_in_two_parts_is_evaluated_as_whole() {
        let (mut one, mut two) = (smollm(), smollm());
        let ids = |ids: &[u32]| Tensor::new(ids, &Device::Cpu)?.unsqueeze(0);
        let bits = |t: Tensor| -> Vec<u32> {
            let values = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            values.iter().map(|x| x.to_bits()).collect()
        };
        for len in [56, 91] {
            let prompt: Vec<u32> = (0..len).map(|i| 100 + 37 * i).collect();
            let first = first_part(prompt.len()).unwrap();
            let whole = one.evaluate(&ids(&prompt).unwrap(), 0, Cache::Own);
            let mut parts = Vec::new();
            let mut send = |k: &Tensor, v: &Tensor| {
                parts.push(to_part(k, v)?);
                Ok(())
            };
            let prefix = ids(&prompt[..first]).unwrap();
            two.evaluate(&prefix, 0, Cache::Send(&mut send)).unwrap();
            let mut parts = parts.into_iter();
            let mut receive = || from_part(&parts.next().unwrap());
            let rest = ids(&prompt[first..]).unwrap();
            let split = two.evaluate(&rest, first, Cache::Receive(&mut receive));
            assert!(
                bits(whole.unwrap()) == bits(split.unwrap()),
                "{len} positions split at {first}"
            );
            for (i, token) in [7, 1000, 42].into_iter().enumerate() {
                let position = prompt.len() + i;
                let next =
                    |m: &mut Llama| bits(m.forward(&ids(&[token]).unwrap(), position).unwrap());
                assert!(
                    next(&mut one) == next(&mut two),
                    "{len} positions, token {i}"
                );
            }
        }
    }

    /// The first part is a whole number of sum chunks, near half, and
    /// leaves this instance at least one position.
    #[test]
    fn first_parts_are_whole_chunks_near_half() {
        for len in 0..=2 * SUM_CHUNK {
            assert_eq!(first_part(len).is_some(), len > SUM_CHUNK, "{len}");
        }
        for len in SUM_CHUNK + 1..1000 {
            let first = first_part(len).unwrap();
            assert_eq!(first % SUM_CHUNK, 0);
            assert!(first < len);
            assert!(
                first.abs_diff(len / 2) <= SUM_CHUNK / 2 || len < 2 * SUM_CHUNK,
                "{len}"
            );
        }
    }

    #[test]
    fn tasks_that_do_not_fit_are_refused() {
        let mut matrices = Registry::default();
        let matrix = quantized(8, 32, GgmlDType::Q8_0);
        matrices.add(Matrix::from_qtensor(&matrix).unwrap().unwrap());
        let activations = Activations::quantize(&values(32, 3), 32, 1);
        assert!(products(&matrices, &task(1, 0..1, &activations)).is_err());
        assert!(products(&matrices, &task(0, 1..3, &activations)).is_err());
        let mut short = task(0, 0..2, &activations);
        short.pop();
        assert!(products(&matrices, &short).is_err());
        assert!(products(&matrices, &short[..10]).is_err());
        assert!(products(&matrices, &task(0, 0..2, &activations)).is_ok());
    }
}
