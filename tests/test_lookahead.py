"""Depth-1 look-ahead in cholesky, lu and qr (issue 19): on == off bitwise, right vs scipy."""
import pytest

from mpi_harness import run_workers


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_lookahead_cases(ranks):
    assert run_workers("lookahead_cases", ranks, timeout=600) >= 10


def test_the_setting_is_read_from_the_environment(monkeypatch):
    from dmath.linalg import lookahead
    monkeypatch.delenv("DMATH_LOOKAHEAD", raising=False)
    assert lookahead._read_env() is True
    monkeypatch.setenv("DMATH_LOOKAHEAD", "0")
    assert lookahead._read_env() is False
    monkeypatch.setenv("DMATH_LOOKAHEAD", "maybe")
    with pytest.raises(ValueError, match="DMATH_LOOKAHEAD"):
        lookahead._read_env()


def test_pipeline_orders_the_steps():
    from dmath.linalg.lookahead import pipeline
    for on, want in ((True, ["s0", "f0", "u0n", "s4", "u0r", "f4", "u4n", "u4r"]),
                     (False, ["s0", "f0", "u0n", "u0r", "s4", "f4", "u4n", "u4r"])):
        log = []
        pipeline(range(0, 8, 4), lambda k: log.append(f"s{k}") or k,
                 lambda k, h: log.append(f"f{k}") or h,
                 lambda k, s, nxt: log.append(f"u{k}{'n' if nxt else 'r'}"), on=on)
        assert log == want, (on, log)
    pipeline([], None, None, None, on=True)
