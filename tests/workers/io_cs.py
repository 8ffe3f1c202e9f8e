"""dmath.save / dmath.load in client-server mode: rank 0 drives, the others serve.

    mpiexec -n N python -m mpi4py io_cs.py ROOT K

Loads what an SPMD job on K ranks saved under ROOT/savedK (values known from
the seed), saves and reloads a nested checkpoint, and checks that errors are
raised by the call on rank 0 and leave the session usable.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

import dmath
from io_specs import scalars, specs, two_d_row_block

ROOT, K = sys.argv[1], int(sys.argv[2])
dmath.init(mode="client-server")
passed = 0


def host(x: np.ndarray, dtype: str) -> np.ndarray:
    """The values an array of ``dtype`` holds, as ``to_numpy`` returns them."""
    t = torch.from_numpy(np.array(x)).to(getattr(torch, dtype))
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def expect(exc: type, fn, *words: str) -> None:
    global passed
    try:
        fn()
    except exc as e:
        assert all(w in str(e) for w in words), f"{exc.__name__} without {words}: {e}"
    else:
        raise AssertionError(f"no {exc.__name__} ({words})")
    passed += 1


for name, shape, dtype, x in specs(K):
    p = os.path.join(ROOT, f"saved{K}", name)
    cyclic = dmath.Layout(*[dmath.Dim("*", 2)] * min(1, len(shape)))   # dim 0 block-cyclic(2)
    for layout in (None, dmath.replicated(), cyclic):
        a = dmath.load(p, layout=layout)
        assert a.shape == shape and a.torch_dtype == getattr(torch, dtype), a
        assert np.array_equal(a.to_numpy(), host(x, dtype)), (name, layout)
        passed += 1

ck = dmath.load(os.path.join(ROOT, f"saved{K}", "ckpt"), layout=two_d_row_block)
assert ck["scalars"] == scalars(K)
values = {name: (x, dtype) for name, _, dtype, x in specs(K)}
for name, a in ck["arrays"].items():
    assert np.array_equal(a.to_numpy(), host(*values[name])), name
    if a.ndim == 2:
        assert a.layout == dmath.row_block().resolve(a.grid, 2)
passed += 1

A = dmath.random.normal((23, 10), seed=5, layout=dmath.block_cyclic(2))
B = dmath.random.uniform((7,), seed=6, layout=dmath.row_block()).astype("bfloat16")
P = os.path.join(ROOT, "cs", "ck")
dmath.save(P, {"A": A, "AT": A.T, "opt": {"B": [B, 3]}, "step": 7})     # A.T: strided pieces
got = dmath.load(P, layout={"A": dmath.element_cyclic()})
assert got["step"] == 7 and got["opt"]["B"][1] == 3
assert got["A"].layout == dmath.element_cyclic().resolve(got["A"].grid, 2)
assert np.array_equal(got["A"].to_numpy(), A.to_numpy())
assert np.array_equal(got["AT"].to_numpy(), A.to_numpy().T)
assert got["opt"]["B"][0].torch_dtype == torch.bfloat16
assert np.array_equal(got["opt"]["B"][0].to_numpy(), B.to_numpy())
passed += 1

expect(FileNotFoundError, lambda: dmath.load(os.path.join(ROOT, "cs", "none")), "no checkpoint")
expect(FileExistsError, lambda: dmath.save(P, {"A": A}), "overwrite=True")
expect(TypeError, lambda: dmath.save(P, {"A": object()}, overwrite=True), "cannot store")
expect(ValueError, lambda: dmath.load(P, layout={"A": dmath.Layout("zz")}), "'zz'")
expect(TypeError, lambda: dmath.load(P, layout=lambda key, meta: None), "cannot be sent")
dmath.save(P, {"A": A * 2, "step": 8}, overwrite=True)
got = dmath.load(P)
assert got["step"] == 8 and np.array_equal(got["A"].to_numpy(), (A * 2).to_numpy())
assert not [f for f in os.listdir(os.path.dirname(P)) if ".tmp-" in f or ".old-" in f]
passed += 1

# Client-server: a misspelt layout key, a flipped byte, a trailing slash, a new path whose
# save fails: clear errors on rank 0, nothing left behind, the session goes on.
expect(ValueError, lambda: dmath.load(P, layout={"a": dmath.row_block()}), "'a' (no such array)",
       "'A'")
S = os.path.join(ROOT, "cs", "slash", "ck") + "/"
dmath.save(S, {"A": A})
assert os.listdir(os.path.dirname(S.rstrip("/"))) == ["ck"]
chunk = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(S, "A", "c"))
               for f in fs)[-1]
with open(chunk, "r+b") as f:
    f.seek(3)
    byte = f.read(1)
    f.seek(3)
    f.write(bytes([byte[0] ^ 1]))
key = os.path.relpath(chunk, os.path.join(S, "A"))
expect(ValueError, lambda: dmath.load(S), "crc32c", f"/A: chunk {key}")
expect(TypeError, lambda: dmath.save(os.path.join(ROOT, "cs", "new", "ck"), {"A": A, "o": {1}}),
       "cannot store")
assert not os.path.exists(os.path.join(ROOT, "cs", "new"))
assert np.array_equal(dmath.load(P)["A"].to_numpy(), (A * 2).to_numpy())
os.chdir(os.path.join(ROOT, "cs"))      # a relative path means rank 0's folder (servers: other cwd)
dmath.save(os.path.join("rel", "ck"), {"A": A})
assert os.path.isfile(os.path.join(ROOT, "cs", "rel", "ck", "A", "zarr.json"))
assert np.array_equal(dmath.load("rel/ck/")["A"].to_numpy(), A.to_numpy())
passed += 1

print(f"CASES {passed} passed", flush=True)
dmath.finalize()
