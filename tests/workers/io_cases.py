"""dmath.save / dmath.load on N ranks (SPMD): save here, load what jobs on other
rank counts saved, error cases.

    mpiexec -n N python -m mpi4py io_cases.py ROOT [K ...] [--errors]

Saves every array of ``io_specs.specs(N)`` (random grids and layouts, partial
ones included; uneven, 0-d and empty shapes; every dtype) alone and all of
them in one nested checkpoint, under ROOT/savedN. Then, for each K, loads
ROOT/savedK (written by a job on K ranks) into the saved layout and into
another random one on a random grid of N ranks (some of them read by chunks
and redistributed: ``read_layout``) and checks each rank's piece against the
values drawn from the seed. ``--errors``: missing, corrupted and foreign
files, missing and damaged chunks, bad layouts, unsupported objects,
overwrite rules, a failure mid-save, and that no file is a pickle.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import torch

import dmath
from _arrays import grids, make, piece, random_layout
from _case import Cases
from dmath import Dim, Layout
from dmath.io import read_layout
from io_specs import host_values, scalars, specs

C = Cases()
world = C.ctx.world
n, rank = world.size, world.rank
args = [a for a in sys.argv[1:] if not a.startswith("--")]
ROOT, LOADS = args[0], [int(a) for a in args[1:]]
GRIDS = grids(n)
PARTIAL_OK = ("float64", "float32", "float16", "bfloat16", "int64", "int32")


def partial_ok(shape: tuple, dtype: str) -> bool:
    """Partial layouts for arrays whose summands add up exactly (not 0-d: the
    helpers build a 0-d piece from numpy, which has no 0-d contiguous copy)."""
    return dtype in PARTIAL_OK and len(shape) > 0


def build(rng, x: np.ndarray, lay: Layout, grid, t: torch.dtype):
    """A DArray of value ``x`` in ``lay`` (random summands for partial layouts)."""
    if x.ndim:
        return make(rng, x, lay, grid, t)
    local = torch.from_numpy(np.array(x)).to(t).to(dmath.context().device)
    return dmath.from_local(local, (), lay, grid=grid)


def check_value(a, x: np.ndarray, what: str) -> None:
    """This rank's piece of ``a`` (partial layouts reduced) equals its part of ``x``."""
    full = a.redistribute(a.layout.without_partial()) if a.layout.partial else a
    want = torch.from_numpy(np.array(piece(x, full.layout, full.grid))).to(a.torch_dtype)
    got = full.local.cpu()
    want = want.reshape(got.shape)
    assert torch.equal(got, want), f"{what}: local piece\n{got}\n!= {want}"


def saved(k: int, *parts: str) -> str:
    return os.path.join(ROOT, f"saved{k}", *parts)


def on_root(fn) -> None:
    """``fn()`` on rank 0, then every rank goes on (file surgery for error cases)."""
    if rank == 0:
        fn()
    world.barrier()


def expect(exc: type, fn, *words: str) -> None:
    """``fn()`` raises ``exc`` on this rank with ``words`` in its message."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        assert all(w in msg for w in words), f"{exc.__name__} without {words}: {msg}"
    else:
        raise AssertionError(f"no {exc.__name__} ({words})")
    C.ok()


# -- save -----------------------------------------------------------------------------------
def save_all() -> None:
    rng = np.random.default_rng(2000 + n)
    arrays = {}
    for i, (name, shape, dtype, x) in enumerate(specs(n)):
        grid = GRIDS[rng.integers(len(GRIDS))]
        lay = random_layout(rng, len(shape), grid, partial=partial_ok(shape, dtype))
        a = build(rng, x, lay, grid, getattr(torch, dtype))
        arrays[name] = a
        dmath.save(saved(n, name), a, compress=i % 2 == 1)     # zstd: read through zarr
        check_value(a, x, f"saving {name} left the array as it was")
        C.ok()
    ck = {"arrays": arrays, "scalars": scalars(n), "host": host_values(n),
          "odd": {"a/b": arrays["a5"], "__x": arrays["a6"], "": [arrays["a7"]], "..": 1},
          "tup": (arrays["a0"], 2)}
    dmath.save(saved(n, "ckpt"), ck)
    C.ok()


# -- load -----------------------------------------------------------------------------------
def saved_layout(k: int, name: str) -> Layout:
    """The layout ROOT/savedK/name holds, read as plain JSON (no dmath involved)."""
    with open(saved(k, name, "array", "zarr.json")) as f:
        j = json.load(f)["attributes"]["dmath"]["layout"]
    return Layout(*(Dim(tuple(axes), block) for axes, block in j["dims"]), partial=j["partial"])


def chunks(k: int, name: str) -> tuple:
    with open(saved(k, name, "array", "zarr.json")) as f:
        return tuple(json.load(f)["chunk_grid"]["configuration"]["chunk_shape"])


BY_CHUNKS = [0]        # loads read by chunks, then redistributed (dmath.io.read_layout)


def default_layout(k: int, name: str, ndim: int, grid) -> Layout:
    try:
        return saved_layout(k, name).resolve(grid, ndim)
    except ValueError:
        return (Layout("*") if ndim else Layout()).resolve(grid, ndim)


def load_from(k: int) -> None:
    rng = np.random.default_rng(4000 + 10 * n + k)
    for name, shape, dtype, x in specs(k):
        t = getattr(torch, dtype)
        what = f"{name} {shape} {dtype} saved on {k} loaded on {n}"
        a = dmath.load(saved(k, name))
        assert a.shape == shape and a.torch_dtype == t, f"{what}: {a}"
        assert a.layout == default_layout(k, name, len(shape), a.grid), f"{what}: {a.layout}"
        check_value(a, x, what)
        C.ok()
        for grid in [GRIDS[rng.integers(len(GRIDS))]]:
            lay = random_layout(rng, len(shape), grid, partial=partial_ok(shape, dtype))
            if read_layout(shape, lay.without_partial(), grid, chunks(k, name)) != \
                    lay.without_partial():
                BY_CHUNKS[0] += 1
            a = dmath.load(saved(k, name), layout=lay, grid=grid)
            assert a.layout == lay and a.grid is grid and a.torch_dtype == t, f"{what}: {a}"
            check_value(a, x, f"{what} into {lay} on {grid!r}")
            C.ok()
    check_checkpoint(k)


def small_replicated(key: str, meta: dict):
    """layout function: replicate arrays with fewer than 10 elements."""
    return dmath.replicated() if int(np.prod(meta["shape"])) < 10 else None


def check_checkpoint(k: int) -> None:
    values = {name: x for name, _, _, x in specs(k)}
    grid = GRIDS[-1]
    for how in (None, {"arrays/a5": dmath.col_block(), "odd/a/b": dmath.replicated()},
                small_replicated):
        ck = dmath.load(saved(k, "ckpt"), layout=how, grid=grid)
        assert sorted(ck) == ["arrays", "host", "odd", "scalars", "tup"], sorted(ck)
        assert ck["scalars"] == scalars(k), ck["scalars"]
        assert isinstance(ck["tup"], tuple) and ck["tup"][1] == 2
        assert isinstance(ck["scalars"]["tuple"][1], tuple)
        host = host_values(k)
        for key in ("np", "empty"):
            assert ck["host"][key].dtype == host[key].dtype
            assert np.array_equal(ck["host"][key], host[key])
        for key in ("t", "t0"):
            assert ck["host"][key].dtype == host[key].dtype and torch.equal(ck["host"][key],
                                                                            host[key])
        for name, a in ck["arrays"].items():
            check_value(a, values[name], f"checkpoint of {k} ranks: {name}")
            if how is small_replicated and a.size < 10:
                assert a.layout == Layout().resolve(grid, a.ndim), (name, a.layout)
        if isinstance(how, dict):
            assert ck["arrays"]["a5"].layout == dmath.col_block().resolve(grid, 2)
            assert ck["odd"]["a/b"].layout == Layout().resolve(grid, 2)
        check_value(ck["odd"]["a/b"], values["a5"], "key with a slash")
        check_value(ck["odd"]["__x"], values["a6"], "key with two underscores")
        check_value(ck["odd"][""][0], values["a7"], "empty key")
        check_value(ck["tup"][0], values["a0"], "tuple item")
        assert ck["odd"][".."] == 1
        C.ok()


# -- errors ---------------------------------------------------------------------------------
def copy(src: str, name: str) -> str:
    dst = os.path.join(ROOT, f"bad{n}", name)
    on_root(lambda: shutil.copytree(src, dst))
    return dst


def edit_json(path: str, change) -> None:
    def go():
        with open(path) as f:
            j = json.load(f)
        change(j)
        with open(path, "w") as f:
            json.dump(j, f)
    on_root(go)


def chunk_files(path: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f != "zarr.json")


def errors() -> None:
    import zarr
    name, shape, dtype, x = next(s for s in specs(n) if s[0] == "a5")
    src = saved(n, name)
    expect(FileNotFoundError, lambda: dmath.load(os.path.join(ROOT, "nothing")), "no checkpoint")

    bad = copy(src, "json")
    on_root(lambda: open(os.path.join(bad, "zarr.json"), "w").write("{not json"))
    expect(ValueError, lambda: dmath.load(bad), "cannot be read")

    bad = copy(src, "format")
    edit_json(os.path.join(bad, "zarr.json"),
              lambda j: j["attributes"]["dmath"].update(format=99))
    expect(ValueError, lambda: dmath.load(bad), "format version 99")

    bad = copy(src, "tree")
    edit_json(os.path.join(bad, "zarr.json"), lambda j: j["attributes"]["dmath"].update(
        tree={"type": "dict", "items": [["w", {"type": "darray"}]]}))
    expect(ValueError, lambda: dmath.load(bad), "malformed dmath tree")

    text = dmath.io.info(saved(n, "ckpt"))
    assert "arrays/a5: DArray (5, 7)" in text and "scalars/lr: 0.0015" in text, text
    C.ok()

    bad = os.path.join(ROOT, f"bad{n}", "foreign")
    on_root(lambda: zarr.create_group(bad))
    expect(ValueError, lambda: dmath.load(bad), "not a dmath checkpoint")

    bad = copy(src, "shape")
    edit_json(os.path.join(bad, "array", "zarr.json"), lambda j: j.update(shape=[5, 8]))
    expect(ValueError, lambda: dmath.load(bad), "does not match")

    for other in ("a5", "a6"):       # zstd chunks (zarr decodes) and raw ones (read directly)
        bad = copy(saved(n, other), f"nochunk-{other}")
        on_root(lambda: os.remove(chunk_files(bad)[-1]))
        expect(ValueError, lambda: dmath.load(bad, layout=dmath.replicated()), "lacks chunk")
        expect(ValueError, lambda: dmath.load(bad, layout=dmath.row_block()), "lacks chunk")
        bad = copy(saved(n, other), f"damaged-{other}")
        on_root(lambda: open(chunk_files(bad)[0], "r+b").truncate(3))
        expect(ValueError, lambda: dmath.load(bad, layout=dmath.replicated()), "damaged")

    expect(ValueError, lambda: dmath.load(src, layout=Layout("nope")), "'nope'", "(5, 7)")
    expect(ValueError, lambda: dmath.load(src, layout=Layout(None, None, None)), "3 dims")
    expect(TypeError, lambda: dmath.load(src, layout="row_block"), "layout must be")
    expect(TypeError, lambda: dmath.load(src, layout={"": "row"}), "not a dmath.Layout")

    # Saving: unsupported objects, existing paths, a failure mid-save, atomic overwrite.
    a = dmath.load(src)
    p = os.path.join(ROOT, f"bad{n}", "ck")
    expect(TypeError, lambda: dmath.save(p, {"w": a, "f": object()}), "cannot store", "'f'")
    expect(TypeError, lambda: dmath.save(p, {1: a}), "keys must be str")
    expect(TypeError, lambda: dmath.save(p, {"s": np.array(["x"])}), "only bool and numeric")
    if n > 1:
        expect(ValueError, lambda: dmath.save(p, {"a": a} if rank == 0 else {"b": a}),
               "other arrays")
    assert not os.path.exists(p)
    other = os.path.join(ROOT, f"bad{n}", "not_a_checkpoint")
    on_root(lambda: os.makedirs(other) or open(os.path.join(other, "keep.txt"), "w").write("x"))
    expect(FileExistsError, lambda: dmath.save(other, a, overwrite=True), "not replacing it")
    assert os.path.isfile(os.path.join(other, "keep.txt"))
    dmath.save(p, {"w": a, "v": 1})
    expect(FileExistsError, lambda: dmath.save(p, {"w": a, "v": 2}), "overwrite=True")
    assert dmath.load(p)["v"] == 1
    b = dmath.load(src, layout=dmath.col_block()) * 2
    dmath.save(p, {"w": b, "v": 3}, overwrite=True)
    got = dmath.load(p)
    assert got["v"] == 3
    check_value(got["w"], x * 2, "overwritten checkpoint")
    from dmath.io import writer
    real = writer.write_piece

    def failing(tmp, node, arr):
        if rank == n - 1:
            raise OSError(28, "No space left on device (simulated)")
        real(tmp, node, arr)
    writer.write_piece = failing
    try:
        expect(OSError, lambda: dmath.save(p, {"w": a, "v": 4}, overwrite=True), "No space left")
    finally:
        writer.write_piece = real
    got = dmath.load(p)
    assert got["v"] == 3, "a failed save changed the checkpoint"
    check_value(got["w"], x * 2, "checkpoint after a failed save")
    left = [f for f in os.listdir(os.path.dirname(p)) if ".tmp-" in f or ".old-" in f]
    assert not left, f"temporary directories left: {left}"
    C.ok()

    integrity_and_paths(a, x)

    # No pickle: every file is zarr.json (plain JSON) or a chunk under c/ (raw bytes).
    for d, _, fs in os.walk(os.path.join(ROOT, f"saved{n}")):
        for f in fs:
            full = os.path.join(d, f)
            if f == "zarr.json":
                with open(full) as fh:
                    json.load(fh)
            else:
                rel = os.path.relpath(full, os.path.join(ROOT, f"saved{n}")).split(os.sep)
                assert "c" in rel and all(s.isdigit() for s in rel[rel.index("c") + 1:]), full
                with open(full, "rb") as fh:
                    assert fh.read(2) not in (b"\x80\x04", b"\x80\x05"), f"{full} is a pickle"
    C.ok()


def flip_byte(file: str) -> None:
    def go():
        with open(file, "r+b") as f:
            size = f.seek(0, 2)
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0x10]))
    on_root(go)


def integrity_and_paths(a, x) -> None:
    """Checksums, paths with a trailing slash, nothing left by a failed save, layout
    keys that name no array, temporary folders of killed saves."""
    from dmath.io import staging, writer
    for other in ("a5", "a6"):       # zstd chunks (zarr decodes) and raw ones (read directly)
        bad = copy(saved(n, other), f"flip-{other}")
        first = chunk_files(bad)[0]
        flip_byte(first)
        key = os.path.relpath(first, os.path.join(bad, "array"))
        expect(ValueError, lambda: dmath.load(bad, layout=dmath.replicated()),
               "crc32c", f"chunk {key}", "array")
        expect(ValueError, lambda: dmath.load(bad, layout=dmath.row_block()), "crc32c")
    host = os.path.join(ROOT, f"bad{n}", "host-flip")
    dmath.save(host, {"h": np.arange(40.0), "w": a})
    flip_byte(chunk_files(os.path.join(host, "h"))[0])
    expect(ValueError, lambda: dmath.load(host), "crc32c", "/h: chunk c/0")

    ck = saved(n, "ckpt")
    expect(ValueError, lambda: dmath.load(ck, layout={"arrays/nope": dmath.row_block()}),
           "'arrays/nope' (no such array)", "match no DArray", "'arrays/a5'")
    expect(ValueError, lambda: dmath.load(ck, layout={"arrays/a5": dmath.row_block(),
                                                      "host/np": dmath.row_block()}),
           "'host/np' (a numpy array")
    got = dmath.load(ck, layout={"arrays/a5": dmath.row_block()})
    check_value(got["arrays"]["a5"], x, "layout dict with a matching key")

    top = os.path.join(ROOT, f"bad{n}", "slash")
    slash = os.path.join(top, "new") + "/"
    dmath.save(slash, {"w": a})
    dmath.save(slash, {"w": a * 2}, overwrite=True)
    assert sorted(os.listdir(top)) == ["new"], os.listdir(top)
    check_value(dmath.load(slash)["w"], x * 2, "saved to a path ending in /")
    check_value(dmath.load(slash.rstrip("/"))["w"], x * 2, "the same path without /")
    for p in ("", ".", "/", "a/.."):
        expect(ValueError, lambda: dmath.save(p, a), "dmath.save")
    C.ok()

    real = writer.write_piece

    def failing(tmp, node, arr):
        if rank == n - 1:
            raise OSError(28, "No space left on device (simulated)")
        real(tmp, node, arr)
    fresh = os.path.join(ROOT, f"bad{n}", "fresh")
    writer.write_piece = failing
    try:
        expect(OSError, lambda: dmath.save(os.path.join(fresh, "deep", "ck") + "/", {"w": a}),
               "No space left")
    finally:
        writer.write_piece = real
    assert not os.path.exists(fresh), "a failed save to a new path left folders behind"

    stale = os.path.join(ROOT, f"bad{n}", "stale", "ck")
    here = staging._host()
    dead = world.bcast_obj(_dead_pid() if rank == 0 else None)
    names = {"ck.tmp-0123456789ab": False, f"ck.tmp-{dead}@{here}-0123456789ab": False,
             f"ck.tmp-1@{here}-0123456789ab": True, f"ck.tmp-{dead}@elsewhere-0123456789ab": True,
             "ck.old-0123456789ab": True, "ckx.tmp-0123456789ab": True}

    def make_stale():
        for name in names:
            os.makedirs(os.path.join(os.path.dirname(stale), name, "w", "c"))
            with open(os.path.join(os.path.dirname(stale), name, "w", "c", "0"), "wb") as f:
                f.write(b"\0" * 4096)
    on_root(make_stale)
    dmath.save(stale, {"w": a})
    left = set(os.listdir(os.path.dirname(stale)))
    for name, kept in names.items():
        # an .old- folder is kept while no checkpoint exists (it may be the previous one)
        assert (name in left) == kept, (name, kept, sorted(left))
    dmath.save(stale, {"w": a}, overwrite=True)      # now ck exists: its .old- goes too
    assert "ck.old-0123456789ab" not in os.listdir(os.path.dirname(stale))
    C.ok()


def _dead_pid() -> int:
    """A process id no process has (above the kernel's largest)."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1


save_all()
world.barrier()
for k in LOADS:
    load_from(k)
if "--errors" in sys.argv:
    errors()
if rank == 0 and LOADS:
    print(f"BY_CHUNKS {BY_CHUNKS[0]}", flush=True)
C.report()
