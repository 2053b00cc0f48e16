//! Loading the GGUF, with 4/5-bit tensors that have no SIMD kernel
//! re-quantized to Q8_0 once and cached.
//!
//! Q8_0 and Q4_1 (SmolLM2's wheel: every matrix) run on our own kernels
//! ([`crate::quant`]), so such a file is read as it is. Q4_0, Q5_0 and Q5_1
//! are dequantized and re-quantized to Q8_0, written to the cache directory
//! so that this happens once per model file.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Result};

/// Opens `cached` if it exists, else converts `source` into it.
pub fn open(source: &Path, cached: &Path) -> Result<(gguf_file::Content, BufReader<File>)> {
    let mut reader = BufReader::new(File::open(source)?);
    let content = gguf_file::Content::read(&mut reader)?;
    let slow = |t: &gguf_file::TensorInfo| needs_requantizing(t.ggml_dtype, t.shape.dims());
    if !content.tensor_infos.values().any(slow) {
        return Ok((content, reader));
    }
    if !cached.exists() {
        convert(source, cached)?;
    }
    let mut reader = BufReader::new(File::open(cached)?);
    let content = gguf_file::Content::read(&mut reader)?;
    Ok((content, reader))
}

fn convert(source: &Path, cached: &Path) -> Result<()> {
    let mut reader = BufReader::new(File::open(source)?);
    let content = gguf_file::Content::read(&mut reader)?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in &names {
        let tensor = content.tensor(&mut reader, name, &Device::Cpu)?;
        tensors.push(requantize(tensor)?);
    }
    let mut metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    metadata.sort_by_key(|(k, _)| *k);
    let named: Vec<(&str, &QTensor)> = names.iter().map(|n| n.as_str()).zip(&tensors).collect();
    // Written beside the target and renamed, so a crash leaves no half file.
    // Unique, since several hosts may share one cache directory.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let temp = cached.with_extension(format!("partial-{nanos}"));
    let mut out = BufWriter::new(File::create(&temp)?);
    gguf_file::write(&mut out, &metadata, &named)?;
    drop(out);
    std::fs::rename(&temp, cached)?;
    Ok(())
}

fn requantize(tensor: QTensor) -> Result<QTensor> {
    if !needs_requantizing(tensor.dtype(), tensor.shape().dims()) {
        return Ok(tensor);
    }
    QTensor::quantize(&tensor.dequantize(&Device::Cpu)?, GgmlDType::Q8_0)
}

fn needs_requantizing(dtype: GgmlDType, dims: &[usize]) -> bool {
    let slow = matches!(dtype, GgmlDType::Q4_0 | GgmlDType::Q5_0 | GgmlDType::Q5_1);
    let row = dims.last().copied().unwrap_or(0);
    slow && row % GgmlDType::Q8_0.block_size() == 0
}
