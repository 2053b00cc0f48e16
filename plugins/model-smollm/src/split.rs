//! Splitting a matrix product with the second instance the host keeps of
//! this component on another core (the `parallel` import): this instance
//! hands over the quantized activations and a range of weight groups, the
//! second computes those products with the same kernels (so the results are
//! the same, bit for bit) and hands them back.
//!
//! A task is six little-endian u32s (matrix, first group, end group, rows,
//! values per row, rows per pack) and the packed activations; its result
//! is the products, f32 little-endian, row by row.

use std::ops::Range;

use crate::quant::{Activations, GROUP, Registry};

const HEADER: usize = 6 * 4;

/// Hands the products of `activations` with `groups` of matrix `id` to the
/// second instance; false if there is none ready.
pub fn hand_over(id: usize, groups: Range<usize>, activations: &Activations) -> bool {
    host::start(&task(id, groups, activations))
}

fn task(id: usize, groups: Range<usize>, activations: &Activations) -> Vec<u8> {
    let (rows, cols, pack, data) = activations.parts();
    let mut task = Vec::with_capacity(HEADER + data.len());
    for n in [id, groups.start, groups.end, rows, cols, pack] {
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
            *value = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    true
}

/// The second instance's side: the products a task asks for.
pub fn run(matrices: &Registry, task: &[u8]) -> Result<Vec<u8>, String> {
    if task.len() < HEADER {
        return Err(format!("a task of {} bytes has no header", task.len()));
    }
    let (header, data) = task.split_at(HEADER);
    let field = |i: usize| {
        let b = &header[4 * i..4 * i + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
    };
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
    pub use crate::switchyard::plugin::parallel::{finish, start};
}

#[cfg(not(target_arch = "wasm32"))]
mod host {
    pub fn start(_task: &[u8]) -> bool {
        false
    }

    pub fn finish() -> Result<Vec<u8>, String> {
        Err("no host".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Matrix;
    use crate::quant::tests::{quantized, values};
    use candle_core::quantized::GgmlDType;

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
            let half = run(&matrices, &task(0, 2..4, &activations)).unwrap();
            let half: Vec<f32> = half
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let want: Vec<f32> = whole.chunks(n).flat_map(|row| row[8..].to_vec()).collect();
            assert_eq!(half, want, "{dtype:?}");
        }
    }

    #[test]
    fn tasks_that_do_not_fit_are_refused() {
        let mut matrices = Registry::default();
        let matrix = quantized(8, 32, GgmlDType::Q8_0);
        matrices.add(Matrix::from_qtensor(&matrix).unwrap().unwrap());
        let activations = Activations::quantize(&values(32, 3), 32, 1);
        assert!(run(&matrices, &task(1, 0..1, &activations)).is_err());
        assert!(run(&matrices, &task(0, 1..3, &activations)).is_err());
        let mut short = task(0, 0..2, &activations);
        short.pop();
        assert!(run(&matrices, &short).is_err());
        assert!(run(&matrices, &short[..10]).is_err());
        assert!(run(&matrices, &task(0, 0..2, &activations)).is_ok());
    }
}
