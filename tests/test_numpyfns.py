"""numpy's everyday functions and the distributed fft extension.

* pure parts: einsum's subscript parsing, the four-step FFT's split;
* tests/workers/numpyfns_cases.py: flip, roll, take, repeat, tile, pad, moveaxis,
  broadcast_to, stacks, split, meshgrid, diag/diagonal/trace/triu/tril, isclose /
  allclose / array_equal / round / conj / real / imag, bincount, add.at,
  count_nonzero, nonzero / argwhere, unique, searchsorted, argpartition,
  percentile / quantile / median, average, cov, corrcoef, ptp, cumprod, diff,
  gradient, einsum / outer / inner / kron and the DArray methods, against numpy
  over random shapes x layouts x dtypes on 1-4 real MPI ranks;
* tests/workers/fft_cases.py: every transform against numpy.fft in every layout,
  round trips, the four-step 1-D path, the all-to-alls of slab and pencil 3-D FFTs.
"""
import pytest

from dmath.fft.transforms import _split
from dmath.linalg.contraction import parse
from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("spec, ndims, want", [
    ("ij,jk->ik", [2, 2], (["ij", "jk"], "ik")),
    ("ij,jk", [2, 2], (["ij", "jk"], "ik")),
    ("ii", [2], (["ii"], "")),
    ("...j,jk->...k", [3, 2], (["YZj", "jk"], "YZk")),
    ("ba", [2], (["ba"], "ab")),
])
def test_einsum_parse_like_numpy(spec, ndims, want):
    assert parse(spec, ndims) == want


@pytest.mark.parametrize("spec, ndims", [("ij,jk->iq", [2, 2]), ("ij", [3]), ("ij,j", [2])])
def test_einsum_parse_errors(spec, ndims):
    with pytest.raises(ValueError):
        parse(spec, ndims)


def test_four_step_split():
    for n in range(2, 300):
        s = _split(n)
        if s is None:
            assert all(n % d for d in range(2, n)) or n < 4
        else:
            assert s[0] * s[1] == n and 1 < s[0] <= s[1]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_numpyfns_cases(n):
    assert run_workers("numpyfns_cases", n, env=YIELD, timeout=900) >= 300


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_fft_cases(n):
    assert run_workers("fft_cases", n, env=YIELD, timeout=900) >= 300


def test_numpyfns_client_server():
    assert run_workers("numpyfns_cs", 3, env=YIELD, timeout=600) >= 20
