/* tri_panel_{d,s}: the column loop of one panel of the one-stage tridiagonal reduction
 * (dmath/linalg/tridiagonal.py, ``_reduce_blas``; LAPACK's dlatrd, ScaLAPACK's pdlatrd),
 * the same steps and BLAS calls as its Python loop, in C: for each column j = k + i of the
 * panel (i < kb; c = 2 i columns of Lt / Rt so far):
 *
 *   P[j:, i]     -= Lt[:c, j:]^T Rt[:c, j]                 the column, up to date (gemv)
 *   d[j] = P[j, i];  (e[j], tau[j], v[j+1:]) = larfg(P[j+1:, i])
 *   Lt[c] = Rt[c + 1] = v;  the piece's column j := v       (on its owners)
 *   buf = [A v (lower triangle, symv_lower_bc) | this rank's share of Rt[:c] v]
 *   allreduce(buf)                                          (the caller's callback)
 *   y = buf - Lt[:c]^T (Rt v);  w = tau y - tau^2 / 2 (y . v) v;  Lt[c + 1] = Rt[c] = w
 *
 * P: the replicated panel (n x kb, row-major); Lt, Rt: 2 nb x n, row-major; v: n; the
 * piece a: nr x nc (row-major, leading dimension nc) with global indices gr / gc and the
 * numroc tables lrow / lcol (n + 1 entries); owns[j]: this rank holds global column j; buf:
 * n + 2 nb; work: 2 nc. gemv / nrm2: CBLAS (row-major order 101, 111 / 112 transposes).
 * allreduce(count) sums buf[:count] over the ranks and returns 0, else nonzero: the loop
 * stops and that value is returned (0 when the panel is done).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef int (*allreduce_fn)(int64_t count);

#define TRI_PANEL(NAME, SYMV, T)                                                          \
void SYMV(int64_t nr, int64_t nc, const T *a, int64_t lda, const int64_t *gr,             \
          const int64_t *gc, const T *x, T *y, int64_t base, T *work);                    \
int NAME(int64_t n, int64_t k, int64_t kb, T *P, T *Lt, T *Rt, T *v,                      \
         double *d, double *e, double *tau,                                               \
         T *a, int64_t nr, int64_t nc, const int64_t *gr, const int64_t *gc,              \
         const int64_t *lrow, const int64_t *lcol, const int8_t *owns,                    \
         T *buf, T *work, int64_t rank, int64_t p,                                        \
         void (*gemv)(int, int, int, int, T, const T *, int, const T *, int, T, T *, int),  \
         T (*nrm2)(int, const T *, int), allreduce_fn allreduce)                          \
{                                                                                         \
    for (int64_t i = 0; i < kb; i++) {                                                    \
        int64_t j = k + i, c = 2 * i, nn = n - j - 1;                                     \
        if (c)                                                                            \
            gemv(101, 112, (int)c, (int)(n - j), -1, Lt + j, (int)n, Rt + j, (int)n, 1,   \
                 P + j * kb + i, (int)kb);                                                \
        d[j] = P[j * kb + i];                                                             \
        /* larfg on x = P[j + 1:, i] (stride kb), into v[j + 1:] */                       \
        double alpha = P[(j + 1) * kb + i];                                               \
        double xnorm = nn > 1 ? nrm2((int)(nn - 1), P + (j + 2) * kb + i, (int)kb) : 0;   \
        double t = 0;                                                                     \
        v[j + 1] = 1;                                                                     \
        if (xnorm == 0) {                                                                 \
            for (int64_t r = j + 2; r < n; r++) v[r] = 0;                                 \
            e[j] = alpha;                                                                 \
        } else {                                                                          \
            double beta = -copysign(hypot(alpha, xnorm), alpha);                          \
            T s = (T)(alpha - beta);                                                      \
            for (int64_t r = 1; r < nn; r++) v[j + 1 + r] = P[(j + 1 + r) * kb + i] / s;  \
            e[j] = beta;                                                                  \
            t = (beta - alpha) / beta;                                                    \
        }                                                                                 \
        tau[j] = t;                                                                       \
        memcpy(Lt + c * n + j + 1, v + j + 1, nn * sizeof(T));                            \
        memcpy(Rt + (c + 1) * n + j + 1, v + j + 1, nn * sizeof(T));                      \
        if (owns[j]) {                              /* the piece's column j := v */       \
            int64_t cj = lcol[j];                                                         \
            for (int64_t r = lrow[j + 1]; r < nr; r++) a[r * nc + cj] = v[gr[r]];         \
        }                                                                                 \
        /* buf = [A v | this rank's rows of Rt[:c] v], summed over the ranks */           \
        int64_t lr = lrow[j + 1], lc = lcol[j + 1];                                       \
        memset(buf, 0, (nn + c) * sizeof(T));                                             \
        if (lr < nr && lc < nc)                                                           \
            SYMV(nr - lr, nc - lc, a + lr * nc + lc, nc, gr + lr, gc + lc, v, buf, j + 1, \
                 work);                                                                   \
        if (c) {                                                                          \
            int64_t lo = (j + 1) + nn * rank / p, hi = (j + 1) + nn * (rank + 1) / p;     \
            if (hi > lo)                                                                  \
                gemv(101, 111, (int)c, (int)(hi - lo), 1, Rt + lo, (int)n, v + lo, 1, 0,  \
                     buf + nn, 1);                                                        \
        }                                                                                 \
        if (p > 1) {                                                                      \
            int status = allreduce(nn + c);                                               \
            if (status) return status;                                                    \
        }                                                                                 \
        T *yv = buf;                                                                      \
        if (c)                                                                            \
            gemv(101, 112, (int)c, (int)nn, -1, Lt + j + 1, (int)n, buf + nn, 1, 1, yv, 1); \
        T tt = (T)t, dot = 0;                                                             \
        for (int64_t r = 0; r < nn; r++) { yv[r] *= tt; dot += yv[r] * v[j + 1 + r]; }    \
        T f = (T)(-0.5 * t * (double)dot);                                                \
        for (int64_t r = 0; r < nn; r++) yv[r] += f * v[j + 1 + r];                       \
        memcpy(Lt + (c + 1) * n + j + 1, yv, nn * sizeof(T));                            \
        memcpy(Rt + c * n + j + 1, yv, nn * sizeof(T));                                   \
    }                                                                                     \
    return 0;                                                                             \
}

TRI_PANEL(tri_panel_d, symv_lower_bc_d, double)
TRI_PANEL(tri_panel_s, symv_lower_bc_s, float)
