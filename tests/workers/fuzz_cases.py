"""Property fuzz: random programs on random arrays, mirrored in numpy after every step.

Each seed builds a program of 6-12 steps over a handful of named arrays
(random shapes, uneven, sometimes 0- or 1-sized dims; random layouts from
``_arrays.random_layout``: block, block-cyclic, two-axis, partial sums, on every
grid of ``_arrays.grids`` incl. size-1 axes; float64/32/16, bfloat16, int64,
bool) and applies random ops: elementwise and in-place operators, numpy
ufuncs with ``out=``, ``A[key]`` / ``A[key] = v`` (ints, slices with steps,
negative, int arrays, bool masks, DArray keys), views (``.T``, transpose,
swapaxes, expand_dims, squeeze) and writes through them, redistribution to
random layouts and writes to the results, reductions, cumsum, sort (in place
too), argsort, reshape, concatenate, matmul, astype, to_numpy in between.

numpy mirrors every array (float64 / int64 / bool values rounded to the
array's dtype; a view's mirror is a numpy view of its source's, so writes
reach both). After every step every live array is checked: its host copy
(``to_numpy``, which may come from a cache), this rank's piece against its
part of the mirror, and that all ranks agree on its version (a version that
differs between ranks makes a cache hit on one rank and a miss on another:
a stale answer or a hang). An op numpy refuses must raise the same type on
every rank. dmath's documented differences are mirrored, not numpy's:
indexing copies, ``redistribute`` / ``reshape`` may return the array itself
(then the names share a mirror), a squeezed sharded dim is a copy.

    mpiexec -n 4 python -m mpi4py tests/workers/fuzz_cases.py --seeds 0:200
    ... fuzz_cases.py --seeds 17:18 --verbose        # replay one program
    ... fuzz_cases.py --cs --seeds 0:20             # client-server mode

A failing program is printed (rank 0) with its seed, so it can be replayed.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
import traceback

import numpy as np
import torch

import dmath
from _arrays import TOL, grids, make, piece, random_layout, random_values, stored, summands
from dmath import Dim, Layout

ap = argparse.ArgumentParser()
ap.add_argument("--seeds", default="0:20", help="a:b, the seeds to run")
ap.add_argument("--steps", default="6:12", help="lo:hi steps per program")
ap.add_argument("--cs", action="store_true", help="client-server mode (rank 0 drives)")
ap.add_argument("--verbose", action="store_true", help="print each program as it runs")
ap.add_argument("--per-seed-timeout", type=float, default=60.0)
ap.add_argument("--no-fixed", action="store_true", help="skip the fixed reproducers")
ap.add_argument("--extended", action="store_true",
                help="issue 18: NaN/inf values, moves between grids, int64 matmul, linalg "
                     "routines on random, singular, rank-deficient and non-finite matrices")
ap.add_argument("--twin", action="store_true",
                help="run each program twice, plan caches on and off (dmath.runtime.plans): "
                     "the arrays must be equal bit for bit")
ARGS = ap.parse_args()

FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)
DT_P = (0.22, 0.18, 0.1, 0.15, 0.22, 0.13)
NAMES = {torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
         torch.bfloat16: "bfloat16", torch.int64: "int64", torch.bool: "bool"}


# -- commands (defined before init: client-server servers run them too) ---------------------
@dmath.command
def build(x, layout, grid, dtype, seed):
    """A DArray of value ``x`` in ``layout`` made from local pieces (partial
    layouts: a random summand per partial coordinate, the same on every rank)."""
    rng, t = np.random.default_rng(seed), as_dt(dtype)
    if x.ndim:
        return make(rng, x, layout, grid, t)
    mine = summands(rng, x, grid.axes_size(layout.partial))[grid.flat_coord(layout.partial)] \
        if layout.partial else x
    local = torch.tensor(float(mine) if t != torch.bool else bool(mine)).to(t)
    return dmath.from_local(local.to(dmath.context().device), (), layout, grid=grid)


@dmath.command
def check_pieces(arrays, mirrors, versions):
    """Every rank: its piece of each array equals its part of the mirror; the
    versions agree over the ranks (raises AssertionError naming the array)."""
    world = dmath.context().world
    mine = [a.version for a in arrays]
    every = world.allgather_obj(mine)
    bad = [i for i in range(len(arrays)) if len({v[i] for v in every}) > 1]
    problems = [f"{versions[i]}: versions differ between ranks {[v[i] for v in every]}"
                for i in bad]
    for a, x, name in zip(arrays, mirrors, versions):
        try:
            full = a.redistribute(a.layout.without_partial()) if a.layout.partial else a
            t = full.local.cpu()
            got = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
            want = piece(np.asarray(x), full.layout, full.grid)
            if got.shape != want.shape:
                problems.append(f"{name}: rank {world.rank} piece shape {got.shape} != {want.shape}")
            elif not np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True):
                problems.append(f"{name}: rank {world.rank} piece\n{got}\n!= mirror part\n{want}")
        except Exception as e:      # noqa: BLE001 - reported below, on every rank alike
            problems.append(f"{name}: rank {world.rank} piece check raised {e!r}")
    mine_ok = world.allgather_obj(problems)
    flat = [p for ps in mine_ok for p in ps]
    if flat:
        raise AssertionError("\n".join(dict.fromkeys(flat)))


def as_dt(name):
    return name if isinstance(name, torch.dtype) else getattr(torch, name)


ctx = dmath.init(mode="client-server" if ARGS.cs else "spmd")
world = ctx.world
P = world.size
RANK = world.rank
GRIDS = grids(P)


# -- numpy's dtype rules with bfloat16 (docs: ranks as float16; bf16 + f16 -> f32) ---------
def np_of(t: torch.dtype):
    t = getattr(t, "torch", t)            # a DArray's dtype is a dmath DType
    return {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
            torch.bfloat16: np.float16, torch.int64: np.int64, torch.bool: np.bool_}[t]


def back(d, dts) -> torch.dtype:
    d = np.dtype(d)
    if d == np.float16:
        b = torch.bfloat16 in dts
        h = torch.float16 in dts
        return torch.float32 if (b and h) else torch.bfloat16 if b else torch.float16
    return {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
            np.dtype(np.int64): torch.int64, np.dtype(np.bool_): torch.bool}[d]


def host_dt(t: torch.dtype):
    """The mirror's numpy dtype of an array of dtype ``t`` (a torch dtype or a DType)."""
    t = getattr(t, "torch", t)
    return np.bool_ if t == torch.bool else np.int64 if t == torch.int64 else np.float64


def fit(v, t: torch.dtype) -> np.ndarray:
    """Values ``v`` as an array of dtype ``t`` holds them (the mirror's dtype; ``t`` a
    torch dtype or a DType)."""
    t = getattr(t, "torch", t)
    v = np.asarray(v)
    if t == torch.bool:
        return v.astype(bool)
    if t == torch.int64:
        return v.astype(np.int64)
    return stored(v.astype(np.float64), t).reshape(v.shape)


def mag(x) -> float:
    x = np.asarray(x)
    return float(np.max(np.abs(x.astype(np.float64)))) if x.size else 0.0


class Expected(Exception):
    """numpy refused the op: dmath must raise this type on every rank."""


# -- the program state --------------------------------------------------------------------
class Var:
    def __init__(self, name, a, x, tol=False):
        self.name, self.a, self.x, self.tol = name, a, x, tol


class Program:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.grid = GRIDS[int(self.rng.integers(0, len(GRIDS)))]
        dmath.set_default_grid(self.grid)
        self.vars: list[Var] = []
        self.log: list[str] = [f"# seed {seed}, {P} ranks, grid {self.grid!r}"
                               + (" client-server" if ARGS.cs else "")]
        self.count = 0

    # names and bookkeeping
    def say(self, s: str) -> None:
        self.log.append(s)
        if ARGS.verbose and RANK == 0:
            print(s, flush=True)

    def add(self, a, x, tol=False, how="") -> Var:
        """A new name for ``a``; if ``a`` is already named (an op returned an existing
        array: documented for redistribute / reshape / cache hits), share its mirror."""
        for v in self.vars:
            if v.a is a:
                x = v.x
                how += f"   # is {v.name}"
                break
        self.count += 1
        v = Var(f"v{self.count}", a, x, tol)
        self.vars.append(v)
        if len(self.vars) > 7:
            self.vars.pop(1)
        self.say(f"{v.name} = {how}" if how else v.name)
        return v

    def pick(self, pred=lambda v: True):
        cands = [v for v in self.vars if pred(v)]
        return cands[int(self.rng.integers(0, len(cands)))] if cands else None

    # random pieces
    def shape(self, nd=None):
        rng = self.rng
        nd = int(rng.choice([1, 2, 2, 3, 3, 0] if nd is None else [nd]))
        p = self.grid.size
        out = []
        for _ in range(nd):
            r = rng.random()
            out.append(0 if r < 0.05 else 1 if r < 0.18 else int(rng.integers(2, 2 * p + 4)))
        return tuple(out)

    def dtype(self):
        return DTYPES[int(self.rng.choice(len(DTYPES), p=DT_P))]

    def values(self, shape, t):
        x = random_values(self.rng, shape, t)
        if ARGS.extended and t in FLOATS and x.size and self.rng.random() < 0.3:
            for _ in range(int(self.rng.integers(1, 3))):       # NaN / inf / -inf entries
                x[tuple(int(self.rng.integers(0, n)) for n in x.shape)] = \
                    self.rng.choice([np.nan, np.inf, -np.inf])
        return fit(x, t)

    def layout(self, nd, t=None, partial=True):
        return random_layout(self.rng, nd, self.grid,
                             partial=partial and t not in (torch.bool, None))

    def fresh(self, shape=None, t=None, name=True):
        shape = self.shape() if shape is None else tuple(shape)
        t = self.dtype() if t is None else t
        lay = self.layout(len(shape), t)
        x = self.values(shape, t)
        a = build(x, lay, self.grid, NAMES[t], int(self.rng.integers(0, 2**31)))
        how = f"build({shape}, {NAMES[t]}, {lay})"
        if name:
            return self.add(a, x, how=how)
        return a, x, how

    def scalar(self, t):
        r = self.rng.random()
        if t == torch.bool and r < 0.5:
            return bool(self.rng.integers(0, 2))
        if r < 0.6:
            return int(self.rng.integers(-4, 5))
        return float(self.rng.integers(-8, 9)) / 2


# -- checking --------------------------------------------------------------------------------
def compare(v: Var) -> None:
    got = v.a.to_numpy()
    if RANK != 0 and ARGS.cs:
        return
    want = np.asarray(v.x)
    assert got.shape == want.shape, f"{v.name}: shape {got.shape} != mirror {want.shape}"
    if v.tol:
        tol = TOL.get(v.a.torch_dtype, 0.0) * max(1.0, mag(want)) * 4
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bad = ~((err <= tol) | (got == want) | (np.isnan(got) & np.isnan(want)))
        assert not bad.any(), f"{v.name}: to_numpy off by {err.max()} (tol {tol})\n{got}\n{want}"
    else:
        assert np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True), \
            f"{v.name}: to_numpy\n{got}\n!= mirror\n{want}"


def check_all(prog: Program) -> None:
    for v in prog.vars:
        compare(v)
    exact = [v for v in prog.vars if not v.tol]
    if exact:
        check_pieces([v.a for v in exact], [np.asarray(v.x) for v in exact],
                     [v.name for v in exact])


# -- steps -------------------------------------------------------------------------------------
BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "maximum": np.maximum, "minimum": np.minimum, "less": np.less,
          "greater_equal": np.greater_equal, "equal": np.equal, "not_equal": np.not_equal,
          "logical_and": np.logical_and, "bitwise_or": np.bitwise_or,
          "floor_divide": np.floor_divide, "remainder": np.remainder}
OPERATOR = {"add": "+", "subtract": "-", "multiply": "*", "less": "<", "greater_equal": ">=",
            "equal": "==", "not_equal": "!=", "bitwise_or": "|", "floor_divide": "//",
            "remainder": "%"}
INPLACE = {"add": "+=", "subtract": "-=", "multiply": "*=", "bitwise_or": "|=",
           "floor_divide": "//=", "remainder": "%="}


def result_dtype(fn, *ops) -> torch.dtype:
    """numpy's loop dtype for ``fn`` on ``ops`` (torch dtypes or Python scalars)."""
    keys, dts = [], []
    for o in ops:
        o = getattr(o, "torch", o)        # a DArray's dtype is a dmath DType
        if isinstance(o, torch.dtype):
            keys.append(np.dtype(np_of(o)))
            dts.append(o)
        else:
            keys.append(o)
    d = fn.resolve_dtypes(tuple(k if isinstance(k, np.dtype) else np.dtype(bool)
                                if isinstance(k, bool) else type(k) for k in keys)
                          + (None,))[-1]
    return back(d, dts)


def broadcastable(prog, shape):
    """A var whose shape broadcasts to ``shape`` (or a fresh array that does)."""
    def ok(v):
        s = v.a.shape
        return len(s) <= len(shape) and all(a in (1, b) for a, b in zip(s[::-1], shape[::-1]))
    v = prog.pick(ok) if prog.rng.random() < 0.6 else None
    if v is None:
        sh = list(shape[len(shape) - int(prog.rng.integers(0, len(shape) + 1)):])
        for i in range(len(sh)):
            if prog.rng.random() < 0.25:
                sh[i] = 1
        v = prog.fresh(tuple(sh))
    return v


def operand(prog, shape, t):
    """A second operand: a scalar, a broadcastable var, or a numpy array."""
    r = prog.rng.random()
    if r < 0.3:
        s = prog.scalar(t)
        return s, s, repr(s), s
    if r < 0.4 and shape:
        x = prog.values(shape[-1:], torch.int64).astype(np.float64)
        return x, x, f"np.array({x.tolist()})", torch.float64
    v = broadcastable(prog, shape)
    return v.a, v.x, v.name, v.a.torch_dtype


def step_binary(prog: Program):
    v = prog.pick()
    name = str(prog.rng.choice(list(BINARY)))
    fn = BINARY[name]
    b, bx, bdesc, bkey = operand(prog, v.a.shape, v.a.torch_dtype)
    if name == "multiply" and mag(v.x) * mag(bx) > 300:
        name, fn = "add", np.add
    ints = v.a.torch_dtype == torch.int64 and (bkey is torch.int64 or type(bkey) is int)
    if name in ("floor_divide", "remainder") and not ints:    # integer zero divisors: 0
        b, bx, bdesc, bkey = (3, 3, "3", 3) if prog.rng.random() < 0.5 else (2.0, 2.0, "2.0", 2.0)
    if prog.rng.random() < 0.3 and name in OPERATOR:
        desc = f"{v.name} {OPERATOR[name]} {bdesc}"
        run = lambda: eval(f"A {OPERATOR[name]} B", {"A": v.a, "B": b})  # noqa: E731
    elif prog.rng.random() < 0.5:
        desc = f"np.{name}({v.name}, {bdesc})"
        run = lambda: fn(v.a, b)  # noqa: E731
    else:
        desc = f"dmath.{name}({v.name}, {bdesc})"
        run = lambda: getattr(dmath, name)(v.a, b)  # noqa: E731
    try:
        t = result_dtype(fn, v.a.torch_dtype, bkey)
        with np.errstate(all="ignore"):
            want = fn(np.asarray(v.x), bx)
            if ints and name in ("floor_divide", "remainder"):
                want = np.where(np.asarray(bx) == 0, 0, want)
    except TypeError:
        return expect_error(prog, desc, TypeError, run)
    got = run()
    assert got.torch_dtype == t, f"{desc}: dtype {got.dtype} != numpy's {t}"
    prog.add(got, fit(want, t), how=desc)


def step_inplace(prog: Program):
    v = prog.pick()
    name = str(prog.rng.choice(list(INPLACE) + ["np_out", "np_out_other"]))
    if name.startswith("np_out"):
        fname = str(prog.rng.choice(["add", "subtract", "maximum", "multiply", "negative"]))
        fn = getattr(np, fname)
        target = v
        if name == "np_out_other":
            target = prog.pick(lambda w: w.a.shape == v.a.shape) or v
        if fname == "negative":
            args, xs, desc = (v.a,), (np.asarray(v.x),), f"np.negative({v.name}, out={target.name})"
            keys = (v.a.torch_dtype,)
        else:
            b, bx, bdesc, bkey = operand(prog, v.a.shape, v.a.torch_dtype)
            if fname == "multiply" and mag(v.x) * mag(bx) > 300:
                fname, fn = "add", np.add
            args, xs, keys = (v.a, b), (np.asarray(v.x), bx), (v.a.torch_dtype, bkey)
            desc = f"np.{fname}({v.name}, {bdesc}, out={target.name})"
        run = lambda: fn(*args, out=target.a)  # noqa: E731
    else:
        fn = BINARY[name]
        target = v
        b, bx, bdesc, bkey = operand(prog, v.a.shape, v.a.torch_dtype)
        if name == "multiply" and mag(v.x) * mag(bx) > 300:
            name, fn = "add", np.add
        if name in ("floor_divide", "remainder"):
            b, bx, bdesc, bkey = 3, 3, "3", 3
        args, xs, keys = (v.a, b), (np.asarray(v.x), bx), (v.a.torch_dtype, bkey)
        desc = f"{v.name} {INPLACE[name]} {bdesc}"

        def run():
            a = v.a
            a = eval(f"a.__i{ {'add': 'add', 'subtract': 'sub', 'multiply': 'mul', 'bitwise_or': 'or', 'floor_divide': 'floordiv', 'remainder': 'mod'}[name]}__(b)",
                     {"a": a, "b": b})
            assert a is v.a, "in-place operator returned another array"
    tx = target.a.torch_dtype
    try:
        t = result_dtype(fn, *keys)
        with np.errstate(all="ignore"):
            want = fn(*xs)
        if want.shape != target.a.shape:
            raise ValueError
        if not np.can_cast(np.dtype(np_of(t)), np.dtype(np_of(tx)), "same_kind"):
            raise TypeError
    except TypeError:
        return expect_error(prog, desc, TypeError, run)
    except ValueError:
        return expect_error(prog, desc, ValueError, run)
    run()
    target.x[...] = fit(fit(want, t), tx)
    prog.say(desc)


def expect_error(prog, desc, exc, run):
    prog.say(f"{desc}   # raises {exc.__name__}")
    before = [(v.a.version, np.array(v.x, copy=True)) for v in prog.vars]
    try:
        run()
    except exc:
        pass
    else:
        raise AssertionError(f"{desc}: numpy raises {exc.__name__}, dmath did not")
    # nothing written (all-or-nothing)
    for v, (_, x) in zip(prog.vars, before):
        assert np.array_equal(np.asarray(v.x), x, equal_nan=True)


def random_key(prog: Program, shape, for_set: bool, src: Var):
    """A numpy key for an array of ``shape`` and a description; sometimes with
    DArray parts (returned as (dmath key, numpy key, text))."""
    rng = prog.rng
    nd = len(shape)
    if nd and rng.random() < 0.12:           # a whole-array mask (numpy or DArray)
        t = int(rng.integers(-3, 3))
        m = np.asarray(src.x) > t
        if rng.random() < 0.5 and src.a.torch_dtype != torch.bool:
            return src.a > t, m, f"{src.name} > {t}"
        return m, m, f"({src.name}.to_numpy() > {t})"
    entries, nkeys, texts = [], [], []
    d, used_ell, used_adv = 0, False, 0
    while d < nd and rng.random() < 0.85:
        n = shape[d]
        r = rng.random()
        if r < 0.08 and not used_ell:
            k = Ellipsis
            used_ell = True
            entries.append(k)
            nkeys.append(k)
            texts.append("...")
            d = nd - int(rng.integers(0, nd - d + 1))
            continue
        if r < 0.14:
            entries.append(None)
            nkeys.append(None)
            texts.append("None")
            continue
        if r < 0.35 and n:
            k = int(rng.integers(-n, n))
            if rng.random() < 0.03:
                k = n                                   # out of range: IndexError
            entries.append(k)
            nkeys.append(k)
            texts.append(str(k))
        elif r < 0.6 or n == 0:
            start = None if rng.random() < 0.4 else int(rng.integers(-n - 2, n + 2))
            stop = None if rng.random() < 0.4 else int(rng.integers(-n - 2, n + 2))
            step = [None, 1, 2, 3, -1, -2][int(rng.integers(0, 6))]
            k = slice(start, stop, step)
            entries.append(k)
            nkeys.append(k)
            texts.append(f"{'' if start is None else start}:{'' if stop is None else stop}"
                         f"{'' if step is None else ':' + str(step)}")
        elif r < 0.85 and used_adv < 2:
            m = int(rng.integers(0, min(n, 4) + 1))
            if for_set or rng.random() < 0.5:
                idx = rng.choice(n, m, replace=False)
            else:
                idx = rng.integers(0, n, m)
            idx = np.where(rng.random(m) < 0.3, idx - n, idx).astype(np.int64)
            if used_adv and rng.random() < 0.5:
                idx = idx[:1]
            used_adv += 1
            if rng.random() < 0.25:
                dk = dmath.from_numpy(idx, layout=Layout(Dim(("*",) if rng.random() < .5 else ())))
                entries.append(dk)
                texts.append(f"D{idx.tolist()}")
            else:
                entries.append(idx.tolist() if rng.random() < 0.5 else idx)
                texts.append(str(idx.tolist()))
            nkeys.append(idx)
        else:
            m = rng.random(n) < 0.5
            entries.append(m)
            nkeys.append(m)
            texts.append(f"mask{m.astype(int).tolist()}")
        d += 1
    if len(nkeys) == 1 and rng.random() < 0.5:
        return entries[0], nkeys[0], texts[0]
    return tuple(entries), tuple(nkeys), ", ".join(texts)


def step_getitem(prog: Program):
    v = prog.pick()
    key, nkey, text = random_key(prog, v.a.shape, False, v)
    desc = f"{v.name}[{text}]"
    try:
        want = np.asarray(v.x)[nkey]
    except IndexError:
        return expect_error(prog, desc, IndexError, lambda: v.a[key])
    got = v.a[key]
    assert got.torch_dtype == v.a.torch_dtype
    prog.add(got, np.array(want, copy=True), how=desc)


def int_key(key):
    """``key`` with boolean masks as their ``nonzero`` index arrays (same selection)."""
    out = []
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, np.ndarray) and k.dtype == bool:
            out.extend(np.nonzero(k))
        else:
            out.append(k)
    return tuple(out)


def step_setitem(prog: Program):
    v = prog.pick()
    key, nkey, text = random_key(prog, v.a.shape, True, v)
    try:
        sel = np.asarray(v.x)[nkey]
    except IndexError:
        return expect_error(prog, f"{v.name}[{text}] = 1", IndexError,
                            lambda: v.a.__setitem__(key, 1))
    shape = sel.shape
    r = prog.rng.random()
    if r < 0.3:
        val = prog.scalar(v.a.torch_dtype)
        if v.a.torch_dtype == torch.int64 and isinstance(val, float):
            val = int(val)                  # numpy truncates; dmath too (not tested here)
        vx, vdesc = val, repr(val)
    elif r < 0.5:
        sh = list(shape)
        for i in range(len(sh)):
            if prog.rng.random() < 0.25:
                sh[i] = 1
        if prog.rng.random() < 0.2:
            sh = [1] + sh
        val = prog.values(tuple(sh), torch.int64).astype(np.float64)
        vx, vdesc = val, f"np.array(shape {tuple(sh)})"
    else:
        w = broadcastable(prog, shape)
        val, vx, vdesc = w.a, np.asarray(w.x), w.name
    desc = f"{v.name}[{text}] = {vdesc}"
    vshape = np.shape(vx)
    while len(vshape) > len(shape) and vshape[0] == 1:
        vshape = vshape[1:]                 # leading 1s dropped, as numpy (and dmath) do
    if len(vshape) > len(shape) or any(a not in (1, b) for a, b in zip(vshape[::-1], shape[::-1])):
        return expect_error(prog, desc, ValueError, lambda: v.a.__setitem__(key, val))
    vx = fit(np.asarray(vx), v.a.torch_dtype).reshape(vshape)
    v.a[key] = val
    v.x[int_key(nkey)] = np.broadcast_to(vx, shape)
    prog.say(desc)


def step_view(prog: Program):
    v = prog.pick()
    a, x, nd = v.a, v.x, v.a.ndim
    r = prog.rng.random()
    if r < 0.25 or nd < 2:
        if r < 0.5 and nd >= 0:
            ax = int(prog.rng.integers(-nd - 1, nd + 1))
            return prog.add(dmath.expand_dims(a, ax), np.expand_dims(x, ax),
                            how=f"dmath.expand_dims({v.name}, {ax})")
        ones = [k for k, n in enumerate(a.shape) if n == 1]
        if not ones:
            return prog.add(a.T, x.T, how=f"{v.name}.T")
        axis = None if prog.rng.random() < 0.4 else int(prog.rng.choice(ones))
        axes = ones if axis is None else [axis]
        got = dmath.squeeze(a, axis) if prog.rng.random() < 0.5 else a.squeeze(axis)
        want = np.squeeze(x, axis)
        if any(a.layout.dims[k].axes for k in axes):
            want = want.copy()              # documented: a sharded dim squeezed is a copy
        return prog.add(got, want, how=f"{v.name}.squeeze({axis})")
    if r < 0.5:
        return prog.add(a.T, x.T, how=f"{v.name}.T")
    perm = tuple(int(i) for i in prog.rng.permutation(nd))
    if r < 0.75:
        return prog.add(a.transpose(*perm), x.transpose(perm), how=f"{v.name}.transpose{perm}")
    i, j = (int(k) for k in prog.rng.integers(0, nd, 2))
    return prog.add(dmath.swapaxes(a, i, j), np.swapaxes(x, i, j),
                    how=f"dmath.swapaxes({v.name}, {i}, {j})")


def step_redistribute(prog: Program):
    v = prog.pick()
    lay = prog.layout(v.a.ndim, v.a.torch_dtype)
    method = "general" if prog.rng.random() < 0.2 else "auto"
    got = v.a.redistribute(lay, method=method)
    prog.add(got, np.array(v.x, copy=True), how=f"{v.name}.redistribute({lay}, method={method!r})")


def step_reduce(prog: Program):
    v = prog.pick()
    a, x = v.a, np.asarray(v.x)
    name = str(prog.rng.choice(["sum", "max", "min", "argmax", "argmin", "cumsum", "mean",
                                "any"]))
    nd = a.ndim
    axis = None if nd == 0 or prog.rng.random() < 0.3 else int(prog.rng.integers(-nd, nd))
    if name == "sum" and nd >= 2 and prog.rng.random() < 0.3:
        axis = tuple(int(k) for k in prog.rng.choice(nd, 2, replace=False))
    keep = bool(prog.rng.random() < 0.3) and name in ("sum", "max", "min", "mean", "any")
    kw = {"keepdims": True} if keep else {}
    desc = f"dmath.{name}({v.name}, axis={axis}{', keepdims=True' if keep else ''})"
    if name == "cumsum" and axis is None and nd != 1:
        axis = 0 if nd else None
        desc = f"dmath.cumsum({v.name}, axis={axis})"
    try:
        with np.errstate(all="ignore"):
            want = np.asarray(getattr(np, name)(x.astype(np_of(a.dtype)) if a.torch_dtype != torch.bfloat16
                                                else x, axis=axis, **kw))
    except (ValueError, TypeError) as e:
        exc = ValueError if isinstance(e, ValueError) else TypeError
        return expect_error(prog, desc, exc, lambda: getattr(dmath, name)(a, axis=axis, **kw))
    got = getattr(dmath, name)(a, axis=axis, **kw)
    if name in ("argmax", "argmin"):
        t = torch.int64
    elif name == "any":
        t = torch.bool
    elif name == "mean" and a.torch_dtype in (torch.int64, torch.bool):
        t = torch.float64
    elif name in ("sum", "cumsum") and a.torch_dtype == torch.bool:
        t = torch.int64
    else:
        t = a.torch_dtype
    assert got.torch_dtype == t, f"{desc}: dtype {got.dtype} != {t}"
    tol = t in FLOATS and name not in ("max", "min")
    if tol:     # checked with a tolerance now, then the mirror takes dmath's values
        nv = prog.add(got, fit(want, t), tol=True, how=desc)
        compare(nv)
        nv.x = fit(got.to_numpy(), t) if not ARGS.cs or RANK == 0 else nv.x
        nv.tol = False
        if ARGS.cs:
            nv.x = np.asarray(nv.x)
    else:
        prog.add(got, fit(want, t), how=desc)


def step_sort(prog: Program):
    v = prog.pick(lambda w: w.a.ndim >= 1)
    if v is None:
        return step_binary(prog)
    axis = int(prog.rng.integers(-v.a.ndim, v.a.ndim))
    r = prog.rng.random()
    x = v.x
    if r < 0.4:
        v.a.sort(axis)
        x.sort(axis)
        prog.say(f"{v.name}.sort({axis})")
    elif r < 0.7:
        prog.add(dmath.sort(v.a, axis), np.sort(np.asarray(x), axis), how=f"dmath.sort({v.name}, {axis})")
    else:
        prog.add(dmath.argsort(v.a, axis), np.argsort(np.asarray(x), axis, kind="stable"),
                 how=f"dmath.argsort({v.name}, {axis})")


def step_reshape(prog: Program):
    v = prog.pick()
    a, x = v.a, np.asarray(v.x)
    n = a.size
    if prog.rng.random() < 0.3:
        return prog.add(a.ravel(), x.ravel().copy(), how=f"{v.name}.ravel()")
    divs = [d for d in range(1, n + 1) if n % d == 0] or [0]
    d = int(prog.rng.choice(divs))
    new = (d, n // d if d else int(prog.rng.integers(1, 4)))
    if prog.rng.random() < 0.3 and d:
        new = (d, -1)
    lay = None
    if prog.rng.random() < 0.3:
        lay = prog.layout(2, partial=False)
    want = x.reshape(new).copy()
    got = a.reshape(*new, layout=lay) if lay is not None else a.reshape(*new)
    prog.add(got, want, how=f"{v.name}.reshape{new}{'' if lay is None else ', layout=' + str(lay)}")


def step_concat(prog: Program):
    v = prog.pick(lambda w: w.a.ndim >= 1)
    if v is None:
        return step_binary(prog)
    axis = int(prog.rng.integers(0, v.a.ndim))
    sh = list(v.a.shape)
    sh[axis] = int(prog.rng.integers(0, 4))
    w = prog.pick(lambda u: u.a.ndim == v.a.ndim and u is not v and all(
        s == t for k, (s, t) in enumerate(zip(u.a.shape, v.a.shape)) if k != axis))
    if w is None or prog.rng.random() < 0.4:
        w = prog.fresh(tuple(sh))
    want = np.concatenate([np.asarray(v.x), np.asarray(w.x)], axis)
    t = back(np.result_type(np_of(v.a.torch_dtype), np_of(w.a.torch_dtype)), (v.a.torch_dtype, w.a.torch_dtype))
    desc = f"dmath.concatenate([{v.name}, {w.name}], {axis})"
    got = dmath.concatenate([v.a, w.a], axis)
    assert got.torch_dtype == t, f"{desc}: dtype {got.dtype} != numpy's {t}"
    prog.add(got, fit(want, t), how=desc)


def step_matmul(prog: Program):
    v = prog.pick(lambda w: w.a.ndim == 2 and w.a.torch_dtype in FLOATS)   # matmul: floats only
    if v is None:
        return step_binary(prog)
    m, k = v.a.shape
    r = prog.rng.random()
    if r < 0.3:
        w = prog.add(v.a.T, v.x.T, how=f"{v.name}.T")
    elif r >= 0.85:                 # matrix @ vector (iterative methods' product; issue 18's hang)
        # a vector used again (its cached gathered copy is hit) or a new one
        w = prog.pick(lambda u: u.a.ndim == 1 and u.a.shape[0] == k and u.a.torch_dtype in FLOATS)
        if w is None:
            w = prog.fresh((k,), t=v.a.torch_dtype)
    else:
        w = prog.pick(lambda u: u.a.ndim == 2 and u.a.shape[0] == k and u.a.torch_dtype in FLOATS)
        if w is None or r < 0.6:
            w = prog.fresh((k, int(prog.rng.integers(1, 6))), t=v.a.torch_dtype if prog.rng.random() < .7
                           else FLOATS[int(prog.rng.integers(0, 4))])
    t = back(np.result_type(np_of(v.a.torch_dtype), np_of(w.a.torch_dtype)), (v.a.torch_dtype, w.a.torch_dtype))
    if t in (torch.float16, torch.bfloat16) and mag(v.x) * mag(w.x) * max(k, 1) > 3e4:
        return                      # would overflow float16: inf - inf is noise here
    desc = f"{v.name} @ {w.name}"
    got = v.a @ w.a
    assert got.torch_dtype == t, f"{desc}: dtype {got.dtype} != numpy's {t}"
    want = np.asarray(v.x, np.float64) @ np.asarray(w.x, np.float64)
    if t in FLOATS:
        nv = prog.add(got, fit(want, t), tol=True, how=desc)
        compare(nv)
        nv.x = np.asarray(fit(got.to_numpy(), t)) if not ARGS.cs or RANK == 0 else nv.x
        nv.tol = False
    else:
        prog.add(got, fit(want, t), how=desc)


def step_astype(prog: Program):
    v = prog.pick()
    t = prog.dtype()
    if t == torch.int64 and not np.isfinite(np.asarray(v.x, np.float64)).all():
        t = torch.float64                  # NaN/inf -> int64 is undefined (numpy, torch differ)
    got = v.a.astype(t)
    assert got.torch_dtype == t and got is not v.a        # a new array, as numpy's astype
    want = fit(np.asarray(v.x), t)
    prog.add(got, want if t != v.a.torch_dtype else np.array(v.x, copy=True),
             how=f"{v.name}.astype({NAMES[t]})")


def step_where(prog: Program):
    v = prog.pick()
    c = v.a > 0 if v.a.torch_dtype != torch.bool else v.a
    cx = np.asarray(v.x) > 0
    w = broadcastable(prog, v.a.shape)
    s = prog.scalar(torch.float64)
    got = dmath.where(c, w.a, s)
    t = result_dtype(np.add, w.a.torch_dtype, s) if w.a.torch_dtype != torch.bool or not isinstance(s, bool) \
        else torch.bool
    want = np.where(cx, np.asarray(w.x), s)
    assert got.torch_dtype == t or w.a.torch_dtype == torch.bool, f"where dtype {got.dtype} != {t}"
    prog.add(got, fit(want, got.dtype), how=f"dmath.where({v.name} > 0, {w.name}, {s})")


def step_clip(prog: Program):
    v = prog.pick(lambda w: w.a.torch_dtype != torch.bool)
    if v is None:
        return step_binary(prog)
    got = dmath.clip(v.a, -3, 5)
    prog.add(got, fit(np.clip(np.asarray(v.x), -3, 5), got.dtype), how=f"dmath.clip({v.name}, -3, 5)")


def step_copy_write(prog: Program):
    """A cached replicated copy, then a write to the source: the copy must not be served."""
    v = prog.pick()
    rep = v.a.redistribute(dmath.replicated())
    prog.add(rep, np.array(v.x, copy=True), how=f"{v.name}.redistribute(replicated())")


STEPS = [(step_binary, 3), (step_inplace, 3), (step_getitem, 3), (step_setitem, 4),
         (step_view, 3), (step_redistribute, 3), (step_reduce, 2), (step_sort, 1),
         (step_reshape, 2), (step_concat, 1), (step_matmul, 1), (step_astype, 1),
         (step_where, 1), (step_clip, 1), (step_copy_write, 1)]
if ARGS.extended:
    from fuzz_linalg import step_int_matmul, step_linalg, step_regrid
    STEPS += [(step_regrid, 2), (step_int_matmul, 1), (step_linalg, 2)]
_W = np.array([w for _, w in STEPS], float)
_W /= _W.sum()


def run_program(seed: int) -> "Program":
    prog = Program(seed)
    lo, hi = (int(s) for s in ARGS.steps.split(":"))
    n = int(prog.rng.integers(lo, hi + 1))
    timer = threading.Timer(ARGS.per_seed_timeout, hung, (prog,))
    timer.daemon = True
    timer.start()
    try:
        for _ in range(int(prog.rng.integers(1, 3))):
            prog.fresh()
        check_all(prog)
        for _ in range(n):
            step = STEPS[int(prog.rng.choice(len(STEPS), p=_W))][0]
            step(prog)
            check_all(prog)
    except Exception:
        fail(prog, traceback.format_exc())
    finally:
        timer.cancel()
        timer.join()
    return prog


def run_twins(seed: int) -> None:
    """The program of ``seed`` planned and unplanned: every array it left, bit for bit."""
    from dmath.runtime import plans
    got = []
    for enabled in (True, False):
        plans.set_enabled(enabled)
        prog = run_program(seed)
        got.append([(v.name, v.a.to_numpy()) for v in prog.vars])
    plans.set_enabled(True)
    if RANK != 0 and ARGS.cs:
        return
    for (name, x), (_, y) in zip(*got):
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            fail(prog, f"{name}: planned and unplanned runs differ\n{x!r}\n{y!r}")


def hung(prog):
    print(f"rank {RANK}: program did not finish in {ARGS.per_seed_timeout} s (a hang?):\n"
          + "\n".join(prog.log), file=sys.stderr, flush=True)
    os._exit(3)


def fail(prog, tb):
    # Agree on the failure where possible (a rank-local failure must not leave others waiting).
    print(f"rank {RANK}: FAILED program\n" + "\n".join(prog.log) + "\n" + tb,
          file=sys.stderr, flush=True)
    time.sleep(0.5)
    os._exit(1)


# -- fixed reproducers of bugs found by this fuzz ------------------------------------------------
FIXED = []


def fixed(fn):
    FIXED.append(fn)
    return fn


def verify(named: dict) -> None:
    """Host copies and every rank's pieces of ``{name: (array, mirror)}`` match."""
    for name, (a, x) in named.items():
        compare(Var(name, a, x))
    check_pieces([a for a, _ in named.values()], [x for _, x in named.values()], list(named))


@fixed
def redistribute_result_is_not_a_view():
    """A local slice (replicated -> sharded) or a gather over one rank returned a view
    of the source: a write through it reached one replica of the source only, and
    only ranks with a non-empty piece bumped the source's version (stale to_numpy on
    the others: seed 80 on 2 ranks)."""
    g = dmath.Grid((1, P))
    for shape, lay in [((1,), Layout(Dim(("cols",)))), ((P + 1, 2), Layout(Dim(("cols",)))),
                       ((3, 2), Layout(Dim(("rows",)), Dim(("cols",))))]:
        x = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
        A = dmath.from_numpy(x, layout=Layout(*[Dim(("rows",))] + [Dim()] * (len(shape) - 1)),
                             grid=g)
        A.to_numpy()
        R = A.redistribute(lay)
        R[0] = -5.0
        r = x.copy()
        r[0] = -5.0
        verify({"A": (A, x), "R": (R, r)})


@fixed
def inplace_sort_of_a_view():
    """A.T.sort(): the sorted pieces replaced the view's, the source kept the old
    values (seed 33 on 4 ranks)."""
    x = np.array([[3, 1, 2], [0, 5, 4], [9, 7, 8], [6, 2, 1]], dtype=np.float64)
    A = dmath.from_numpy(x, layout=dmath.row_block())
    B = A.T
    B.sort(-1)
    x.T.sort(-1)
    verify({"A": (A, x), "B": (B, x.T)})


@fixed
def inplace_sort_of_partial_sums():
    """ndarray.sort on a partial-sum array (refused before): the sorted values
    live in the summand of coordinate 0."""
    x = np.array([[3, 1, 2, 0], [0, 5, 4, 1]], dtype=np.float64)
    g = dmath.Grid((P,), ("line",))
    A = build(x, Layout(Dim(), Dim(), partial=("line",)), g, "float32", 1)
    A.sort(1)
    x.sort(1)
    verify({"A": (A, x)})


@fixed
def astype_of_partial_sums():
    """astype cast each summand: bool summands 1 + 1 read back as 2 after
    astype(bool).astype(int64), float -> int truncated each summand (seed 1183
    on 4 ranks)."""
    g = dmath.Grid((P,), ("line",))
    x = np.array([1.0, 0.0, -3.0, 2.5, -2.5])
    A = build(x, Layout(Dim(), partial=("line",)), g, "float64", 7)
    verify({"A": (A, x)})
    for t, want in [("bool", x != 0), ("int64", np.trunc(x)), ("float16", x)]:
        B = A.astype(t)
        assert B.torch_dtype == getattr(torch, t), B.dtype
        verify({"B": (B, want)})
        verify({"C": (B.astype(torch.int64), want.astype(np.int64))})


@fixed
def matmul_of_a_partial_half_operand():
    """float64 @ a bfloat16 partial-sum matrix: the operand's cast to float64 must
    keep it partial (the product's plan reads its partial axes); reducing it in
    astype made the product P times too big (seed 3199 on 4 ranks)."""
    g = dmath.Grid((P, 1))
    x = np.arange(9.0).reshape(3, 3) - 4
    y = np.arange(15.0).reshape(3, 5) % 7 - 3
    A = build(x, Layout(Dim(("cols",)), Dim(("rows",), 2)), g, "float64", 3)
    B = build(y, Layout(Dim(), Dim(), partial=("rows",)), g, "bfloat16", 4)
    C = A @ B
    assert C.torch_dtype == torch.float64
    verify({"C": (C, x @ y)})


@fixed
def integer_division_by_zero():
    """int // 0, int % 0, fmod: numpy gives 0; torch raised ZeroDivisionError on the
    ranks holding a zero divisor only, and the others went on into the next
    collective (a hang, or MPI_ERR_ARG). Fewer elements than ranks: some pieces
    are empty."""
    g = dmath.Grid((P,), ("line",))
    x = np.array([7, -7, 5, 0][:max(P - 1, 1)], np.int64)
    y = np.array([0, 2, 0, 3][:max(P - 1, 1)], np.int64)
    A = dmath.from_numpy(x, layout=Layout(Dim(("line",))), grid=g)
    B = dmath.from_numpy(y, layout=Layout(Dim(("line",))), grid=g)
    with np.errstate(all="ignore"):
        for f in (np.floor_divide, np.remainder, np.fmod):
            for b, yb in [(B, y), (0, 0)]:
                verify({f.__name__: (f(A, b), f(x, yb))})
        A //= B
        x //= y
    verify({"A": (A, x)})


def agreed_error(name, fn, exc):
    """``fn()`` raises ``exc`` on every rank (SPMD: the ranks compare what they saw)."""
    try:
        fn()
        got = None
    except Exception as e:      # noqa: BLE001 - compared below
        got = type(e)
    if not ARGS.cs:
        seen = world.allgather_obj(got and got.__name__)
        assert len(set(seen)) == 1, f"{name}: ranks raised {seen}"
    assert got is not None and issubclass(got, exc), f"{name}: raised {got}, want {exc}"


@fixed
def invalid_arguments_raise_everywhere():
    """Bad arguments on arrays with empty pieces raise the same error on every rank."""
    g = dmath.Grid((P,), ("line",))
    n = max(P - 1, 1)
    F = dmath.from_numpy(np.arange(n, dtype=np.float64), layout=Layout(Dim(("line",))), grid=g)
    F2 = dmath.from_numpy(np.ones((n, 2)), layout=Layout(Dim(("line",))), grid=g)
    I = dmath.from_numpy(np.arange(n, dtype=np.int64), layout=Layout(Dim(("line",))), grid=g)
    nan = np.ones((n, 2))
    nan[0] = np.nan
    N = dmath.from_numpy(nan, layout=Layout(Dim(("line",))), grid=g)
    out = dmath.from_numpy(np.array([0, n + 3]), layout=Layout(Dim(("line",))), grid=g)
    for name, fn, exc in [
            ("index out of range (DArray key)", lambda: F[out], IndexError),
            ("float index", lambda: F[F], IndexError),
            ("setitem shape", lambda: F.__setitem__(slice(0, 1), F2), ValueError),
            ("nanargmax all-NaN row", lambda: dmath.nanargmax(N, axis=1), ValueError),
            ("max of empty", lambda: dmath.max(F[:0]), ValueError),
            ("argmax of empty", lambda: dmath.argmax(F2[:0], axis=0), ValueError),
            ("matmul inner", lambda: F2 @ dmath.ones((3, 1), grid=g), ValueError),
            ("reshape", lambda: F.reshape(n + 1), ValueError),
            ("int += float", lambda: I.__iadd__(1.5), TypeError),
            ("broadcast into out", lambda: F.__iadd__(F2), ValueError),
            ("concatenate", lambda: dmath.concatenate([F, F2]), ValueError),
            ("squeeze", lambda: dmath.squeeze(F2, 1), ValueError),
            ("sort kind", lambda: I.sort(kind="bogus"), ValueError)]:
        agreed_error(name, fn, exc)


@fixed
def concatenate_promotes_like_numpy():
    """concatenate of float16 and int64 was float16 (torch's promotion): numpy's is
    float64, and 4097 must survive."""
    a = dmath.from_numpy(np.array([1.5], np.float16))
    b = dmath.from_numpy(np.array([4097], np.int64), layout=dmath.row_block())
    c = dmath.concatenate([a, b])
    assert c.torch_dtype == torch.float64, c.dtype
    assert c.to_numpy().tolist() == [1.5, 4097.0]


passed = 0
if not ARGS.no_fixed:
    for fn in FIXED:
        fn()
        passed += 1
a, b = (int(s) for s in ARGS.seeds.split(":"))
t0 = time.time()
for seed in range(a, b):
    (run_twins if ARGS.twin else run_program)(seed)
    passed += 1
if RANK == 0:
    print(f"fuzz: {b - a} programs in {time.time() - t0:.1f} s", flush=True)
    if ARGS.extended:
        from fuzz_linalg import OUTCOMES
        print("linalg outcomes: " + ", ".join(f"{k}: {n}" for k, n in sorted(OUTCOMES.items())),
              flush=True)
    print(f"CASES {passed} passed", flush=True)
