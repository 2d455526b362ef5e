//! The `gemm` crate's matrix product (the one candle uses) behind a safe function: [`matmul`]
//! checks that every element of its strided views ([`Mat`]) and of its output block lies inside
//! their slices, then makes the one `unsafe` call, whose raw pointers and strides it derives
//! from them. Used by the models' attention (per-head products over strided views) and by
//! `models::layers::kernels::Linear`'s products.

use ::gemm::Parallelism;

/// A strided read-only matrix: element `(i, j)` is `data[i * row_stride + j * col_stride]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> Mat<'a> {
    /// A dense `(rows, cols)` row-major matrix.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Mat {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// Columns `start..start + cols` of rows `row..row + rows`, keeping the strides.
    pub fn block(self, row: usize, rows: usize, start: usize, cols: usize) -> Self {
        assert!(row + rows <= self.rows && start + cols <= self.cols);
        let offset = row * self.row_stride + start * self.col_stride;
        Mat {
            data: &self.data[offset.min(self.data.len())..],
            rows,
            cols,
            ..self
        }
    }

    /// The transpose (no copy).
    pub fn t(self) -> Self {
        Mat {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }

    /// Whether every element lies inside `data`.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// How a matrix product may use threads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Threads {
    /// On the calling thread only (the caller already runs products in parallel).
    One,
    /// On the current rayon pool.
    Pool,
}

/// `out = scale * a · b` (or `out += scale * a · b` when `accumulate`), with `out` a
/// `(a.rows, b.cols)` block of row stride `out_stride`.
pub(crate) fn matmul(
    a: Mat<'_>,
    b: Mat<'_>,
    out: &mut [f32],
    out_stride: usize,
    scale: f32,
    accumulate: bool,
    threads: Threads,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "inner dimensions differ");
    assert!(a.in_bounds() && b.in_bounds(), "matrix view out of bounds");
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        out_stride >= n && (m - 1) * out_stride + n <= out.len(),
        "output block out of bounds"
    );
    if k == 0 {
        if !accumulate {
            for row in out.chunks_mut(out_stride).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let parallelism = match threads {
        // Small products are not worth waking the pool for.
        Threads::Pool if m * n * k >= 1 << 18 => Parallelism::Rayon(rayon::current_num_threads()),
        _ => Parallelism::None,
    };
    // SAFETY: the asserts above keep every element gemm reads or writes inside `a.data`,
    // `b.data` and `out`: gemm touches `a(i, l)`, `b(l, j)` and `out(i, j)` for i < m, l < k,
    // j < n only, at the strides given. `out` is borrowed mutably, so it overlaps neither input.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            out_stride as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            scale,
            false,
            false,
            false,
            parallelism,
        );
    }
}
