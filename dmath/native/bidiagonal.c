/* bi_panel_{d,s}: the column loop of one panel of the one-stage bidiagonal reduction
 * (dmath/linalg/bidiagonal.py, ``_reduce_blas``; LAPACK's dlabrd, ScaLAPACK's pdlabrd),
 * the same steps and BLAS calls as its Python loop, in C. For column j = k + i of the
 * panel (i < kb, c = 2 i), with the current A = A - L R^T (L: m x w, R: n x w, row-major,
 * w = 2 nb; column c of L is u, c + 1 is x; of R, c is y, c + 1 is v):
 *
 *   P[j:, i] -= L[j:, :c] R[j, :c];  (d[j], tauq[j], u[j:]) = larfg(P[j:, i]); piece col j := u
 *   buf = [A[j:, j+1:]^T u | share of L[:, :c]^T u], allreduce;  y = tauq (z - R[j+1:, :c] ex)
 *   Rows[i, j+1:] -= R[j+1:, :c+1] L[j, :c+1];  (e[j], taup[j], v[j+1:]) = larfg(that row);
 *   piece row j := v;  buf = [A[j+1:, j+1:] v | share of R[:, :c+1]^T v], allreduce;
 *   x = taup (buf - L[j+1:, :c+1] ex)
 *
 * P: the replicated panel's columns (m x kb), Rows: its rows (kb x n), both row-major;
 * the piece a: nr x nc (leading dimension nc), global indices gr / gc, numroc tables lrow
 * (m + 1) / lcol (n + 1); owns_col[j] / owns_row[j]: this rank holds global column / row j;
 * whole: the local rows are the global rows (one grid row); buf: max(m, n) + w + 1;
 * scratch: 2 max(nr, nc) + 2. allreduce(count) sums buf[:count] (0, else the loop stops
 * and returns that value). CBLAS row-major gemv / nrm2 of scipy's OpenBLAS.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef int (*allreduce_fn)(int64_t count);

#define BI_PANEL(NAME, T)                                                                   \
/* (beta, tau) with (I - tau v v^T) x = beta e_1, v[0] = 1 (dlarfg), x: n at stride sx;   \
 * v at stride sv */                                                                        \
static void NAME##_larfg(int64_t n, const T *x, int64_t sx, T *v, int64_t sv,               \
                         T (*nrm2)(int, const T *, int), double *beta_out, double *tau_out) \
{                                                                                           \
    double alpha = x[0];                                                                    \
    double xnorm = n > 1 ? nrm2((int)(n - 1), x + sx, (int)sx) : 0;                         \
    v[0] = 1;                                                                               \
    if (xnorm == 0) {                                                                       \
        for (int64_t r = 1; r < n; r++) v[r * sv] = 0;                                      \
        *beta_out = alpha; *tau_out = 0;                                                    \
        return;                                                                             \
    }                                                                                       \
    double beta = -copysign(hypot(alpha, xnorm), alpha);                                    \
    T s = (T)(alpha - beta);                                                                \
    for (int64_t r = 1; r < n; r++) v[r * sv] = x[r * sx] / s;                              \
    *beta_out = beta; *tau_out = (beta - alpha) / beta;                                     \
}                                                                                           \
int NAME(int64_t m, int64_t n, int64_t k, int64_t kb, int64_t w, T *P, T *Rows, T *L, T *R, \
         double *d, double *e, double *tauq, double *taup,                                  \
         T *a, int64_t nr, int64_t nc, const int64_t *gr, const int64_t *gc,                \
         const int64_t *lrow, const int64_t *lcol, const int8_t *owns_col,                  \
         const int8_t *owns_row, int64_t whole, T *buf, T *scratch, int64_t rank, int64_t p, \
         void (*gemv)(int, int, int, int, T, const T *, int, const T *, int, T, T *, int),    \
         T (*nrm2)(int, const T *, int), allreduce_fn allreduce)                            \
{                                                                                           \
    T *xl = scratch, *tmp = scratch + (nr > nc ? nr : nc) + 1;                              \
    for (int64_t i = 0; i < kb; i++) {                                                      \
        int64_t j = k + i, c = 2 * i;                                                       \
        T *col = P + j * kb + i;                    /* P[j:, i], stride kb */               \
        if (c && m - j > 0)                                                                 \
            gemv(101, 111, (int)(m - j), (int)c, -1, L + j * w, (int)w, R + j * w, 1, 1,    \
                 col, (int)kb);                                                             \
        T *u = L + c;                               /* column c of L, stride w */           \
        NAME##_larfg(m - j, col, kb, u + j * w, w, nrm2, d + j, tauq + j);                  \
        if (owns_col[j]) {                                                                  \
            int64_t cj = lcol[j];                                                           \
            for (int64_t r = lrow[j]; r < nr; r++) a[r * nc + cj] = u[gr[r] * w];           \
        }                                                                                   \
        if (j == n - 1) break;                                                              \
        /* z = A[j:, j+1:]^T u (columns j+1..n), ex = L[:, :c]^T u (a share of rows) */     \
        int64_t ny = n - j - 1, lr = lrow[j], lc = lcol[j + 1];                             \
        memset(buf, 0, (ny + c) * sizeof(T));                                               \
        if (lr < nr && lc < nc) {                                                           \
            for (int64_t r = lr; r < nr; r++) xl[r - lr] = u[gr[r] * w];                    \
            gemv(101, 112, (int)(nr - lr), (int)(nc - lc), 1, a + lr * nc + lc, (int)nc,    \
                 xl, 1, 0, tmp, 1);                                                         \
            for (int64_t q = lc; q < nc; q++) buf[gc[q] - (j + 1)] = tmp[q - lc];           \
        }                                                                                   \
        if (c) {                                                                            \
            int64_t lo = j + (m - j) * rank / p, hi = j + (m - j) * (rank + 1) / p;         \
            if (hi > lo)                                                                    \
                gemv(101, 112, (int)(hi - lo), (int)c, 1, L + lo * w, (int)w, u + lo * w,   \
                     (int)w, 0, buf + ny, 1);                                               \
        }                                                                                   \
        if (p > 1) {                                                                        \
            int status = allreduce(ny + c);                                                 \
            if (status) return status;                                                      \
        }                                                                                   \
        if (c)                                                                              \
            gemv(101, 111, (int)ny, (int)c, -1, R + (j + 1) * w, (int)w, buf + ny, 1, 1,    \
                 buf, 1);                                                                   \
        T tq = (T)tauq[j];                                                                  \
        for (int64_t q = 0; q < ny; q++) R[(j + 1 + q) * w + c] = buf[q] * tq;              \
        /* row j of A, up to date, and its reflector v (column c + 1 of R) */               \
        T *row = Rows + i * n + j + 1;                                                      \
        gemv(101, 111, (int)ny, (int)(c + 1), -1, R + (j + 1) * w, (int)w, L + j * w, 1, 1, \
             row, 1);                                                                       \
        T *v = R + c + 1;                           /* stride w */                          \
        NAME##_larfg(ny, row, 1, v + (j + 1) * w, w, nrm2, e + j, taup + j);                \
        if (owns_row[j]) {                                                                  \
            int64_t rj = lrow[j];                                                           \
            for (int64_t q = lcol[j + 1]; q < nc; q++) a[rj * nc + q] = v[gc[q] * w];       \
        }                                                                                   \
        /* x = A[j+1:, j+1:] v (rows j+1..m), ex = R[:, :c+1]^T v (a share of rows) */      \
        int64_t nx = m - j - 1;                                                             \
        lr = lrow[j + 1];                                                                   \
        int64_t mine = lr < nr && lc < nc;                                                  \
        for (int64_t q = lc; q < nc; q++) xl[q - lc] = v[gc[q] * w];                        \
        if (mine && whole) {                                                                \
            gemv(101, 111, (int)(nr - lr), (int)(nc - lc), 1, a + lr * nc + lc, (int)nc,    \
                 xl, 1, 0, buf, 1);                                                         \
        } else {                                                                            \
            memset(buf, 0, nx * sizeof(T));                                                 \
            if (mine) {                                                                     \
                gemv(101, 111, (int)(nr - lr), (int)(nc - lc), 1, a + lr * nc + lc,         \
                     (int)nc, xl, 1, 0, tmp, 1);                                            \
                for (int64_t r = lr; r < nr; r++) buf[gr[r] - (j + 1)] = tmp[r - lr];       \
            }                                                                               \
        }                                                                                   \
        {                                                                                   \
            int64_t lo = (j + 1) + ny * rank / p, hi = (j + 1) + ny * (rank + 1) / p;       \
            if (hi > lo)                                                                    \
                gemv(101, 112, (int)(hi - lo), (int)(c + 1), 1, R + lo * w, (int)w,         \
                     v + lo * w, (int)w, 0, buf + nx, 1);                                   \
            else                                                                            \
                memset(buf + nx, 0, (c + 1) * sizeof(T));                                   \
        }                                                                                   \
        if (p > 1) {                                                                        \
            int status = allreduce(nx + c + 1);                                             \
            if (status) return status;                                                      \
        }                                                                                   \
        if (nx > 0)                                                                         \
            gemv(101, 111, (int)nx, (int)(c + 1), -1, L + (j + 1) * w, (int)w, buf + nx, 1, \
                 1, buf, 1);                                                                \
        T tp = (T)taup[j];                                                                  \
        for (int64_t q = 0; q < nx; q++) L[(j + 1 + q) * w + c + 1] = buf[q] * tp;          \
    }                                                                                       \
    return 0;                                                                               \
}

BI_PANEL(bi_panel_d, double)
BI_PANEL(bi_panel_s, float)
