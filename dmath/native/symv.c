/* dmath's compiled kernels (built on first use by dmath/native/__init__.py; no Python API).
 *
 * symv_lower_bc_{d,s}: y += A x for the symmetric A whose lower triangle this
 * rank holds a block-cyclic piece of, reading each stored element ONCE (LAPACK
 * dsymv's scheme, on a piece with any global row / column indices):
 *   a[r, c] = A[gr[r], gc[c]] (row-major, leading dimension lda, nr x nc),
 *   gr, gc increasing; only elements with gr[r] >= gc[c] are read;
 *   y[gr[r] - base] += sum_{gc[c] <= gr[r]} a[r, c] x[gc[c]]     (row part)
 *   y[gc[c] - base] += sum_{gr[r] >  gc[c]} a[r, c] x[gr[r]]     (column part)
 * x and y are indexed by global index (x[g], y[g - base]); work holds 2 nc.
 * Summed over the ranks of the grid this is the whole product A x.
 */
#include <stdint.h>

/* One row's columns past the block's common part: c0 <= c with gc[c] <= g. */
#define TAIL(ar, g, xv, s)                                                  \
    for (int64_t c = c0; c < nc && gc[c] <= g; c++) {                          \
        s += ar[c] * xc[c];                                                    \
        if (gc[c] < g) yc[c] += ar[c] * xv;                                    \
    }

#define SYMV(NAME, T)                                                          \
void NAME(int64_t nr, int64_t nc, const T *a, int64_t lda,                     \
          const int64_t *gr, const int64_t *gc, const T *x, T *y,              \
          int64_t base, T *work)                                               \
{                                                                              \
    T *xc = work, *yc = work + nc;                                             \
    for (int64_t c = 0; c < nc; c++) { xc[c] = x[gc[c]]; yc[c] = 0; }          \
    int64_t c0 = 0;                     /* columns with gc < gr[r] */          \
    int64_t r = 0;                                                             \
    for (; r + 3 < nr; r += 4) {        /* four rows share each yc update */   \
        while (c0 < nc && gc[c0] < gr[r]) c0++;                                \
        const T *a0 = a + r * lda, *a1 = a0 + lda, *a2 = a1 + lda,             \
                *a3 = a2 + lda;                                                \
        T x0 = x[gr[r]], x1 = x[gr[r + 1]], x2 = x[gr[r + 2]],                 \
          x3 = x[gr[r + 3]];                                                   \
        T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                      \
        _Pragma("omp simd reduction(+:s0, s1, s2, s3)")                        \
        for (int64_t c = 0; c < c0; c++) {                                     \
            T u0 = a0[c], u1 = a1[c], u2 = a2[c], u3 = a3[c], xv = xc[c];      \
            s0 += u0 * xv; s1 += u1 * xv; s2 += u2 * xv; s3 += u3 * xv;        \
            yc[c] += (u0 * x0 + u1 * x1) + (u2 * x2 + u3 * x3);                \
        }                                                                      \
        TAIL(a0, gr[r], x0, s0)                                                \
        TAIL(a1, gr[r + 1], x1, s1)                                            \
        TAIL(a2, gr[r + 2], x2, s2)                                            \
        TAIL(a3, gr[r + 3], x3, s3)                                            \
        y[gr[r] - base] += s0;                                                 \
        y[gr[r + 1] - base] += s1;                                             \
        y[gr[r + 2] - base] += s2;                                             \
        y[gr[r + 3] - base] += s3;                                             \
    }                                                                          \
    for (; r < nr; r++) {                                                      \
        while (c0 < nc && gc[c0] < gr[r]) c0++;                                \
        const T *a0 = a + r * lda;                                             \
        T x0 = x[gr[r]], s0 = 0;                                               \
        _Pragma("omp simd reduction(+:s0)")                                    \
        for (int64_t c = 0; c < c0; c++) {                                     \
            s0 += a0[c] * xc[c];                                               \
            yc[c] += a0[c] * x0;                                               \
        }                                                                      \
        TAIL(a0, gr[r], x0, s0)                                                \
        y[gr[r] - base] += s0;                                                 \
    }                                                                          \
    for (int64_t c = 0; c < nc; c++) y[gc[c] - base] += yc[c];                 \
}

SYMV(symv_lower_bc_d, double)
SYMV(symv_lower_bc_s, float)
