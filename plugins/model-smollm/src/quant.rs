//! Quantized weight matrices laid out for wasm SIMD, and the matrix product
//! candle calls on them.
//!
//! candle's own kernels convert two f16 scales in software for every
//! 32-value block (wasm has no f16 instructions), and have no SIMD kernel at
//! all for Q4_1, the format SmolLM2's wheel ships. Here scales are widened
//! to f32 once, at load, and rows are stored in groups of four, interleaved
//! block by block, so a kernel takes four rows at a time along one pointer
//! and loads each activation block once per four rows:
//! - Q8_0 (the tied embedding / output matrix): 16-bit multiply-adds, summed
//!   in the same order as candle's kernel, so bit for bit the same results;
//! - Q4_1 (every other matrix): relaxed SIMD's 8-bit dot product, which takes
//!   the unsigned nibbles as they are (`pmaddubsw` on x86). Decoding reads
//!   every weight once per token, so half the bytes of Q8_0 is most of the
//!   speed.

use std::ops::Range;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QStorage, QTensor, QuantizedType};
use candle_core::{CpuStorage, Result, bail};
use half::f16;

/// Values per block; each block has its own scale.
const BLOCK: usize = 32;
/// Rows a kernel takes at once, and the rows of a group in the layout.
pub const GROUP: usize = 4;
/// Products of at least this many multiply-adds are split with the host's
/// second instance: every product of prompt evaluation, and the output
/// layer's for each token. Handing half over and back costs tens of
/// microseconds; this much work takes about a millisecond.
const SPLIT_WORK: usize = 1 << 22;

/// A row-major matrix of quantized rows of `cols` values, stored in groups
/// of four rows. Per group and block: the four rows' f32 scales, for Q4_1
/// their four f32 minimums, then each row's block of values. A kernel walks
/// one pointer through a group.
pub struct Matrix {
    rows: usize,
    cols: usize,
    kind: Kind,
    data: Vec<u8>,
    /// Its index in the model's [`Registry`], if it is in one.
    id: Option<usize>,
}

/// The model's matrices in load order. The second instance loads the same
/// file the same way, so an index names the same matrix in both.
#[derive(Default)]
pub struct Registry(Vec<Arc<Matrix>>);

impl Registry {
    /// Adds `matrix` under the next index.
    pub fn add(&mut self, mut matrix: Matrix) -> Arc<Matrix> {
        matrix.id = Some(self.0.len());
        let matrix = Arc::new(matrix);
        self.0.push(matrix.clone());
        matrix
    }

    /// The matrix added `id`th.
    pub fn get(&self, id: usize) -> Option<&Matrix> {
        self.0.get(id).map(|m| &**m)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// x = scale · q; one signed byte per value.
    Q8,
    /// x = scale · q + min; two unsigned nibbles per byte: value j of a
    /// block in the low nibble of byte j, value j + 16 in the high nibble.
    Q4_1,
}

impl Kind {
    /// Bytes of one row's values in a block.
    fn values(self) -> usize {
        match self {
            Kind::Q8 => BLOCK,
            Kind::Q4_1 => BLOCK / 2,
        }
    }

    /// Bytes of a group's block: scales (and minimums), then values.
    fn stride(self) -> usize {
        self.header() + GROUP * self.values()
    }

    fn header(self) -> usize {
        match self {
            Kind::Q8 => 4 * GROUP,
            Kind::Q4_1 => 8 * GROUP,
        }
    }
}

/// The four f32 lanes of `v`, in order.
#[cfg(target_feature = "simd128")]
fn f32_lanes(v: core::arch::wasm32::v128) -> [f32; 4] {
    use core::arch::wasm32::f32x4_extract_lane;
    [
        f32x4_extract_lane::<0>(v),
        f32x4_extract_lane::<1>(v),
        f32x4_extract_lane::<2>(v),
        f32x4_extract_lane::<3>(v),
    ]
}

fn f32_at(bytes: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

impl Matrix {
    /// Converts a GGUF tensor of shape (rows, cols) if it is Q8_0 or Q4_1
    /// with whole groups and blocks; `None` for anything else.
    pub fn from_qtensor(tensor: &QTensor) -> Result<Option<Matrix>> {
        let (rows, cols) = tensor.shape().dims2()?;
        let kind = match tensor.dtype() {
            GgmlDType::Q8_0 => Kind::Q8,
            GgmlDType::Q4_1 => Kind::Q4_1,
            _ => return Ok(None),
        };
        if cols % BLOCK != 0 || rows % GROUP != 0 {
            return Ok(None);
        }
        let source = tensor.data()?;
        let size = tensor.dtype().type_size();
        let blocks = cols / BLOCK;
        if source.len() != rows * blocks * size {
            bail!(
                "a {:?} tensor of {rows}x{cols} holds {} bytes",
                tensor.dtype(),
                source.len()
            );
        }
        let half = |at: usize| f16::from_le_bytes([source[at], source[at + 1]]).to_f32();
        let mut data = Vec::with_capacity(rows / GROUP * blocks * kind.stride());
        for group in 0..rows / GROUP {
            for b in 0..blocks {
                let at = |r: usize| ((group * GROUP + r) * blocks + b) * size;
                for r in 0..GROUP {
                    data.extend(half(at(r)).to_le_bytes());
                }
                if kind == Kind::Q4_1 {
                    for r in 0..GROUP {
                        data.extend(half(at(r) + 2).to_le_bytes());
                    }
                }
                for r in 0..GROUP {
                    data.extend_from_slice(&source[at(r) + size - kind.values()..at(r) + size]);
                }
            }
        }
        Ok(Some(Matrix {
            rows,
            cols,
            kind,
            data,
            id: None,
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

    /// Its groups of four rows.
    pub fn groups(&self) -> usize {
        self.rows / GROUP
    }

    /// Appends row `row`, dequantized, to `out`.
    pub fn dequantize_row(&self, row: usize, out: &mut Vec<f32>) -> Result<()> {
        if row >= self.rows {
            bail!("row {row} of a matrix of {} rows", self.rows);
        }
        let (group, r) = (self.group(row / GROUP), row % GROUP);
        let kind = self.kind;
        for block in group.chunks_exact(kind.stride()) {
            let scale = f32_at(block, 4 * r);
            let values = &block[kind.header() + r * kind.values()..][..kind.values()];
            match kind {
                Kind::Q8 => out.extend(values.iter().map(|&q| q as i8 as f32 * scale)),
                Kind::Q4_1 => {
                    let min = f32_at(block, 4 * (GROUP + r));
                    out.extend(values.iter().map(|&q| (q & 0x0F) as f32 * scale + min));
                    out.extend(values.iter().map(|&q| (q >> 4) as f32 * scale + min));
                }
            }
        }
        Ok(())
    }

    /// The bytes of group `g` (rows 4g..4g+4).
    fn group(&self, g: usize) -> &[u8] {
        let size = self.cols / BLOCK * self.kind.stride();
        &self.data[g * size..(g + 1) * size]
    }

    /// `dst[i][j]` = the dot product of activation row `i` with row `j`.
    /// A large product's second half of the rows goes to the second
    /// instance, if there is one; if it fails, this one does that half too.
    fn matmul(&self, (m, k, n): (usize, usize, usize), lhs: &[f32], dst: &mut [f32]) {
        // Prompt evaluation multiplies many rows by the same weights: Q4_1
        // takes two rows at a time, unpacking each weight block once for both.
        let pack = if self.kind == Kind::Q4_1 { 2 } else { 1 };
        let activations = Activations::quantize(&lhs[..m * k], k, pack);
        let dst = &mut dst[..m * n];
        let all = 0..self.groups();
        let handed = match self.id {
            Some(id) if m * k * n >= SPLIT_WORK && all.len() >= 2 => {
                let theirs = all.len() / 2..all.end;
                crate::split::hand_over(id, theirs.clone(), &activations).then_some(theirs)
            }
            _ => None,
        };
        let Some(theirs) = handed else {
            return self.products(&activations, all, dst, n, 0);
        };
        self.products(&activations, 0..theirs.start, dst, n, 0);
        let width = theirs.len() * GROUP;
        if !crate::split::take_back(dst, n, width) {
            self.products(&activations, theirs, dst, n, 0);
        }
    }

    /// Fills `out`, the activations' rows of `stride` values, with their
    /// products with the rows of `groups`; group g's four products go to
    /// columns 4g - `first` onwards.
    pub fn products(
        &self,
        activations: &Activations,
        groups: Range<usize>,
        out: &mut [f32],
        stride: usize,
        first: usize,
    ) {
        let at = |g: usize| g * GROUP - first;
        for (p, out) in out.chunks_mut(activations.pack * stride).enumerate() {
            let a = activations.pack(p);
            let groups = groups.clone();
            match (self.kind, out.len() / stride) {
                (Kind::Q8, _) => {
                    self.pack_products(a, groups, out, stride, at, |g, a| [kernel::q8(g, a)])
                }
                (Kind::Q4_1, 2) => {
                    self.pack_products(a, groups, out, stride, at, kernel::q4_1::<2>)
                }
                (Kind::Q4_1, _) => {
                    self.pack_products(a, groups, out, stride, at, kernel::q4_1::<1>)
                }
            }
        }
    }

    /// Fills `out`, N rows of `stride` values, with `kernel`'s products of
    /// a pack of N activation rows with `groups`, group g's at column
    /// `at(g)`.
    fn pack_products<const N: usize>(
        &self,
        pack: &[u8],
        groups: Range<usize>,
        out: &mut [f32],
        stride: usize,
        at: impl Fn(usize) -> usize,
        kernel: impl Fn(&[u8], &[u8]) -> [[f32; GROUP]; N],
    ) {
        for g in groups {
            for (r, product) in kernel(self.group(g), pack).iter().enumerate() {
                out[r * stride + at(g)..][..GROUP].copy_from_slice(product);
            }
        }
    }
}

/// Activations quantized the way candle quantizes them for a Q8_0 product:
/// per block, scale = max |x| / 127 rounded to f16, and x / scale rounded.
/// Rows are packed `pack` at a time (the last pack may hold fewer) so that a
/// kernel walks one pointer: per block, a 16-byte header of each row's scale
/// then each row's `scale · Σ quants` (for Q4_1's minimum), then each row's
/// quants.
pub struct Activations {
    rows: usize,
    cols: usize,
    pack: usize,
    data: Vec<u8>,
}

/// Bytes of a pack's block header: two rows' scales and scaled sums.
const HEADER: usize = 16;

impl Activations {
    /// Bytes of one block of a pack of `rows` rows.
    const fn stride(rows: usize) -> usize {
        HEADER + rows * BLOCK
    }

    /// Bytes of `rows` rows of `cols` values packed `pack` at a time.
    const fn size(rows: usize, cols: usize, pack: usize) -> usize {
        let blocks = cols / BLOCK;
        let last = match rows % pack {
            0 => 0,
            n => blocks * Self::stride(n),
        };
        rows / pack * blocks * Self::stride(pack) + last
    }

    /// Rows of `cols` values from `xs`, packed `pack` (1 or 2) at a time.
    pub fn quantize(xs: &[f32], cols: usize, pack: usize) -> Activations {
        assert!((1..=2).contains(&pack), "the header holds two rows");
        let mut data = Vec::with_capacity(xs.len() / BLOCK * Self::stride(pack));
        for rows in xs.chunks(pack * cols) {
            let n = rows.len() / cols;
            for b in 0..cols / BLOCK {
                let mut header = [0f32; 4];
                let mut quants = [[0i8; BLOCK]; 2];
                for r in 0..n {
                    let block = &rows[r * cols + b * BLOCK..][..BLOCK];
                    let scale = rounding::max_abs(block) / 127.0;
                    let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
                    let sum = rounding::round_to_i8(block, inverse, &mut quants[r]);
                    header[r] = f16::from_f32(scale).to_f32();
                    header[n + r] = header[r] * sum as f32;
                }
                data.extend(header.iter().flat_map(|h| h.to_le_bytes()));
                data.extend(quants[..n].iter().flatten().map(|&q| q as u8));
            }
        }
        Activations {
            rows: xs.len() / cols,
            cols,
            pack,
            data,
        }
    }

    /// Activations as [`Activations::parts`] gave them, if they are whole.
    pub fn from_parts(rows: usize, cols: usize, pack: usize, data: Vec<u8>) -> Option<Activations> {
        let whole = (1..=2).contains(&pack)
            && cols.is_multiple_of(BLOCK)
            && data.len() == Self::size(rows, cols, pack);
        whole.then_some(Activations {
            rows,
            cols,
            pack,
            data,
        })
    }

    /// Rows, values per row, rows per pack, and the packed bytes.
    pub fn parts(&self) -> (usize, usize, usize, &[u8]) {
        (self.rows, self.cols, self.pack, &self.data)
    }

    /// The bytes of pack `p`.
    fn pack(&self, p: usize) -> &[u8] {
        let size = self.cols / BLOCK * Self::stride(self.pack);
        let rest = &self.data[p * size..];
        &rest[..size.min(rest.len())]
    }
}

/// A block's largest magnitude, and its values scaled and rounded half away
/// from zero to `i8` (`f32::round` then `as`), with SIMD when the target has
/// it. On wasm `f32::max` and `f32::round` are calls into libm, one per
/// value, which took a fifth of prompt evaluation.
mod rounding {
    use super::BLOCK;

    #[cfg(not(target_feature = "simd128"))]
    pub fn max_abs(block: &[f32]) -> f32 {
        block.iter().fold(0f32, |m, x| m.max(x.abs()))
    }

    /// Writes the rounded values to `out`; returns their sum.
    #[cfg(not(target_feature = "simd128"))]
    pub fn round_to_i8(block: &[f32], inverse: f32, out: &mut [i8; BLOCK]) -> i32 {
        for (q, &x) in out.iter_mut().zip(block) {
            *q = f32::round(x * inverse) as i8;
        }
        out.iter().map(|&q| i32::from(q)).sum()
    }

    /// The same as the fold over `f32::max` for every block without NaN.
    #[cfg(target_feature = "simd128")]
    pub fn max_abs(block: &[f32]) -> f32 {
        use core::arch::wasm32::*;
        let mut m = f32x4_splat(0.0);
        for x in block.chunks_exact(4) {
            // SAFETY: `x` is four f32s.
            let x = unsafe { v128_load(x.as_ptr().cast()) };
            m = f32x4_max(m, f32x4_abs(x));
        }
        super::f32_lanes(m).iter().fold(0f32, |a, &b| a.max(b))
    }

    /// Writes the rounded values to `out`; returns their sum. `x - trunc(x)`
    /// is exact, so stepping away from zero where it is at least a half
    /// gives `f32::round`'s result bit for bit.
    #[cfg(target_feature = "simd128")]
    pub fn round_to_i8(block: &[f32], inverse: f32, out: &mut [i8; BLOCK]) -> i32 {
        use core::arch::wasm32::*;
        assert_eq!(block.len(), BLOCK);
        let inverse = f32x4_splat(inverse);
        let (half, one, sign) = (f32x4_splat(0.5), f32x4_splat(1.0), f32x4_splat(-0.0));
        let mut ints = [i32x4_splat(0); BLOCK / 4];
        for (int, x) in ints.iter_mut().zip(block.chunks_exact(4)) {
            // SAFETY: `x` is four f32s.
            let x = f32x4_mul(unsafe { v128_load(x.as_ptr().cast()) }, inverse);
            let t = f32x4_trunc(x);
            let away = f32x4_ge(f32x4_abs(f32x4_sub(x, t)), half);
            let step = v128_and(away, v128_or(one, v128_and(x, sign)));
            // Saturating, and NaN becomes 0, as `as` does.
            *int = i32x4_trunc_sat_f32x4(f32x4_add(t, step));
        }
        let mut sum = i32x4_splat(0);
        for (bytes, ints) in out.chunks_exact_mut(16).zip(ints.chunks_exact(4)) {
            let low = i16x8_narrow_i32x4(ints[0], ints[1]);
            let high = i16x8_narrow_i32x4(ints[2], ints[3]);
            // SAFETY: `bytes` is sixteen i8s.
            unsafe { v128_store(bytes.as_mut_ptr().cast(), i8x16_narrow_i16x8(low, high)) };
            for &int in ints {
                sum = i32x4_add(sum, int);
            }
        }
        i32x4_extract_lane::<0>(sum)
            + i32x4_extract_lane::<1>(sum)
            + i32x4_extract_lane::<2>(sum)
            + i32x4_extract_lane::<3>(sum)
    }
}

/// The four dot products of a group's rows with an activation row, with
/// SIMD when the target has it, else the same sums one value at a time.
mod kernel {
    use super::{Activations, BLOCK, GROUP, HEADER, Kind};

    /// Checks the lengths every kernel's unchecked reads rely on; returns
    /// the number of blocks.
    fn check(group: &[u8], pack: &[u8], kind: Kind, rows: usize) -> usize {
        let blocks = pack.len() / Activations::stride(rows);
        assert_eq!(pack.len(), blocks * Activations::stride(rows));
        assert_eq!(group.len(), blocks * kind.stride());
        blocks
    }

    /// Lane `i` of `v` across a whole vector (one `pshufd` on x86, where a
    /// load-and-splat of an f32 takes three instructions).
    #[cfg(target_feature = "simd128")]
    fn lane(v: core::arch::wasm32::v128, i: usize) -> core::arch::wasm32::v128 {
        use core::arch::wasm32::i32x4_shuffle;
        match i {
            0 => i32x4_shuffle::<0, 0, 0, 0>(v, v),
            1 => i32x4_shuffle::<1, 1, 1, 1>(v, v),
            2 => i32x4_shuffle::<2, 2, 2, 2>(v, v),
            _ => i32x4_shuffle::<3, 3, 3, 3>(v, v),
        }
    }

    #[cfg(target_feature = "simd128")]
    pub fn q8(group: &[u8], pack: &[u8]) -> [f32; 4] {
        use core::arch::wasm32::*;
        let blocks = check(group, pack, Kind::Q8, 1);
        let mut acc = [f32x4_splat(0.0); GROUP];
        // SAFETY: each block reads `Kind::Q8.stride()` bytes of the group and
        // `Activations::stride(1)` of the pack, lengths checked above.
        unsafe {
            let (mut w, mut p) = (group.as_ptr(), pack.as_ptr());
            for _ in 0..blocks {
                let q = p.add(HEADER);
                let x = [0, 8, 16, 24].map(|o| i16x8_load_extend_i8x8(q.add(o).cast()));
                let d = f32x4_mul(v128_load(w.cast()), lane(v128_load(p.cast()), 0));
                let q = w.add(16).cast::<i8>();
                for (r, acc) in acc.iter_mut().enumerate() {
                    let q = q.add(r * BLOCK);
                    let mut sum = i32x4_dot_i16x8(i16x8_load_extend_i8x8(q), x[0]);
                    for (o, &x) in [8, 16, 24].iter().zip(&x[1..]) {
                        let y = i16x8_load_extend_i8x8(q.add(*o));
                        sum = i32x4_add(sum, i32x4_dot_i16x8(y, x));
                    }
                    *acc = f32x4_add(*acc, f32x4_mul(f32x4_convert_i32x4(sum), lane(d, r)));
                }
                w = w.add(Kind::Q8.stride());
                p = p.add(Activations::stride(1));
            }
        }
        acc.map(|v| {
            let [a, b, c, d] = super::f32_lanes(v);
            a + b + c + d
        })
    }

    #[cfg(not(target_feature = "simd128"))]
    pub fn q8(group: &[u8], pack: &[u8]) -> [f32; 4] {
        let blocks = check(group, pack, Kind::Q8, 1);
        let mut lanes = [[0f32; 4]; GROUP];
        let packs = pack.chunks_exact(Activations::stride(1));
        for (block, a) in group
            .chunks_exact(Kind::Q8.stride())
            .zip(packs)
            .take(blocks)
        {
            let x = &a[HEADER..];
            for (r, lanes) in lanes.iter_mut().enumerate() {
                let w = &block[Kind::Q8.header() + r * BLOCK..][..BLOCK];
                let mut sums = [0i32; 4];
                for (i, (&w, &x)) in w.iter().zip(x).enumerate() {
                    // Lane (i mod 8) / 2, as i32x4.dot_i16x8 sums.
                    sums[i % 8 / 2] += i32::from(w as i8) * i32::from(x as i8);
                }
                let scale = super::f32_at(block, 4 * r) * super::f32_at(a, 0);
                for (lane, sum) in lanes.iter_mut().zip(sums) {
                    *lane += sum as f32 * scale;
                }
            }
        }
        lanes.map(|l| l[0] + l[1] + l[2] + l[3])
    }

    /// The group's four products with each of a pack's `N` activation rows.
    /// Each block's integer dot product is summed exactly, then scaled and
    /// added in block order, as `q4_1_row` does one value at a time; so
    /// every row's result is the same whatever `N`, and the same as the
    /// scalar version's.
    #[cfg(all(target_feature = "simd128", target_feature = "relaxed-simd"))]
    pub fn q4_1<const N: usize>(group: &[u8], pack: &[u8]) -> [[f32; 4]; N] {
        use core::arch::wasm32::*;
        let blocks = check(group, pack, Kind::Q4_1, N);
        // Lane r of each vector belongs to the group's row r.
        let mut acc = [f32x4_splat(0.0); N];
        let mut mins = [f32x4_splat(0.0); N];
        let low = u8x16_splat(0x0F);
        // SAFETY: each block reads `Kind::Q4_1.stride()` bytes of the group
        // and `Activations::stride(N)` of the pack, lengths checked above.
        unsafe {
            let (mut w, mut p) = (group.as_ptr(), pack.as_ptr());
            for _ in 0..blocks {
                let scales = v128_load(w.cast());
                let m = v128_load(w.add(16).cast());
                let header = v128_load(p.cast());
                // Nibbles are 0..=15, inside the unsigned operand's 7-bit
                // range, so every lowering gives the exact sum.
                let nibbles: [(v128, v128); GROUP] = std::array::from_fn(|r| {
                    let q = v128_load(w.add(32 + r * BLOCK / 2).cast());
                    (v128_and(q, low), u8x16_shr(q, 4))
                });
                for k in 0..N {
                    let q = p.add(HEADER + k * BLOCK);
                    let x = (v128_load(q.cast()), v128_load(q.add(16).cast()));
                    let dots = nibbles.map(|(lo, hi)| {
                        i16x8_add(
                            i16x8_relaxed_dot_i8x16_i7x16(x.0, lo),
                            i16x8_relaxed_dot_i8x16_i7x16(x.1, hi),
                        )
                    });
                    let d = f32x4_mul(scales, lane(header, k));
                    let product = f32x4_mul(f32x4_convert_i32x4(totals(dots)), d);
                    acc[k] = f32x4_add(acc[k], product);
                    mins[k] = f32x4_add(mins[k], f32x4_mul(m, lane(header, N + k)));
                }
                w = w.add(Kind::Q4_1.stride());
                p = p.add(Activations::stride(N));
            }
        }
        std::array::from_fn(|k| super::f32_lanes(f32x4_add(acc[k], mins[k])))
    }

    /// Lane r of the result is the sum of `v[r]`'s eight i16 lanes, exact.
    /// A lane holds four products of at most 127 * 15, so sums of four lanes
    /// still fit in 16 bits (30,480); only the last pairs widen to 32. Two
    /// halving steps over row pairs take 8 instructions on x86 where widening
    /// each row first took 13.
    #[cfg(target_feature = "simd128")]
    fn totals(v: [core::arch::wasm32::v128; 4]) -> core::arch::wasm32::v128 {
        use core::arch::wasm32::*;
        // Row a's lanes 0..4 plus 4..8, then row b's.
        let halve = |a, b| i16x8_add(i64x2_shuffle::<0, 2>(a, b), i64x2_shuffle::<1, 3>(a, b));
        let (s01, s23) = (halve(v[0], v[1]), halve(v[2], v[3]));
        // Pairs of lanes 0,1 plus 2,3 of each row, rows in order.
        let pairs = i16x8_add(
            i32x4_shuffle::<0, 2, 4, 6>(s01, s23),
            i32x4_shuffle::<1, 3, 5, 7>(s01, s23),
        );
        i32x4_extadd_pairwise_i16x8(pairs)
    }

    #[cfg(not(all(target_feature = "simd128", target_feature = "relaxed-simd")))]
    pub fn q4_1<const N: usize>(group: &[u8], pack: &[u8]) -> [[f32; 4]; N] {
        let blocks = check(group, pack, Kind::Q4_1, N);
        let packs = pack.chunks_exact(Activations::stride(N));
        let blocks = || {
            group
                .chunks_exact(Kind::Q4_1.stride())
                .zip(packs.clone())
                .take(blocks)
        };
        std::array::from_fn(|k| q4_1_row(blocks(), k, N))
    }

    /// Row `k` of each of a pack of `rows` rows' blocks, against each
    /// weight block.
    #[cfg(not(all(target_feature = "simd128", target_feature = "relaxed-simd")))]
    fn q4_1_row<'a>(
        blocks: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        k: usize,
        rows: usize,
    ) -> [f32; 4] {
        let mut out = [0f32; GROUP];
        let mut mins = [0f32; GROUP];
        for (block, a) in blocks {
            let (x0, x1) = a[HEADER + k * BLOCK..][..BLOCK].split_at(BLOCK / 2);
            for r in 0..GROUP {
                let w = &block[Kind::Q4_1.header() + r * BLOCK / 2..][..BLOCK / 2];
                let dot: i32 = w
                    .iter()
                    .zip(x0.iter().zip(x1))
                    .map(|(&w, (&x0, &x1))| {
                        i32::from(w & 0x0F) * i32::from(x0 as i8)
                            + i32::from(w >> 4) * i32::from(x1 as i8)
                    })
                    .sum();
                out[r] += dot as f32 * (super::f32_at(block, 4 * r) * super::f32_at(a, 4 * k));
                mins[r] += super::f32_at(block, 4 * (GROUP + r)) * super::f32_at(a, 4 * (rows + k));
            }
        }
        [0, 1, 2, 3].map(|r| out[r] + mins[r])
    }
}

/// The storage candle holds; shares the matrix with the model's embedding.
struct Storage(Arc<Matrix>);

impl QuantizedType for Storage {
    fn dtype(&self) -> GgmlDType {
        match self.0.kind {
            Kind::Q8 => GgmlDType::Q8_0,
            Kind::Q4_1 => GgmlDType::Q4_1,
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
        self.0.data.len()
    }

    fn as_ptr(&self) -> *const u8 {
        self.0.data.as_ptr()
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
pub(crate) mod tests {
    use super::*;
    use candle_core::quantized::QMatMul;
    use candle_core::{Device, Module, Tensor};

    /// `n` test values from -50/17 to 50/17, varied by `seed`.
    pub(crate) fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * seed % 101) as f32 - 50.0) / 17.0)
            .collect()
    }

    /// A matrix of `n` rows of `k` test values, quantized to `dtype`.
    pub(crate) fn quantized(n: usize, k: usize, dtype: GgmlDType) -> QTensor {
        let weights = Tensor::from_vec(values(n * k, 37), (n, k), &Device::Cpu).unwrap();
        QTensor::quantize(&weights, dtype).unwrap()
    }

    /// Products on our layout against exact products of the dequantized
    /// weights: within what quantizing the activations to 8 bits can cost
    /// (a swapped nibble or a misplaced scale is far outside it).
    #[test]
    fn products_match_the_dequantized_weights() {
        let (m, k, n) = (5, 96, 8);
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
            let quantized = quantized(n, k, dtype);
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
    fn other_types_and_shapes_are_left_to_candle() {
        let weights = Tensor::from_vec(values(128, 7), (4, 32), &Device::Cpu).unwrap();
        let quantized = QTensor::quantize(&weights, GgmlDType::Q4_0).unwrap();
        assert!(Matrix::from_qtensor(&quantized).unwrap().is_none());
        let weights = Tensor::from_vec(values(96, 7), (3, 32), &Device::Cpu).unwrap();
        let quantized = QTensor::quantize(&weights, GgmlDType::Q8_0).unwrap();
        assert!(Matrix::from_qtensor(&quantized).unwrap().is_none());
    }
}
