//! The feed-forward activation, `silu(gate) · up`, in one pass, with a SIMD
//! `exp` when the target has simd128.
//!
//! candle computes SiLU and the product as two passes, and on wasm each
//! `exp` is a call into libm, one per value.

use candle_core::{Device, Result, Tensor};

/// `silu(gate) · up`, elementwise; both have the same shape.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let shape = gate.shape().clone();
    let mut out = gate.flatten_all()?.to_vec1::<f32>()?;
    let up = up.flatten_all()?.to_vec1::<f32>()?;
    if up.len() != out.len() {
        candle_core::bail!(
            "swiglu of {} gate values and {} up values",
            out.len(),
            up.len()
        );
    }
    swiglu_in_place(&mut out, &up);
    Tensor::from_vec(out, shape, &Device::Cpu)
}

/// `gate[i] = gate[i] / (1 + exp(-gate[i])) · up[i]`.
#[cfg(not(target_feature = "simd128"))]
fn swiglu_in_place(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

#[cfg(target_feature = "simd128")]
fn swiglu_in_place(gate: &mut [f32], up: &[f32]) {
    use core::arch::wasm32::*;
    let one = f32x4_splat(1.0);
    let mut gates = gate.chunks_exact_mut(4);
    let mut ups = up.chunks_exact(4);
    for (g, u) in (&mut gates).zip(&mut ups) {
        // SAFETY: `g` and `u` are four f32s each.
        unsafe {
            let x = v128_load(g.as_ptr().cast());
            let sig = f32x4_div(x, f32x4_add(one, exp(f32x4_neg(x))));
            let y = f32x4_mul(sig, v128_load(u.as_ptr().cast()));
            v128_store(g.as_mut_ptr().cast(), y);
        }
    }
    for (g, &u) in gates.into_remainder().iter_mut().zip(ups.remainder()) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `e^x` in each lane by Cephes' `expf` (relative error about 1e-7). `x` is
/// clamped to where the result is a normal f32, so a very negative `x`
/// gives about 1e-38 rather than 0, and a very large one about 2e38 rather
/// than infinity; SiLU's result is the same either way.
#[cfg(target_feature = "simd128")]
fn exp(x: core::arch::wasm32::v128) -> core::arch::wasm32::v128 {
    use core::arch::wasm32::*;
    let x = f32x4_min(f32x4_max(x, f32x4_splat(-87.3)), f32x4_splat(88.3));
    // x = n ln 2 + r, |r| <= ln 2 / 2; ln 2 in two parts keeps r exact.
    let n = f32x4_nearest(f32x4_mul(x, f32x4_splat(std::f32::consts::LOG2_E)));
    let r = f32x4_sub(x, f32x4_mul(n, f32x4_splat(0.693_359_4)));
    let r = f32x4_sub(r, f32x4_mul(n, f32x4_splat(-2.121_944_4e-4)));
    let mut p = f32x4_splat(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ] {
        p = f32x4_add(f32x4_mul(p, r), f32x4_splat(c));
    }
    let e = f32x4_add(
        f32x4_add(f32x4_mul(p, f32x4_mul(r, r)), r),
        f32x4_splat(1.0),
    );
    // 2^n, built in the exponent bits.
    let two_n = i32x4_shl(i32x4_add(i32x4_trunc_sat_f32x4(n), i32x4_splat(127)), 23);
    f32x4_mul(e, two_n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swiglu_is_silu_of_the_gate_times_up() {
        let gate: Vec<f32> = (-40..40).map(|i| i as f32 * 0.37).collect();
        let up: Vec<f32> = (0..80).map(|i| 1.0 + i as f32 * 0.01).collect();
        let mut out = gate.clone();
        swiglu_in_place(&mut out, &up);
        for ((&g, &u), &o) in gate.iter().zip(&up).zip(&out) {
            let want = g / (1.0 + (-g).exp()) * u;
            assert!(
                (o - want).abs() <= want.abs() * 1e-6 + 1e-30,
                "{g}: {o} vs {want}"
            );
        }
    }
}
