"""Datasets on disk (IDX, npy, npz) and a ``DataLoader`` giving DArray batches.

    ds = load_dataset("fashion-mnist", "train")          # or "mnist", PATH.npz, a dir
    loader = DataLoader(ds, 128, layout=Layout("a"), shuffle=True, seed=0)
    for x, y in loader:            # x (B, C, H, W) in ``layout``, y (B,) sharded like x's dim 0
        ...

Order. Epoch ``e`` visits the samples in ``permutation(N)`` of a numpy
generator seeded with ``(seed, e)``: the same order on any number of ranks
and any layout. Batch ``i`` is samples ``perm[i*B : (i+1)*B]``.

Reading. Each rank reads only the rows of its own piece of the batch
(``shards.global_indices`` of the batch layout): IDX and ``.npy`` files are
memory-mapped (``np.memmap`` / ``np.load(mmap_mode="r")``), so a rank
touches only its samples' pages. ``.npz`` archives and ``.gz`` files are
read into memory once per rank (decompress big data sets first: ``dmath data
fetch`` does). Images are scaled ``(x * scale - mean) / std`` into ``dtype``.

Prefetch. After handing out batch ``i`` every rank starts a thread that
reads and normalises its piece of batch ``i + 1`` (host work only, no MPI),
so disk and decoding overlap the training step.

Device-resident epochs. On a GPU, when the images fit (``RESIDENT_BYTES`` of
raw samples, e.g. Fashion-MNIST's 47 MB of bytes) and the layout shards at
most the batch dim, the loader copies the raw samples and labels to the
device once and cuts every batch there (on the CPU too, up to
``RESIDENT_BYTES_CPU``: there the prefetch thread competes with the ranks for
the cores, and a batch cut from the epoch costs no hand-off): the epoch's order is one small
device array, a batch is an ``index_select`` and the normalisation, all
queued on the stream with no host work and no host synchronisation, so the
loader is never on a training step's critical path. Where a rank's rows of
the whole epoch, normalised, fit ``EPOCH_BYTES`` they are gathered at the
epoch's first batch (one ``index_select``) into tensors kept and rewritten in
place every epoch, and a batch is a view of them made once (batch ``i`` is the
same pair of DArrays every epoch, its version bumped when its rows are
rewritten): no kernel and no new array per batch; a captured training step
gathers such a batch itself from the epoch's tensors (``resident_rows``:
``train.graphs``), so it is not even copied. ``resident=True``
insists (on the CPU it equals the host path bit for bit), ``False`` reads
from the host (with the prefetch thread).

Client-server mode: the loader is made on every rank under one handle and
each batch is one command (the ranks know the order from the seed, so only
the batch number travels).
"""
from __future__ import annotations

import gzip
import os
import weakref
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..array import DArray, Layout, as_dtype, global_indices, local_shape, touch_all
from ..array.shards import take_piece
from ..runtime import default_grid, dispatch
from ..runtime.dispatch import command, register_handle_type

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx_header(path: str | os.PathLike) -> tuple[np.dtype, tuple, int]:
    """(dtype, shape, byte offset of the data) of an uncompressed IDX file."""
    with open(path, "rb") as f:
        head = f.read(4)
        if len(head) != 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_TYPES:
            raise ValueError(f"{path}: not an IDX file (magic {head.hex()})")
        ndim = head[3]
        dims = np.frombuffer(f.read(4 * ndim), dtype=">i4")
    if len(dims) != ndim:
        raise ValueError(f"{path}: IDX header truncated")
    return np.dtype(_IDX_TYPES[head[2]]), tuple(int(d) for d in dims), 4 + 4 * ndim


def _is_idx(path: str) -> bool:
    return "idx" in os.path.basename(path) or path.endswith(".idx")


def open_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """An array from an IDX file (memory-mapped; ``.gz`` read into memory), a
    ``.npy`` file (memory-mapped) or one ``key`` of an ``.npz`` archive."""
    path = str(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such data file: {path}")
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            if key not in z:
                raise KeyError(f"{path} has no array {key!r} (it has {sorted(z.files)})")
            return z[key]
    if path.endswith(".npy"):
        return np.load(path, mmap_mode="r", allow_pickle=False)
    if _is_idx(path):
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
            dt, shape, off = _idx_header_bytes(raw, path)
            return np.frombuffer(raw, dtype=dt, offset=off, count=int(np.prod(shape))
                                 ).reshape(shape)
        dt, shape, off = read_idx_header(path)
        size = os.path.getsize(path)
        if size < off + int(np.prod(shape)) * dt.itemsize:
            raise ValueError(f"{path}: IDX file shorter than its header says ({shape})")
        return np.memmap(path, dtype=dt, mode="r", offset=off, shape=shape)
    raise ValueError(f"{path}: unknown data format (use IDX, .npy or .npz)")


def _idx_header_bytes(raw: bytes, path: str):
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path}: not an IDX file")
    ndim = raw[3]
    dims = np.frombuffer(raw[4:4 + 4 * ndim], dtype=">i4")
    return np.dtype(_IDX_TYPES[raw[2]]), tuple(int(d) for d in dims), 4 + 4 * ndim


@dataclass
class Source:
    """A picklable reference to an array: a file (``path``, ``key``) opened lazily on
    each rank, or a small in-memory array (``data``, travels by value)."""

    path: str | None = None
    key: str | None = None
    data: np.ndarray | None = None
    _arr: np.ndarray | None = field(default=None, repr=False, compare=False)

    def array(self) -> np.ndarray:
        if self._arr is None:
            self._arr = self.data if self.data is not None else open_array(self.path, self.key)
        return self._arr

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_arr"] = None
        return d

    @property
    def shape(self) -> tuple:
        return tuple(self.array().shape)


def _source(x) -> Source:
    if isinstance(x, Source):
        return x
    if isinstance(x, np.ndarray):
        return Source(data=x)
    return Source(path=str(x))


@dataclass
class Dataset:
    """Images ``x`` (N, H, W) or (N, C, H, W) and integer labels ``y`` (N,); batches
    are ``(x * scale - mean) / std`` in the loader's dtype."""

    x: Source
    y: Source
    scale: float = 1.0
    mean: float = 0.0
    std: float = 1.0
    name: str = ""
    limit: int | None = None        # use only the first ``limit`` samples

    def __post_init__(self):
        self.x, self.y = _source(self.x), _source(self.y)

    def __len__(self) -> int:
        n = self.x.shape[0]
        if self.limit is None:
            return n
        if isinstance(self.limit, bool) or not isinstance(self.limit, (int, np.integer)) \
                or self.limit < 1:
            raise ValueError(f"Dataset.limit must be a positive int (use the first N samples) "
                             f"or None, not {self.limit!r}; set it as an attribute: "
                             "ds.limit = 12000")
        return min(n, int(self.limit))

    @property
    def sample_shape(self) -> tuple:
        s = self.x.shape[1:]
        return (1,) + s if len(s) == 2 else s

    @property
    def num_classes(self) -> int:
        return int(np.asarray(self.y.array()[:len(self)]).max()) + 1

    def check(self) -> "Dataset":
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"dataset {self.name!r}: {self.x.shape[0]} images but "
                             f"{self.y.shape[0]} labels")
        if len(self.x.shape) not in (3, 4):
            raise ValueError(f"dataset {self.name!r}: images must be (N, H, W) or "
                             f"(N, C, H, W), got {self.x.shape}")
        return self

    def read(self, rows: np.ndarray, dims: list, dtype: torch.dtype) -> torch.Tensor:
        """Images of samples ``rows``, restricted to ``dims`` (C, H, W index arrays;
        None: the whole dim), normalised."""
        src = self.x.array()
        if isinstance(src, np.memmap):
            order = np.argsort(rows, kind="stable")     # memmaps read fastest in file order
            xs = np.empty((len(rows),) + src.shape[1:], src.dtype)
            xs[order] = src[rows[order]]
        else:
            xs = src[rows]
        if xs.ndim == 3:
            xs = xs[:, None]
        # this rank's (C, H, W) piece: no copy along whole dims (np.ix_ gathered every
        # element: ~0.5 ms a 128-image batch)
        t = torch.from_numpy(np.ascontiguousarray(xs))
        t = take_piece(t, [None, *dims]) if any(i is not None for i in dims) else t
        if t.dtype == torch.uint8 and dtype in (torch.float32, torch.float64):
            # one table look-up: the 256 values normalised by the formula below
            return torch.from_numpy(self._table(dtype)[t.numpy()])
        return self._normalise(t, dtype)

    def _normalise(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        t = t.to(torch.float64 if dtype == torch.float64 else torch.float32)
        if self.scale != 1.0 or self.mean != 0.0 or self.std != 1.0:
            t = (t * self.scale - self.mean) / self.std
        return t.to(dtype)

    def _table(self, dtype: torch.dtype) -> np.ndarray:
        """``_normalise`` of every uint8 value (elementwise: the same bits), kept per
        (dtype, scale, mean, std)."""
        key = (dtype, self.scale, self.mean, self.std)
        got = self.__dict__.get("_tables")
        if got is None or got[0] != key:
            vals = torch.arange(256, dtype=torch.int16).to(torch.uint8)
            got = self._tables = (key, self._normalise(vals, dtype).numpy())
        return got[1]


RESIDENT_BYTES = 1 << 30     # raw samples up to this size are kept on a GPU (``resident="auto"``)
# ... and in each rank's memory on the CPU (a copy per rank: 16 ranks of a 256 MiB data set
# hold 4 GiB). LeNet, batch 8 a rank, the 2-core VM: 4,298 -> 3,766 us of CPU time a step on
# one rank, 5,338 -> 4,939 us wall on two (the prefetch thread and its hand-off gone)
RESIDENT_BYTES_CPU = 256 << 20
EPOCH_BYTES = 1 << 30        # a resident epoch's normalised rows (one rank's) up to this: gathered once

# (file stems, scale, mean, std) of the IDX data sets ``dmath data fetch`` gets
KNOWN = {
    "mnist": (0.1307, 0.3081),
    "fashion-mnist": (0.2860, 0.3530),
}


def data_dir() -> Path:
    """Where ``dmath data fetch`` puts data sets: ``$DMATH_DATA`` or ``./data``."""
    return Path(os.environ.get("DMATH_DATA", "data")).expanduser()


def load_dataset(spec: str, split: str = "train", root: str | os.PathLike | None = None
                 ) -> Dataset:
    """A data set by name (``mnist``, ``fashion-mnist``: IDX files under
    ``root`` / ``data_dir()``), an ``.npz`` (``x_train``, ``y_train``, ``x_test``,
    ``y_test``; or ``x``, ``y``) or a directory of IDX files."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    stem = "train" if split == "train" else "t10k"
    if spec in KNOWN:
        mean, std = KNOWN[spec]
        d = Path(root) if root is not None else data_dir() / spec
        xs, ys = _idx_pair(d, stem)
        if xs is None:
            raise FileNotFoundError(f"{spec} not found under {d}: run `dmath data fetch {spec}` "
                                    f"(or set DMATH_DATA)")
        return Dataset(xs, ys, 1 / 255, mean, std, spec).check()
    p = Path(spec)
    if p.suffix == ".npz":
        if not p.exists():
            raise FileNotFoundError(f"no such data file: {p}")
        with zipfile.ZipFile(p) as z:
            names = {n[:-4] for n in z.namelist()}
        kx, ky = (f"x_{split}", f"y_{split}") if f"x_{split}" in names else ("x", "y")
        if kx not in names or ky not in names:
            raise KeyError(f"{p} needs arrays x_{split}/y_{split} (or x/y); it has "
                           f"{sorted(names)}")
        x = Source(str(p), kx)
        scale = 1 / 255 if x.array().dtype == np.uint8 else 1.0
        return Dataset(x, Source(str(p), ky), scale, name=p.stem).check()
    if p.is_dir():
        xs, ys = _idx_pair(p, stem)
        if xs is None:
            raise FileNotFoundError(f"{p}: no {stem}-images-idx3-ubyte[.gz] / "
                                    f"{stem}-labels-idx1-ubyte[.gz]")
        return Dataset(xs, ys, 1 / 255, 0.5, 0.5, p.name).check()
    raise FileNotFoundError(f"data {spec!r}: not a known data set {sorted(KNOWN)}, an .npz "
                            "file or a directory of IDX files")


def _idx_pair(d: Path, stem: str):
    for suffix in ("", ".gz"):
        xs, ys = d / f"{stem}-images-idx3-ubyte{suffix}", d / f"{stem}-labels-idx1-ubyte{suffix}"
        if xs.exists() and ys.exists():
            return str(xs), str(ys)
    return None, None


# -- the loader --------------------------------------------------------------------------------
@register_handle_type
class DataLoader:
    """Batches of ``dataset`` as DArrays: x in ``layout`` (4-D), y (B,) laid out like
    x's dim 0. See the module docstring for order, reading and prefetch."""

    def __new__(cls, *args, **kwargs):
        if dispatch.is_client():
            return _make_loader(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, dataset: Dataset, batch_size: int, *, layout: Layout | None = None,
                 grid=None, shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 dtype: torch.dtype = torch.float32, prefetch: bool = True,
                 resident: bool | str = "auto"):
        if hasattr(self, "dataset"):
            return                    # rank 0, client-server: made on every rank by __new__
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be >= 1, got {batch_size}")
        self.dataset = dataset.check()
        self.batch_size, self.shuffle, self.seed = int(batch_size), bool(shuffle), int(seed)
        self.drop_last, self.dtype, self.prefetch = bool(drop_last), as_dtype(dtype), bool(prefetch)
        self.grid = default_grid() if grid is None else grid
        self.x_layout = (layout or Layout()).resolve(self.grid, 4)
        self.y_layout = Layout(self.x_layout.dims[0]).resolve(self.grid, 1)
        if resident not in (True, False, "auto"):
            raise ValueError(f"DataLoader: resident must be True, False or 'auto', got {resident!r}")
        if resident is True and any(d.axes for d in self.x_layout.dims[1:]):
            raise ValueError("DataLoader(resident=True): the layout shards an image dim "
                             f"({self.x_layout}); a device-resident epoch shards the batch dim only")
        self.resident = resident
        self.epoch = 0
        self._perm = None
        self._ahead: tuple | None = None       # (epoch, batch, future)
        self._pool: ThreadPoolExecutor | None = None
        self._device_data: tuple | None = None  # (x raw, y, {b: my rows}, (epoch, perm, gathered))
        self._pieces: dict = {}                 # batch size -> ``_piece``
        self._epoch_buf: tuple | None = None    # a gathered epoch (``_gather_epoch``), reused
        self._ready: tuple | None = None        # (epoch, its batches) once gathered

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        for i in range(len(self)):
            yield self.batch(i)

    @command
    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order from now on."""
        if epoch != self.epoch:
            self.epoch, self._perm, self._ahead = int(epoch), None, None

    def order(self) -> np.ndarray:
        """This epoch's sample order (the same on every rank and rank count)."""
        if self._perm is None:
            n = len(self.dataset)
            self._perm = np.random.default_rng([self.seed, self.epoch]).permutation(n) \
                if self.shuffle else np.arange(n)
        return self._perm

    def _piece(self, b: int) -> tuple:
        """For a batch of ``b``: (my rows of it for x, [per image dim my indices, None
        where I hold the whole dim], my rows for y); made once per batch size."""
        got = self._pieces.get(b)
        if got is None:
            g = global_indices((b,) + self.dataset.sample_shape, self.x_layout, self.grid)
            dims = [None if _whole(ix, n) else ix
                    for ix, n in zip(g[1:], self.dataset.sample_shape)]
            got = self._pieces[b] = (g[0], dims,
                                     global_indices((b,), self.y_layout, self.grid)[0])
        return got

    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        rows = self.order()[i * self.batch_size:(i + 1) * self.batch_size]
        b = len(rows)
        gx, dims, gy = self._piece(b)
        x = self.dataset.read(rows[gx], dims, self.dtype)
        y = torch.from_numpy(np.asarray(self.dataset.y.array()[rows[gy]]).astype(np.int64))
        from ..ops._common import device
        if device().type == "cuda":        # pinned: the copy to the GPU is truly asynchronous
            x, y = x.pin_memory(), y.pin_memory()
        return x, y, b

    def _start(self, i: int) -> None:
        if self._pool is None:            # one reading thread per loader, kept
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="dmath-prefetch")
        self._ahead = (self.epoch, i, self._pool.submit(self._read, i))

    def _on_device(self, dev: torch.device) -> bool:
        """Whether batches are cut from a device-resident copy (see the module)."""
        if self.resident != "auto":
            return bool(self.resident)
        limit = {"cuda": RESIDENT_BYTES, "cpu": RESIDENT_BYTES_CPU}.get(dev.type)
        if limit is None:
            return False
        x = self.dataset.x
        nbytes = len(self.dataset) * int(np.prod(x.shape[1:])) * x.array().dtype.itemsize
        return nbytes <= limit and not any(d.axes for d in self.x_layout.dims[1:])

    def _resident_batch(self, i: int, dev: torch.device) -> tuple[DArray, DArray]:
        """Batch ``i`` cut on the device: my rows of it, normalised as ``Dataset.read``.
        When the epoch's normalised rows fit (``EPOCH_BYTES``) they are gathered once per
        epoch, in place, and a batch is a view of them made once (no kernel per batch)."""
        ds = self.dataset
        if self._device_data is None:
            n = len(ds)
            x = torch.from_numpy(np.array(ds.x.array()[:n]))          # a copy: writable
            y = torch.from_numpy(np.asarray(ds.y.array()[:n]).astype(np.int64))
            self._device_data = (x.to(dev), y.to(dev), {}, None)
        x, y, mine, perm = self._device_data
        if perm is None or perm[0] != self.epoch:
            perm = (self.epoch, torch.from_numpy(self.order()).to(dev), None)
            self._device_data = (x, y, mine, perm)
        B = self.batch_size
        b = min(B, len(ds) - i * B)
        shape = (b,) + ds.sample_shape
        ep = perm[2]
        if ep is None and self._epoch_fits(dev):
            ep = self._gather_epoch(x, y, perm[1], dev)
            self._device_data = (x, y, mine, (perm[0], perm[1], ep))
        if ep is not None:
            self._ready = (self.epoch, ep[3])
            return ep[3][i]           # made once: views of the epoch's rows (no kernel)
        rx, ry = self._my_rows(b, dev)
        rows = perm[1][i * B:i * B + b]
        return (DArray(self._normalise(x.index_select(0, rows.index_select(0, rx))),
                       shape, self.x_layout, self.grid),
                DArray(y.index_select(0, rows.index_select(0, ry)), (b,), self.y_layout, self.grid))

    def _my_rows(self, b: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows of a batch of ``b`` samples (x's and y's), on the device."""
        mine = self._device_data[2]
        if b not in mine:
            shape = (b,) + self.dataset.sample_shape
            mine[b] = (torch.from_numpy(global_indices(shape, self.x_layout, self.grid)[0]).to(dev),
                       torch.from_numpy(global_indices((b,), self.y_layout, self.grid)[0]).to(dev))
        return mine[b]

    def _normalise(self, t: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        """Raw samples to ``dtype`` as ``Dataset.read`` scales them (bit for bit)."""
        ds = self.dataset
        if t.ndim == 3:
            t = t[:, None]
        t = t.to(torch.float64 if self.dtype == torch.float64 else torch.float32)
        if ds.scale != 1.0 or ds.mean != 0.0 or ds.std != 1.0:
            t = t.mul_(ds.scale).sub_(ds.mean).div_(ds.std) if inplace else \
                (t * ds.scale - ds.mean) / ds.std
        return t.to(self.dtype)

    def _epoch_fits(self, dev: torch.device) -> bool:
        """Whether this rank's normalised rows of an epoch fit ``EPOCH_BYTES``."""
        n = len(self._my_rows(min(self.batch_size, len(self.dataset)), dev)[0]) * len(self)
        item = 8 if self.dtype == torch.float64 else 4
        return n * int(np.prod(self.dataset.sample_shape)) * item <= EPOCH_BYTES

    def _gather_epoch(self, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor,
                      dev: torch.device) -> tuple:
        """My rows of every batch of the epoch, normalised: (xs, ys, offsets, batches)
        with batch ``j`` at ``xs[x0:x1]``, ``ys[y0:y1]`` (``offsets[j]``) and
        ``batches[j]`` its DArrays, views of ``xs`` / ``ys``. The next epoch is written
        into the same ``xs`` / ``ys`` (its batches are the same DArrays, their versions
        bumped): a captured step reads its batch from there (``resident_rows``)."""
        B, n = self.batch_size, len(self.dataset)
        ix, iy, offsets, ox, oy = [], [], [], 0, 0
        for j in range(len(self)):
            b = min(B, n - j * B)
            rx, ry = self._my_rows(b, dev)
            ix.append(rx + j * B)
            iy.append(ry + j * B)
            offsets.append(((ox, ox + len(rx)), (oy, oy + len(ry))))
            ox, oy = ox + len(rx), oy + len(ry)
        rx = perm.index_select(0, torch.cat(ix)) if ix else perm[:0]
        ry = perm.index_select(0, torch.cat(iy)) if iy else perm[:0]
        xs, ys = self._normalise(x.index_select(0, rx), inplace=True), y.index_select(0, ry)
        old = self._epoch_buf
        if old is not None and old[0].shape == xs.shape and old[0].dtype == xs.dtype \
                and old[2] == offsets:
            old[0].copy_(xs)                       # the same arrays, new rows
            old[1].copy_(ys)
            touch_all(a for pair in old[3] for a in pair)
            return old
        batches = []
        for j, ((x0, x1), (y0, y1)) in enumerate(offsets):
            b = min(B, n - j * B)
            bx = DArray(xs[x0:x1], (b,) + self.dataset.sample_shape, self.x_layout, self.grid)
            by = DArray(ys[y0:y1], (b,), self.y_layout, self.grid)
            _register_resident(bx, by, xs, x0, ys, y0)
            batches.append((bx, by))
        self._epoch_buf = (xs, ys, offsets, batches)
        return self._epoch_buf

    @command
    def batch(self, i: int) -> tuple[DArray, DArray]:
        """Batch ``i`` of this epoch; starts reading batch ``i + 1``."""
        ready = self._ready
        if ready is not None and ready[0] == self.epoch and 0 <= i < len(ready[1]):
            return ready[1][i]        # this epoch's rows are gathered: its batch, made once
        if not 0 <= i < len(self):
            raise IndexError(f"batch {i} of a loader of {len(self)} batches")
        from ..ops._common import device
        dev = device()
        if self._on_device(dev):
            return self._resident_batch(i, dev)
        got = None
        if self._ahead is not None and self._ahead[:2] == (self.epoch, i):
            got = self._ahead[2].result()     # re-raises a failure of the read
        self._ahead = None
        x, y, b = got if got is not None else self._read(i)
        if self.prefetch and i + 1 < len(self):
            self._start(i + 1)
        shape = (b,) + self.dataset.sample_shape
        if tuple(x.shape) != local_shape(shape, self.x_layout, self.grid):
            raise RuntimeError("DataLoader: piece shape mismatch")      # a bug, not user input
        return (DArray(x.to(dev, non_blocking=True), shape, self.x_layout, self.grid),
                DArray(y.to(dev, non_blocking=True), (b,), self.y_layout, self.grid))


_RESIDENT: dict[int, tuple] = {}    # id(batch x) -> (weak ref to it, y, xs, x0, ys, y0)


def _register_resident(bx: DArray, by: DArray, xs: torch.Tensor, x0: int, ys: torch.Tensor,
                       y0: int) -> None:
    k = id(bx)

    def gone(ref, k=k):        # the batch died: forget it (unless its id was taken again)
        if _RESIDENT.get(k, (None,))[0] is ref:
            del _RESIDENT[k]
    _RESIDENT[k] = (weakref.ref(bx, gone), by, xs, x0, ys, y0)


def resident_rows(x: DArray) -> tuple | None:
    """For a batch's images ``x`` cut from a gathered device-resident epoch:
    ``(y, xs, x0, ys, y0)``, its labels' DArray and where this rank's rows of both
    start in the epoch's tensors ``xs`` / ``ys`` (rewritten in place each epoch:
    a captured step gathers its batch from them); None for any other array."""
    e = _RESIDENT.get(id(x))
    return None if e is None or e[0]() is not x else e[1:]


def _whole(ix: np.ndarray, n: int) -> bool:
    """Whether the indices ``ix`` are 0, 1, ..., n - 1 (a whole dim, in order)."""
    return len(ix) == n and (n == 0 or (ix[0] == 0 and not np.any(np.diff(ix) != 1)))


@command
def _make_loader(*args, **kwargs) -> DataLoader:
    return DataLoader(*args, **kwargs)


__all__ = ["DataLoader", "Dataset", "KNOWN", "Source", "data_dir", "load_dataset",
           "open_array", "read_idx_header", "resident_rows"]
