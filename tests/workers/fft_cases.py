"""dmath.fft against numpy.fft on N ranks (SPMD): every transform over random
shapes (uneven, empty pieces) x random layouts (slabs, pencils, block-cyclic,
two-axis, partial sums) x float64 / float32 / complex128 / int64, all norms,
``n`` / ``s`` / ``axes``; round trips; the four-step 1-D path; the number of
all-to-alls a slab and a pencil 3-D FFT issue.

    mpiexec -n 4 python -m mpi4py tests/workers/fft_cases.py
"""
from __future__ import annotations

import numpy as np
import torch

import dmath
from _arrays import grids, make, random_layout, stats_delta
from _case import Cases
from dmath import Dim, Layout

C = Cases()
world = C.ctx.world
rng = np.random.default_rng(11)
F = dmath.fft
TOL = {torch.float64: 1e-9, torch.complex128: 1e-9, torch.int64: 1e-9, torch.float32: 2e-4}


def values(shape, dt):
    x = rng.standard_normal(shape)
    if dt == torch.complex128:
        x = x + 1j * rng.standard_normal(shape)
    if dt == torch.int64:
        x = rng.integers(-5, 6, shape)
    return x


def darray(x, lay, grid, dt):
    if dt == torch.complex128:       # make() builds real summands: complex via two parts
        lay = lay.without_partial()
        return dmath.from_local(torch.from_numpy(np.ascontiguousarray(
            x[np.ix_(*dmath.array.global_indices(x.shape, lay, grid))])).to(dmath.context().device),
            x.shape, lay, grid=grid)
    return make(rng, x.astype(np.float64), lay, grid, dt)


def agree(got, want, dt, what):
    g = got.to_numpy()
    assert g.shape == want.shape, f"{what}: shape {g.shape} != numpy {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    err = float(np.max(np.abs(g - want))) if want.size else 0.0
    assert err <= TOL[dt] * scale * 10, f"{what}: max error {err:.3g} (scale {scale:.3g})"
    if dt == torch.float32:
        assert g.dtype in (np.complex64, np.float32), f"{what}: dtype {g.dtype}"
    C.ok()


for grid in grids(world.size)[:2]:
    dmath.set_default_grid(grid)
    p = grid.size
    for trial in range(3):
        for dt in (torch.float64, torch.complex128, torch.float32, torch.int64):
            nd = int(rng.integers(1, 4))
            shape = tuple(int(rng.integers(2, 2 * p + 4)) for _ in range(nd))
            x = values(shape, dt)
            lay = random_layout(rng, nd, grid)
            A = darray(x, lay, grid, dt)
            xr = x.astype(np.float32) if dt == torch.float32 else x
            tag = f"[{grid.shape} {shape} {lay} {dt}]"
            norm = [None, "ortho", "forward", "backward"][trial]
            ax = int(rng.integers(-nd, nd))
            n = [None, shape[ax] + 2, max(shape[ax] - 1, 1)][int(rng.integers(0, 3))]
            agree(F.fft(A, n, ax, norm), np.fft.fft(xr, n, ax, norm), dt, f"fft {tag}")
            agree(F.ifft(A, n, ax, norm), np.fft.ifft(xr, n, ax, norm), dt, f"ifft {tag}")
            agree(F.fftn(A, norm=norm), np.fft.fftn(xr, norm=norm), dt, f"fftn {tag}")
            agree(F.ifftn(A, norm=norm), np.fft.ifftn(xr, norm=norm), dt, f"ifftn {tag}")
            s = tuple(int(v) for v in rng.integers(2, 7, min(nd, 2)))
            axes = tuple(int(a) for a in rng.permutation(nd)[:len(s)])
            agree(F.fftn(A, s, axes), np.fft.fftn(xr, s, axes), dt, f"fftn s={s} axes={axes} {tag}")
            agree(F.fft(A, layout="any"), np.fft.fft(xr), dt, f"fft layout=any {tag}")
            if dt != torch.complex128:
                agree(F.rfft(A, n, ax, norm), np.fft.rfft(xr, n, ax, norm), dt, f"rfft {tag}")
                agree(F.ihfft(A, n, ax, norm), np.fft.ihfft(xr, n, ax, norm), dt, f"ihfft {tag}")
                agree(F.rfftn(A, norm=norm), np.fft.rfftn(xr, norm=norm), dt, f"rfftn {tag}")
                agree(F.rfftn(A, s, axes), np.fft.rfftn(xr, s, axes), dt, f"rfftn s {tag}")
                R = F.rfftn(A, norm=norm)
                agree(F.irfftn(R, shape, norm=norm), xr, dt, f"irfftn(rfftn) {tag}")
                if nd >= 2:
                    agree(F.rfft2(A), np.fft.rfft2(xr), dt, f"rfft2 {tag}")
                    agree(F.irfft2(F.rfft2(A), shape[-2:]), xr, dt, f"irfft2(rfft2) {tag}")
            else:
                agree(F.irfft(A, n, ax, norm), np.fft.irfft(xr, n, ax, norm), dt, f"irfft {tag}")
                agree(F.hfft(A, n, ax, norm), np.fft.hfft(xr, n, ax, norm), dt, f"hfft {tag}")
                agree(F.irfftn(A, norm=norm), np.fft.irfftn(xr, norm=norm), dt, f"irfftn {tag}")
            agree(F.ifftn(F.fftn(A, norm=norm), norm=norm), xr, dt, f"ifftn(fftn) {tag}")
            agree(F.ifft(F.fft(A, axis=ax), axis=ax), xr, dt, f"ifft(fft) {tag}")
            agree(F.fftshift(A), np.fft.fftshift(xr), dt, f"fftshift {tag}")
            agree(F.ifftshift(A, axes=ax), np.fft.ifftshift(xr, axes=ax), dt, f"ifftshift {tag}")
    # the four-step 1-D FFT (composite lengths) and the replicate fallback (a prime)
    for n in (60, 2 * p + 1, 97, 12):
        x = values((n,), torch.complex128)
        for lay in (Layout(Dim(tuple(grid.names))), Layout(Dim(tuple(grid.names), 2))):
            A = darray(x, lay.resolve(grid, 1), grid, torch.complex128)
            agree(F.fft(A), np.fft.fft(x), torch.complex128, f"1-D fft n={n} {lay}")
            agree(F.ifft(A, norm="ortho"), np.fft.ifft(x, norm="ortho"), torch.complex128,
                  f"1-D ifft n={n} {lay}")
    # frequencies
    for n in (1, 8, 9):
        lay = Layout(Dim(tuple(grid.names), 1 + n % 2))
        agree(F.fftfreq(n, 0.1, layout=lay), np.fft.fftfreq(n, 0.1), torch.float64, "fftfreq")
        agree(F.rfftfreq(n, 0.1, layout=lay), np.fft.rfftfreq(n, 0.1), torch.float64, "rfftfreq")
    # numpy's protocol: np.fft.fftn(A) runs dmath.fft.fftn
    x = values((5, 6), torch.float64)
    A = dmath.from_numpy(x, Layout(grid.names[0]))
    agree(np.fft.fftn(A), np.fft.fftn(x), torch.float64, "np.fft.fftn(DArray)")
    # traffic: a slab 3-D FFT is one all-to-all (layout='any'), two with the way back;
    # a pencil one two (three)
    if p > 1:
        x = values((8, 6, 10), torch.float64)
        slab = Layout(Dim(tuple(grid.names))).resolve(grid, 3)
        A = darray(x, slab, grid, torch.float64)
        before = dmath.comm_stats.snapshot()
        R = F.fftn(A, layout="any")
        calls = stats_delta(before)["calls"]
        assert calls == {"alltoall": 1}, f"slab fftn: {calls}"
        agree(R, np.fft.fftn(x), torch.float64, "slab fftn layout=any")
        if grid.ndim == 2 and min(grid.shape) > 1:
            pencil = Layout(grid.names[0], grid.names[1]).resolve(grid, 3)
            B = darray(x, pencil, grid, torch.float64)
            before = dmath.comm_stats.snapshot()
            R = F.fftn(B, layout="any")
            calls = stats_delta(before)["calls"]
            assert calls == {"alltoall": 2}, f"pencil fftn: {calls}"
            agree(R, np.fft.fftn(x), torch.float64, "pencil fftn layout=any")
    # errors like numpy's, on every rank
    A = dmath.from_numpy(np.ones(4))
    for bad, exc in [(lambda: F.fft(A, 0), ValueError), (lambda: F.fft(A, norm="x"), ValueError),
                     (lambda: F.fft(A, axis=3), ValueError),
                     (lambda: F.fftn(A, s=(3, 3), axes=(0,)), ValueError)]:
        try:
            bad()
        except exc:
            C.ok()
        else:
            raise AssertionError("no error")

C.report()
