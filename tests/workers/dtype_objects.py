"""dmath's DType objects on real MPI ranks, in SPMD or client-server mode.

``A.dtype`` is a ``dmath.DType`` (``dmath.float64`` & co.): equal to numpy's dtype,
numpy's scalar type and the name, never to a torch dtype (a warning); hashed like
numpy's dtype, so dicts keyed by np.dtype objects find it; taken by
``np.dtype`` and numpy's ``dtype=``; the same objects as the array API namespace's;
pickled by name (so a command's DType argument arrives on the servers as the very
same object). Every dtype argument takes all spellings.

    mpiexec -n 2 python -m mpi4py tests/workers/dtype_objects.py spmd|client-server
"""
import pickle
import sys
import warnings

import numpy as np
import torch

import dmath

NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32",
         "float64", "complex64", "complex128")


@dmath.command(sync=True)
def _what_servers_see(dt, a) -> list:
    """On every rank: whether the DType argument is the module's own object and
    matches the array's pieces; rank 0 gets every rank's answer."""
    mine = (dt is dmath.float32, a.dtype is dt, a.local.dtype == torch.float32,
            a.torch_dtype is torch.float32, hash(dt) == hash(np.dtype("float32")))
    return dmath.context().world.allgather_obj(mine)


mode = sys.argv[1] if len(sys.argv) > 1 else "spmd"
ctx = dmath.init(mode=mode)
assert ctx.mode == mode and ctx.world.size >= 2, (ctx.mode, ctx.world.size)
passed = 0


def ok(cond, what):
    global passed
    assert cond, what
    passed += 1


# -- the objects: one kind, every spelling equal ------------------------------------------
for name in NAMES:
    d = getattr(dmath, name)
    t = getattr(torch, name)
    ok(isinstance(d, dmath.DType) and d.torch is t and d.name == name, f"{name} object")
    ok(repr(d) == f"dmath.{name}" and str(d) == name, f"{name} repr/str")
    ok(d == name and name == d and d.torch == t, f"{name} == name")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ok(d == t and t == d and not d != t and not t != d, f"{name} == torch.{name}")
    ok(not w, f"{name} compares with torch quietly")
    ok(t not in {d: 1} and d not in {t: 1}, f"{name} not a torch key")
    ok(len({d, getattr(dmath, name)}) == 1 and {d: 1}[getattr(dmath, name)] == 1, f"{name} hash")
    ok(d.itemsize == torch.empty(0, dtype=t).element_size(), f"{name} itemsize")
    ok(pickle.loads(pickle.dumps(d)) is d, f"{name} pickle")
    ok(dmath.array.dtypes.as_dtype(d) is t, f"{name} as_dtype")
    if name == "bfloat16":
        for bad in (lambda: np.dtype(d), lambda: np.zeros(2, dtype=d), lambda: d.type):
            try:
                bad()
            except TypeError:
                passed += 1
            else:
                raise AssertionError("np.dtype(dmath.bfloat16) did not raise")
        ok(d != np.float32 and np.dtype(np.float32) != d and d != np.float16, "bfloat16 numpy")
        ok(d.kind == "f", "bfloat16 kind")
        continue
    n = np.dtype(name)
    ok(d == n and n == d and d == n.type and n.type == d and not d != n, f"{name} == numpy")
    ok(hash(d) == hash(n) and {d: 1}[n] == 1 and {n: 1}[d] == 1 and len({d, n}) == 1,
       f"{name} hashes as np.dtype")
    ok(np.dtype(d) == n and np.zeros(2, dtype=d).dtype == n and d.dtype == n, f"np.dtype({name})")
    ok(d.kind == n.kind and d.type is n.type, f"{name} kind/type")
    others = [o for o in NAMES if o != name and o != "bfloat16"]
    ok(all(d != getattr(dmath, o) and d != np.dtype(o) and d != o
           for o in others), f"{name} != the others")
ok(dmath.float64 == "double" and dmath.float32 == "f4" and dmath.float16 == "half", "aliases")
ok(dmath.float64 != 3 and dmath.float64 != None  # noqa: E711
   and dmath.float64 != "nonsense", "others")
ok(dmath.float32 != np.float64 and np.float64 != dmath.float32, "float32 != float64")

# -- the array API namespace re-uses the same objects -------------------------------------
xp = dmath.array_api
for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "float32", "float64",
             "complex64", "complex128"):
    ok(getattr(xp, name) is getattr(dmath, name), f"xp.{name} is dmath.{name}")
ok(xp.DType is dmath.DType and xp.uint16.name == "uint16", "xp.DType")

# -- arrays: A.dtype is the object, A.torch_dtype the torch dtype --------------------------
x = np.arange(24, dtype=np.float64).reshape(6, 4) / 7
A = dmath.from_numpy(x, dmath.row_block())
ok(A.dtype is dmath.float64 and A.dtype == np.float64 and A.dtype == x.dtype, "A.dtype")
ok(A.torch_dtype is torch.float64 and A.local.dtype is torch.float64, "A.torch_dtype")
ok(np.dtype(A.dtype) == x.dtype and np.empty(2, A.dtype).dtype == x.dtype, "np.dtype(A.dtype)")
ok(A.to_numpy().dtype == A.dtype and np.asarray(A).dtype == A.dtype, "to_numpy dtype")
ok({dmath.float64: "f8"}[A.dtype] == "f8" and {np.dtype("float64"): 1}[A.dtype] == 1
   and {A.dtype: 1}[x.dtype] == 1, "dict by A.dtype / by numpy's dtype")
ok({torch.float64: 1}[A.torch_dtype] == 1 and {np.float64: 1}[A.dtype.type] == 1
   and {"float64": 1}[A.dtype.name] == 1, "dicts of torch dtypes, scalar types, names")
try:
    torch.zeros(2, dtype=A.dtype)
except TypeError:
    passed += 1                        # torch takes the torch dtype only
else:
    raise AssertionError("torch took a DType")
ok(torch.zeros(2, dtype=A.torch_dtype).dtype is torch.float64, "torch takes torch_dtype")

for name in ("float32", "float16", "bfloat16", "int32", "int64", "uint8", "bool", "complex64"):
    spellings = [getattr(dmath, name), getattr(torch, name), name]
    if name != "bfloat16":
        spellings += [np.dtype(name), np.dtype(name).type]
    for s in spellings:
        B = A.astype(s)
        ok(B.dtype is getattr(dmath, name) and B.torch_dtype is getattr(torch, name)
           and B.layout == A.layout, f"astype({s!r})")
        ok(xp.astype(A, s).dtype is getattr(dmath, name), f"xp.astype({s!r})")
    want = np.float32 if name == "bfloat16" else np.dtype(name)
    ok(A.astype(getattr(dmath, name)).to_numpy().dtype == want, f"{name} to_numpy")
    ok(np.array_equal(A.astype(name).to_numpy(), x.astype(want)) or name in ("float16",
                                                                              "bfloat16"),
       f"{name} values")
ok(A.astype(dmath.float64, copy=False) is A, "astype(copy=False) same dtype")

for s in (dmath.float32, torch.float32, np.float32, np.dtype("float32"), "float32"):
    for make in (lambda: dmath.zeros((5, 3), dtype=s), lambda: dmath.ones((5, 3), dtype=s),
                 lambda: dmath.full((5, 3), 2.5, dtype=s), lambda: dmath.asarray(x, dtype=s),
                 lambda: dmath.arange(6, dtype=s), lambda: dmath.eye(4, dtype=s),
                 lambda: xp.zeros((2, 2), dtype=s), lambda: dmath.sum(A, axis=0, dtype=s)):
        ok(make().dtype is dmath.float32, f"created with dtype={s!r}")

# -- promotion: numpy's results, as DTypes -------------------------------------------------
F32, I32 = A.astype(dmath.float32), A.astype(dmath.int32)
cases = [(A + F32, np.float64), (F32 + F32, np.float32), (F32 * 2.0, np.float32),
         (I32 + F32, np.float64), (I32 + 1, np.int32), (I32 / I32, np.float64),
         (A.astype(dmath.float16) + F32, np.float32), (A > 0, np.bool_),
         (dmath.sum(I32), np.int64), (dmath.mean(I32), np.float64), (F32 @ F32.T, np.float32)]
for i, (got, want) in enumerate(cases):
    ok(isinstance(got.dtype, dmath.DType) and got.dtype == want,
       f"promotion {i}: {got.dtype} != {want}")
ok(dmath.result_type(A, F32) is dmath.float64 and dmath.result_type(I32, 1.0) == np.float64,
   "dmath.result_type")
ok(xp.result_type(F32, A) is dmath.float64 and xp.result_type(dmath.int8, dmath.uint8) == np.int16,
   "xp.result_type")
ok(np.result_type(A.dtype, F32.dtype) == np.float64 and np.promote_types(F32.dtype, np.int8)
   == np.float32, "numpy's promotion takes DTypes")
ok(xp.can_cast(dmath.float32, np.float64) and not xp.can_cast(A, dmath.float32), "can_cast")
ok(xp.isdtype(A.dtype, "real floating") and xp.finfo(F32.dtype).bits == 32
   and xp.iinfo(I32.dtype).max == 2**31 - 1, "isdtype/finfo/iinfo")
ok((A + A.astype(dmath.bfloat16)).dtype is dmath.float64, "bfloat16 + float64")
ok(A.astype(dmath.bfloat16).astype(dmath.float32).dtype is dmath.float32, "bfloat16 round trip")

# -- a DType travels: as a wire format, and as a command's argument -----------------------
R = A.redistribute(dmath.col_block(), wire=dmath.bfloat16)
ok(R.dtype is dmath.float64 and np.allclose(R.to_numpy(), x, rtol=1e-2, atol=1e-2), "wire=bfloat16")
with dmath.wire.using(dmath.float16):
    R = A.redistribute(dmath.col_block())
ok(np.allclose(R.to_numpy(), x, rtol=1e-3, atol=1e-3), "wire.using(dmath.float16)")
seen = _what_servers_see(dmath.float32, F32)
ok(len(seen) == ctx.world.size and all(all(s) for s in seen), f"the servers' DType: {seen}")

if mode == "spmd":
    total = ctx.world.allgather_obj(passed)
    assert all(t == total[0] for t in total), f"ranks disagree: {total}"
if ctx.world.rank == 0:
    print(f"CASES {passed} passed", flush=True)
