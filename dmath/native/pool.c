/* max_pool2x2_{d,s}: torch's max_pool2d_with_indices for 2 x 2 windows, stride 2, no
 * padding, dilation 1, on a contiguous NCHW input of `planes` (N C) planes H x W:
 *   out[p, oh, ow] = max of in[p, 2oh + i, 2ow + j] (i, j in 0, 1),
 *   ind[p, oh, ow] = (2oh + i) W + 2ow + j of the element taken,
 * scanning a window row by row and taking an element when it is greater than the
 * maximum so far or NaN, as torch's CPU kernel does (so values and indices are
 * torch's, bit for bit; torch's max_pool2d_with_indices_backward reads the indices).
 * Branch-free, vectorised over ow (torch's kernel branches per element: ~15 ns an
 * output on random data against ~1.5 here, docs/performance.md).
 */
#include <stdint.h>

#define MAXPOOL2X2(NAME, T)                                                              \
void NAME(int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo,                  \
          const T *in, T *out, int64_t *ind)                                             \
{                                                                                        \
    for (int64_t p = 0; p < planes; p++) {                                               \
        const T *x = in + p * H * W;                                                     \
        for (int64_t oh = 0; oh < Ho; oh++) {                                            \
            const T *r0 = x + 2 * oh * W, *r1 = r0 + W;                                  \
            T *y = out + (p * Ho + oh) * Wo;                                             \
            int64_t *iy = ind + (p * Ho + oh) * Wo;                                      \
            int64_t base = 2 * oh * W;                                                   \
            _Pragma("omp simd")                                                          \
            for (int64_t ow = 0; ow < Wo; ow++) {                                        \
                T a1 = r0[2 * ow + 1], a2 = r1[2 * ow], a3 = r1[2 * ow + 1];             \
                T m = r0[2 * ow];                                                        \
                int64_t k = 0;                                                           \
                int t = (a1 > m) | (a1 != a1); m = t ? a1 : m; k = t ? 1 : k;            \
                t = (a2 > m) | (a2 != a2); m = t ? a2 : m; k = t ? W : k;                \
                t = (a3 > m) | (a3 != a3); m = t ? a3 : m; k = t ? W + 1 : k;            \
                y[ow] = m;                                                               \
                iy[ow] = base + 2 * ow + k;                                              \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
}

MAXPOOL2X2(max_pool2x2_d, double)
MAXPOOL2X2(max_pool2x2_s, float)
