"""Wire formats: lossy compression of data in transit (the paper's "lower-precision
transfer"), one mechanism for every transfer.

A *wire format* says how a floating tensor travels: converted once on the
sender, sent as bytes, converted back on the receiver; the caller's dtype never
changes. Formats (``as_format`` accepts the spellings on the left):

=============================  ============================  ====================
spelling                       bytes per element             max error per element
=============================  ============================  ====================
``torch.bfloat16`` / "bf16"    2                             relative 2^-8
``torch.float16`` / "fp16"     2 (range checked: |x| must    relative 2^-11 (normal
                               stay below 65520)             range; absolute 2^-25
                                                             below 2^-14)
``int8_block(block=256)``      1 + 4/block (a float32 scale  absolute max|block|/254
                               per block of elements)        (measured: docs/wire.md)
=============================  ============================  ====================

float16 overflow (a finite value that would become inf) is never silent:
``overflow="raise"`` (the default) raises ``OverflowError`` on every rank of
the transfer; ``overflow="fallback"`` sends that transfer in full precision
instead (``FALLBACKS`` counts them). The decision is agreed by the ranks of the
transfer (one small all-gather), so every rank raises or falls back together.

``using(fmt)`` (also ``dmath.wire(fmt)``) is a context manager: transfers in
the block that are not given a wire explicitly use ``fmt``; ``current()`` reads
it. Encoded segments are padded to 8 bytes, so segments of an all-to-all stay
aligned
(int8 blocks; the 2-byte formats need no padding).
"""
from __future__ import annotations

import contextlib
import math
import sys as _sys
import threading
import types as _types
from dataclasses import dataclass

import torch

from ..runtime.dispatch import command

ALIGN = 8


def _pad(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Format:
    """A wire format. ``nbytes(n)``: bytes of an encoded segment of ``n`` elements;
    ``encode``/``decode``: flat tensor <-> uint8 bytes (one segment)."""

    name: str = "?"
    bound: float | None = None      # max relative error per element (None: absolute, see docs)
    cost_per_element: float = 2.0   # local bytes touched per element to encode + decode

    def nbytes(self, n: int) -> int:
        raise NotImplementedError

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, buf: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError

    def ratio(self, dtype: torch.dtype) -> float:
        """Wire bytes per element / full-precision bytes per element (for large n)."""
        return self.nbytes(1 << 20) / ((1 << 20) * torch.empty(0, dtype=dtype).element_size())

    def applies(self, dtype: torch.dtype) -> bool:
        """Whether ``dtype`` data is compressed (floating and wider than the wire)."""
        return dtype.is_floating_point and self.ratio(dtype) < 1.0

    # -- segments (all-to-all, all-gather) -------------------------------------------------
    def encode_segments(self, flat: torch.Tensor, counts) -> tuple[torch.Tensor, list[int]]:
        """One uint8 buffer holding ``flat`` cut into ``counts`` segments, each encoded
        on its own; and the bytes per segment."""
        nb = [self.nbytes(int(c)) for c in counts]
        out = torch.empty(sum(nb), dtype=torch.uint8, device=flat.device)
        off = boff = 0
        for c, b in zip(counts, nb):
            if c:
                out[boff: boff + b].copy_(self.encode(flat[off: off + c]))
            off, boff = off + c, boff + b
        return out, nb

    def decode_segments(self, buf: torch.Tensor, counts, dtype: torch.dtype,
                        out: torch.Tensor | None = None) -> torch.Tensor:
        total = sum(int(c) for c in counts)
        out = torch.empty(total, dtype=dtype, device=buf.device) if out is None else out
        off = boff = 0
        for c in counts:
            b = self.nbytes(int(c))
            if c:
                out[off: off + c].copy_(self.decode(buf[boff: boff + b], int(c), dtype))
            off, boff = off + c, boff + b
        return out

    def roundtrip(self, x: torch.Tensor) -> torch.Tensor:
        """decode(encode(x)): what a receiver gets for ``x`` (same shape and dtype)."""
        flat = x.contiguous().view(-1)
        return self.decode(self.encode(flat), flat.numel(), x.dtype).view(x.shape)

    def overflows(self, x: torch.Tensor) -> bool:
        """Whether a finite element of ``x`` would not survive the trip."""
        return False

    def __repr__(self) -> str:
        return f"wire({self.name})"


@dataclass(frozen=True, repr=False)
class Cast(Format):
    """Elementwise cast to a narrower float dtype (bfloat16, float16)."""

    dtype: torch.dtype
    overflow: str = "raise"         # float16: "raise" or "fallback"

    def __post_init__(self):
        if self.overflow not in ("raise", "fallback"):
            raise ValueError(f"overflow must be 'raise' or 'fallback', got {self.overflow!r}")

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def bound(self) -> float:
        return torch.finfo(self.dtype).eps / 2     # unit roundoff: bf16 2^-8, fp16 2^-11

    @property
    def cost_per_element(self) -> float:
        return 2.0

    @property
    def item(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()

    def nbytes(self, n: int) -> int:
        return n * self.item            # 2-byte elements: segments stay aligned unpadded

    def encode(self, x):
        return x.reshape(-1).to(self.dtype).view(torch.uint8)

    def decode(self, buf, n, dtype):
        return buf[: n * self.item].view(self.dtype).to(dtype)

    def roundtrip(self, x):
        return x.to(self.dtype).to(x.dtype)

    def encode_segments(self, flat, counts):
        return flat.to(self.dtype).view(torch.uint8), [c * self.item for c in counts]

    def decode_segments(self, buf, counts, dtype, out=None):
        w = buf.view(self.dtype)
        return w.to(dtype) if out is None else out.copy_(w)

    def overflows(self, x):
        if self.dtype != torch.float16 or x.dtype == torch.float16 or x.numel() == 0:
            return False
        big = torch.finfo(torch.float16).max + 2.0 ** 4     # 65520 rounds to inf
        a = x.abs()
        return bool(((a >= big) & torch.isfinite(x)).any())

    def __repr__(self):
        extra = f", overflow={self.overflow!r}" if self.dtype == torch.float16 else ""
        return f"wire({self.name}{extra})"


@dataclass(frozen=True, repr=False)
class Int8Block(Format):
    """Block-quantised int8: per ``block`` consecutive elements of a segment one
    float32 scale s = max|x| / 127; q = round(x / s) in [-127, 127]; x' = q s.
    Error per element <= s / 2 = max|block| / 254 (non-finite blocks decode to nan)."""

    block: int = 256

    def __post_init__(self):
        if not isinstance(self.block, int) or self.block < 1:
            raise ValueError(f"int8_block: block must be a positive int, got {self.block!r}")

    @property
    def name(self) -> str:
        return f"int8_block({self.block})"

    cost_per_element = 6.0

    def nbytes(self, n: int) -> int:
        return _pad(4 * math.ceil(n / self.block)) + _pad(n)

    def _blocks(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as (blocks, block) in float32 (float64 stays), zero-padded: a view
        when no copy is needed."""
        n = x.numel()
        nb = math.ceil(n / self.block)
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        flat = x.reshape(-1)
        if n == nb * self.block and flat.dtype == wide:
            return flat.view(nb, self.block)
        xb = torch.zeros(nb * self.block, dtype=wide, device=x.device)
        xb[:n] = flat
        return xb.view(nb, self.block)

    def encode(self, x):
        n = x.numel()
        xb = self._blocks(x)
        nb = xb.shape[0]
        lo, hi = torch.aminmax(xb, dim=1)                   # no |x| temporary
        scale = (torch.maximum(hi, lo.neg()) / 127.0).to(torch.float32)
        inv = torch.reciprocal(scale.to(xb.dtype)).nan_to_num_(0.0, 0.0, 0.0)
        t = torch.mul(xb, inv[:, None]).round_()        # |x / s| <= 127: no clamp needed
        out = torch.empty(self.nbytes(n), dtype=torch.uint8, device=x.device)
        s_end = _pad(4 * nb)
        out[4 * nb: s_end].zero_()                          # padding: defined bytes
        out[s_end + n:].zero_()
        out[: 4 * nb].view(torch.float32).copy_(scale)
        out[s_end: s_end + n].view(torch.int8).copy_(t.view(-1)[:n])
        return out

    def decode(self, buf, n, dtype):
        nb = math.ceil(n / self.block)
        s_end = _pad(4 * nb)
        scale = buf[: 4 * nb].view(torch.float32)
        q = buf[s_end: s_end + n].view(torch.int8)
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        if n == nb * self.block:
            out = torch.mul(q.view(nb, self.block), scale.to(wide)[:, None]).view(-1)
        else:
            full = torch.zeros(nb * self.block, dtype=wide, device=buf.device)
            full[:n] = q
            out = full.view(nb, self.block).mul_(scale.to(wide)[:, None]).view(-1)[:n]
        return out if out.dtype == dtype else out.to(dtype)


def int8_block(block: int = 256) -> Int8Block:
    """Block-quantised int8 wire format with a float32 scale per ``block`` elements."""
    return Int8Block(block)


def float16(overflow: str = "raise") -> Cast:
    """float16 wire format; ``overflow``: "raise" (OverflowError) or "fallback"
    (that transfer goes in full precision)."""
    return Cast(torch.float16, overflow)


_NAMES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
          "float16": torch.float16, "half": torch.float16}


def as_format(w) -> Format | None:
    """The Format for ``w``: None/"none"/False (no compression), a torch dtype
    (bfloat16, float16), a name ("bf16", "fp16", "int8"), or a Format."""
    if w is None or w is False or w == "none":
        return None
    if isinstance(w, Format):
        return w
    if isinstance(w, str):
        if w in ("int8", "int8_block"):
            return Int8Block()
        if w in _NAMES:
            w = _NAMES[w]
    w = getattr(w, "torch", w)                 # a dmath DType: its torch dtype
    if w in (torch.bfloat16, torch.float16):
        return Cast(w)
    raise ValueError(f"unknown wire format {w!r}: use None, dmath.bfloat16, dmath.float16, "
                     "dmath.wire.float16(overflow=...), dmath.wire.int8_block(block=...), "
                     "or 'bf16' / 'fp16' / 'int8'")


# -- the ambient format ----------------------------------------------------------------------
_STATE = threading.local()
_DEFAULT: list = [None]      # process-wide default (set_default)
FALLBACKS = [0]              # float16 transfers sent in full precision after an overflow


def current() -> Format | None:
    """The format of transfers given no explicit wire (innermost ``using`` block, else
    the process default)."""
    stack = getattr(_STATE, "stack", None)
    return stack[-1] if stack else _DEFAULT[0]


def set_default(w) -> None:
    """Process-wide default wire format (None: full precision); in client-server
    mode call it on rank 0 (it runs on every rank)."""
    _set_default(as_format(w))


@command
def _set_default(fmt) -> None:
    _DEFAULT[0] = fmt


def _stack() -> list:
    stack = getattr(_STATE, "stack", None)
    if stack is None:
        stack = _STATE.stack = []
    return stack


@command
def _push(fmt) -> None:
    _stack().append(fmt)


@command
def _pop() -> None:
    _stack().pop()


@contextlib.contextmanager
def using(w):
    """``with using(fmt): ...``: transfers without an explicit wire use ``fmt``
    (``None``: full precision inside the block); on every rank in client-server mode."""
    fmt = as_format(w)
    _push(fmt)
    try:
        yield fmt
    finally:
        _pop()


@contextlib.contextmanager
def scoped(fmt: Format | None):
    """``using`` on this rank only (library code inside a command)."""
    stack = _stack()
    stack.append(fmt)
    try:
        yield fmt
    finally:
        stack.pop()


AUTO = "auto"


def resolve(wire=AUTO) -> Format | None:
    """The format a call uses: ``"auto"`` (the default of every ``wire=`` argument):
    ``current()``; else ``as_format(wire)`` (None: full precision)."""
    return current() if isinstance(wire, str) and wire == AUTO else as_format(wire)


def for_dtype(fmt: Format | None, dtype: torch.dtype) -> Format | None:
    """``fmt`` when it compresses ``dtype`` data, else None (integers, and data already
    as narrow as the wire, travel as they are)."""
    dtype = getattr(dtype, "torch", dtype)     # a dmath DType: its torch dtype
    return fmt if fmt is not None and fmt.applies(dtype) else None


def agreed(fmt: Format | None, comm, tensors) -> Format | None:
    """``fmt`` checked for overflow on ``tensors`` and agreed over ``comm`` (float16
    only): raises OverflowError on every rank, or returns None (full precision) for
    ``overflow="fallback"``."""
    if not checks_range(fmt):
        return fmt
    mine = any(fmt.overflows(t) for t in tensors)
    return outcome(fmt, mine if comm.size == 1 else any(comm.allgather_obj(mine)))


def outcome(fmt: Format | None, bad: bool) -> Format | None:
    """After the ranks agreed whether any float16 value overflows (``bad``): raise
    OverflowError, or None (full precision) for ``overflow="fallback"``, or ``fmt``."""
    if not bad:
        return fmt
    if fmt.overflow == "raise":
        raise OverflowError("wire float16: a finite value is outside float16's range "
                            "(|x| >= 65520) and would arrive as inf; use wire=dmath.bfloat16, "
                            "int8_block, or dmath.wire.float16(overflow='fallback')")
    FALLBACKS[0] += 1
    return None


def checks_range(fmt: Format | None) -> bool:
    return isinstance(fmt, Cast) and fmt.dtype == torch.float16


__all__ = ["AUTO", "Cast", "FALLBACKS", "Format", "Int8Block", "agreed", "as_format", "checks_range", "current",
           "float16", "for_dtype", "int8_block", "outcome", "resolve", "scoped", "set_default", "using"]


class _CallableModule(_types.ModuleType):
    """``dmath.wire(fmt)`` is ``using(fmt)``; ``dmath.wire.int8_block(...)`` etc. as usual."""

    def __call__(self, w):
        return using(w)


_sys.modules[__name__].__class__ = _CallableModule
