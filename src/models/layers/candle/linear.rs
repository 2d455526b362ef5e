//! The ports' linear layer: `x · Wᵀ + b`, and the same with a residual added, in one product
//! where the device allows it.
//!
//! On a CUDA device a contiguous `(rows, inputs)` batch runs as one cuBLASLt product whose
//! epilogue adds the bias and whose `C` operand adds the residual (`simd::cublaslt`): the
//! output is written once, where candle's product and its broadcast additions pass over it
//! two or three times. Everywhere else (candle's CPU backend, Metal, a strided input, the
//! opt-out `RERANK_CUDA_FUSED_LINEAR=0`), it is candle's product, then the bias, then the
//! residual, as `candle_nn::Linear` and an addition compute them.

use candle_core::{Module, Tensor};

/// A linear layer of weight `(outputs, inputs)` and an optional bias `(outputs)`, on a candle
/// device. `Send + Sync`.
#[derive(Clone, Debug)]
pub(crate) struct Linear {
    inner: candle_nn::Linear,
    /// cuBLASLt on the weight's CUDA device (`None` elsewhere).
    #[cfg(feature = "cuda")]
    lt: Option<crate::simd::cublaslt::Handle>,
}

impl Linear {
    /// The layer of `weight` `(outputs, inputs)` and `bias` `(outputs)` (an error only when
    /// the weight is on a CUDA device whose cuBLASLt handle cannot be made).
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> candle_core::Result<Self> {
        Ok(Linear {
            #[cfg(feature = "cuda")]
            lt: crate::simd::cublaslt::handle(&weight)?,
            inner: candle_nn::Linear::new(weight, bias),
        })
    }

    /// `x · Wᵀ + b` over the last dimension of `x`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with(x, None)
    }

    /// `x · Wᵀ + b + residual`, `residual` of the output's shape.
    pub fn forward_add(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with(x, Some(residual))
    }

    fn forward_with(&self, x: &Tensor, residual: Option<&Tensor>) -> candle_core::Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(lt) = &self.lt {
            let (weight, bias) = (self.inner.weight(), self.inner.bias());
            if let Some(y) = crate::simd::cublaslt::linear(lt, x, weight, bias, residual)? {
                return Ok(y);
            }
        }
        let y = self.inner.forward(x)?;
        match residual {
            Some(r) => y + r,
            None => Ok(y),
        }
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Linear::forward(self, x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_adds_its_bias_then_the_residual_to_the_product() {
        let (rows, inputs, outputs) = (3, 4, 5);
        let value = |i: usize, s: f32| ((i * 7 + 3) % 11) as f32 * s - 1.0;
        let x: Vec<f32> = (0..rows * inputs).map(|i| value(i, 0.25)).collect();
        let w: Vec<f32> = (0..outputs * inputs).map(|i| value(i, 0.5)).collect();
        let bias: Vec<f32> = (0..outputs).map(|i| i as f32 * 0.1).collect();
        let residual: Vec<f32> = (0..rows * outputs).map(|i| value(i, 0.125)).collect();
        let dev = candle_core::Device::Cpu;
        let t = |v: &[f32], shape: (usize, usize)| Tensor::from_slice(v, shape, &dev).unwrap();
        let flat = |t: Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
        let layer = Linear::new(
            t(&w, (outputs, inputs)),
            Some(Tensor::from_slice(&bias, outputs, &dev).unwrap()),
        )
        .unwrap();
        let x_t = t(&x, (rows, inputs));
        let plain = flat(layer.forward(&x_t).unwrap());
        let added = flat(
            layer
                .forward_add(&x_t, &t(&residual, (rows, outputs)))
                .unwrap(),
        );
        for r in 0..rows {
            for o in 0..outputs {
                let dot: f32 = (0..inputs)
                    .map(|p| x[r * inputs + p] * w[o * inputs + p])
                    .sum();
                let i = r * outputs + o;
                assert!(
                    (plain[i] - (dot + bias[o])).abs() < 1e-5,
                    "row {r}, output {o}"
                );
                // The residual is added to the biased product, rounded as its own addition.
                assert_eq!(added[i], plain[i] + residual[i], "row {r}, output {o}");
            }
        }
    }
}
