"""Tensor contractions with numpy's semantics: einsum, outer, inner, kron.

=======  ===========================================================================
op       how it runs (communication)
=======  ===========================================================================
einsum   operands reduced one by one, left to right: within an operand, repeated
         subscripts become a diagonal (an indexed gather) and subscripts no one
         else needs are summed (an all-reduce); a pair contracts through
         ``tensordot`` (the distributed GEMM: SUMMA & co.) or, when it shares
         output subscripts (batch dims), a batched ``matmul`` (batches spread
         over the ranks, each multiplied locally). Output order by ``transpose``
         (no traffic).
outer    ``a[:, None] * b[None, :]`` (elementwise broadcast: each operand moved
         to the result's layout once)
inner    ``tensordot`` over the last dims (the GEMM)
kron     ``a`` and ``b`` interleaved with size-1 dims, multiplied (broadcast),
         the pairs of dims merged by ``reshape`` (one all-to-all)
=======  ===========================================================================
"""
from __future__ import annotations

import string

import numpy as np
import torch

from ..array import DArray
import importlib
from ..ops.diagonals import diagonal
from ..ops.reductions import sum as _sum
from ..ops.shape import expand_dims, ravel, reshape, transpose
from ..runtime.dispatch import command
from .products import matmul as _matmul, tensordot as _tensordot

ew = importlib.import_module("dmath.ops.ufuncs")   # the module (the package's
                                                         # ``elementwise`` is the command)


def _floats(fn):
    """``fn(a, b, ...)`` through the GEMM, which computes in floating point: integer
    and bool operands go as float64 and the result comes back as numpy's integer
    type (exact while the sums stay below 2**53)."""
    def run(a: DArray, b: DArray, *args, **kwargs) -> DArray:
        t = ew.result_type(a, b)
        if t.is_floating_point or t.is_complex:
            return fn(a, b, *args, **kwargs)
        r = fn(a.astype(torch.float64, copy=False), b.astype(torch.float64, copy=False),
               *args, **kwargs)
        out = torch.int64 if t == torch.bool or t.itemsize < 8 else t
        return ew.rint(r).astype(out) if t != torch.bool else ew.not_equal(r, 0)
    return run


def tensordot(a, b, axes=2):
    return _floats(_tensordot)(a, b, axes=axes)


def matmul(a, b):
    return _floats(_matmul)(a, b)


def _check(x, fn: str) -> DArray:
    if not isinstance(x, DArray):
        raise TypeError(f"{fn}: operands must be DArrays, got {type(x).__name__}")
    return x


@command
def outer(a: DArray, b: DArray) -> DArray:
    """Outer product of the flattened ``a`` and ``b``: (a.size, b.size)."""
    a, b = ravel(_check(a, "outer")), ravel(_check(b, "outer"))
    return ew.multiply(expand_dims(a, 1), expand_dims(b, 0))


@command
def inner(a: DArray, b: DArray) -> DArray:
    """Sum product over the last dims (scalars: the product)."""
    _check(a, "inner"), _check(b, "inner")
    if a.ndim == 0 or b.ndim == 0:
        return ew.multiply(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim "
                         f"{a.ndim - 1}) != {b.shape[-1]} (dim {b.ndim - 1})")
    return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 1]))


@command
def kron(a: DArray, b: DArray) -> DArray:
    """Kronecker product: blocks ``a[i, j] * b`` (numpy's ``kron``, any ndim)."""
    _check(a, "kron"), _check(b, "kron")
    nd = max(a.ndim, b.ndim)
    A = reshape(a, (1,) * (nd - a.ndim) + a.shape) if a.ndim < nd else a
    B = reshape(b, (1,) * (nd - b.ndim) + b.shape) if b.ndim < nd else b
    A = expand_dims(A, tuple(2 * k + 1 for k in range(nd)))      # (a0, 1, a1, 1, ...)
    B = expand_dims(B, tuple(2 * k for k in range(nd)))          # (1, b0, 1, b1, ...)
    P = ew.multiply(A, B)                                        # (a0, b0, a1, b1, ...)
    return reshape(P, tuple(P.shape[2 * k] * P.shape[2 * k + 1] for k in range(nd)))


# -- einsum -------------------------------------------------------------------------------
def parse(subscripts: str, ndims: list[int]) -> tuple[list[str], str]:
    """(per-operand letters, output letters), ellipses expanded to spare capitals,
    numpy's implicit output (letters seen once, sorted) when '->' is absent."""
    s = subscripts.replace(" ", "")
    ins, arrow, out = s.partition("->")
    terms = ins.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum: {len(terms)} operand subscripts for {len(ndims)} operands")
    used = set(c for c in s if c.isalpha())
    spare = [c for c in string.ascii_uppercase[::-1] if c not in used]
    ell_n = max([nd - len(t.replace("...", "")) for t, nd in zip(terms, ndims) if "..." in t],
                default=0)
    ell = "".join(spare[:ell_n][::-1])
    letters = []
    for t, nd in zip(terms, ndims):
        if "..." in t:
            k = nd - len(t.replace("...", ""))
            if k < 0:
                raise ValueError(f"einsum: subscripts '{t}' have more dims than the operand")
            t = t.replace("...", ell[ell_n - k:])
        if not all(c.isalpha() for c in t):
            raise ValueError(f"einsum: invalid subscript in '{t}'")
        if len(t) != nd:
            raise ValueError(f"einsum: operand has {nd} dims but subscripts '{t}' name {len(t)}")
        letters.append(t)
    if arrow:
        if ell_n and "..." not in out:
            raise ValueError("output has more dimensions than subscripts given in einstein "
                             "sum, but no '...' ellipsis provided to broadcast the extra "
                             "dimensions.")
        if "..." in out:
            out = out.replace("...", ell)
        for c in out:
            if not any(c in t for t in letters):
                raise ValueError(f"einstein sum subscripts string included output subscript "
                                 f"'{c}' which never appeared in an input")
        if len(set(out)) != len(out):
            raise ValueError(f"einsum: output subscript repeated in '{out}'")
    else:
        counts = {}
        for t in letters:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return letters, out


def _reduce_one(x: DArray, t: str, keep: set) -> tuple[DArray, str]:
    """Diagonals of repeated letters, then sums over letters not in ``keep``."""
    while len(set(t)) != len(t):
        c = next(c for c in t if t.count(c) > 1)
        i = t.index(c)
        j = t.index(c, i + 1)
        x = diagonal(x, 0, i, j)
        t = "".join(ch for k, ch in enumerate(t) if k not in (i, j)) + c
    drop = tuple(k for k, c in enumerate(t) if c not in keep)
    if drop:
        x = _sum(x, axis=drop)
        t = "".join(c for c in t if c not in set(t[k] for k in drop))
    return x, t


def _pair(a: DArray, ta: str, b: DArray, tb: str, keep: set) -> tuple[DArray, str]:
    """Contract two reduced operands; the result keeps the letters in ``keep``."""
    shared = [c for c in ta if c in tb]
    batch = [c for c in shared if c in keep]
    con = [c for c in shared if c not in keep]
    fa = [c for c in ta if c not in shared]
    fb = [c for c in tb if c not in shared]
    size = {c: n for t, x in ((ta, a), (tb, b)) for c, n in zip(t, x.shape)}
    for c in shared:
        if a.shape[ta.index(c)] != b.shape[tb.index(c)]:
            raise ValueError(f"einsum: size of subscript '{c}' differs: "
                             f"{a.shape[ta.index(c)]} vs {b.shape[tb.index(c)]}")
    if not batch:
        r = tensordot(a, b, axes=([ta.index(c) for c in con], [tb.index(c) for c in con]))
        return r, "".join(fa + fb)
    pa = transpose(a, [ta.index(c) for c in batch + fa + con])
    pb = transpose(b, [tb.index(c) for c in batch + con + fb])
    nB = int(np.prod([size[c] for c in batch]))
    nFa, nK, nFb = (int(np.prod([size[c] for c in g])) for g in (fa, con, fb))
    r = matmul(reshape(pa, (nB, nFa, nK)), reshape(pb, (nB, nK, nFb)))
    r = reshape(r, tuple(size[c] for c in batch + fa + fb))
    return r, "".join(batch + fa + fb)


@command
def einsum(subscripts: str, *operands: DArray, optimize=False) -> DArray:
    """numpy's einsum (explicit and implicit output, '...', repeated subscripts for
    diagonals) over distributed operands; see the module docstring."""
    if not isinstance(subscripts, str):
        raise TypeError("einsum: only the subscripts-string form is supported")
    ops = [_check(x, "einsum") for x in operands]
    if not ops:
        raise ValueError("einsum: no operands")
    letters, out = parse(subscripts, [x.ndim for x in ops])
    rest_needed = [set(out).union(*[set(t) for t in letters[i + 1:]]) for i in range(len(ops))]
    x, t = _reduce_one(ops[0], letters[0], rest_needed[0] | set("".join(letters[1:2])))
    for i in range(1, len(ops)):
        keep_i = rest_needed[i]
        y, u = _reduce_one(ops[i], letters[i], keep_i | set(t))
        x, t = _reduce_one(x, t, keep_i | set(u))
        x, t = _pair(x, t, y, u, keep_i)
    x, t = _reduce_one(x, t, set(out))
    if t != out:
        x = transpose(x, [t.index(c) for c in out])
    return x
