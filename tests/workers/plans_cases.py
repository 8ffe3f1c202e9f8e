"""Plan caches (dmath.runtime.plans): a repeated call reuses its plan, and everything
that determines a plan makes a new one — a changed layout, dtype, grid or agreed
setting — while writes to an array's values (in place, through views, by
setitem) never leave a stale result: plans hold descriptions, not values.

    mpiexec -n 2 python -m mpi4py tests/workers/plans_cases.py
"""
from __future__ import annotations

import numpy as np

import dmath
from _case import Cases
from dmath.runtime import agreed, plans

C = Cases()
P = C.ctx.world.size
rng = np.random.default_rng(5)
n = 2 * P + 3                                   # uneven on purpose
X = rng.standard_normal((n, n))
y = rng.standard_normal(n)
ROWS, COLS = dmath.row_block(), dmath.col_block()


def misses(name: str) -> int:
    return plans.stats()[name]["misses"]


def close(a, want) -> None:
    got = a.to_numpy() if isinstance(a, dmath.DArray) else a
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def replans(name: str, run, want, fresh: bool) -> None:
    """``run()`` equals ``want``; it made a new ``name`` plan iff ``fresh``; run again, no new one."""
    m = misses(name)
    close(run(), want)
    assert (misses(name) > m) == fresh, f"{name}: fresh plan {misses(name) > m}, want {fresh}"
    m = misses(name)
    close(run(), want)
    assert misses(name) == m, f"{name}: the same call planned again"
    C.ok()


A = dmath.from_numpy(X, ROWS)
v = dmath.from_numpy(y, ROWS)

# the first call plans; the same description again reuses it
replans("matmul", lambda: A @ v, X @ y, fresh=True)
replans("inner product", lambda: dmath.dot(v, v).item(), y @ y, fresh=True)
replans("reduction", lambda: dmath.sum(A, axis=0), X.sum(0), fresh=True)
replans("redistribute", lambda: A.redistribute(COLS), X, fresh=True)

# a changed layout, dtype or grid is a new plan, with the right answer
Ac = A.redistribute(COLS)
replans("matmul", lambda: Ac @ v, X @ y, fresh=True)
replans("reduction", lambda: dmath.sum(Ac, axis=0), X.sum(0), fresh=True)
A32, v32 = A.astype("float32"), v.astype("float32")
m = misses("matmul")
np.testing.assert_allclose((A32 @ v32).to_numpy(), (X.astype(np.float32) @ y.astype(np.float32)),
                           rtol=1e-4, atol=1e-4)
assert misses("matmul") > m
C.ok()
g2 = dmath.Grid((1, P), ("r", "c")) if P > 1 else dmath.Grid((1,), ("r",))
A2, v2 = dmath.from_numpy(X, ROWS, grid=g2), dmath.from_numpy(y, ROWS, grid=g2)
replans("matmul", lambda: A2 @ v2, X @ y, fresh=True)

# writes to values: in place, through a view (.T), by setitem — never a stale answer
A += 1.0
X += 1.0
replans("matmul", lambda: A @ v, X @ y, fresh=False)
V = A.T                                         # a view: shares A's pieces
V *= 2.0
X *= 2.0
A[1:n - 1] = A[1:n - 1] * 3.0                   # setitem (indexing reads copy)
X[1:n - 1] *= 3.0
close(A @ v, X @ y)
close(dmath.sum(A, axis=0), X.sum(0))
close(A.redistribute(COLS), X)
v[0] = 100.0
y[0] = 100.0
close(dmath.dot(v, v).item(), y @ y)
close(A @ v, X @ y)
C.ok()

# a changed agreed setting forgets every plan; the next call plans again, same answer
held = sum(s["plans"] for s in plans.stats().values())
assert held > 0
with agreed.override("DMATH_CACHE_MB", 0):
    assert sum(s["plans"] for s in plans.stats().values()) == 0
    replans("matmul", lambda: A @ v, X @ y, fresh=True)
replans("matmul", lambda: A @ v, X @ y, fresh=True)

# off: nothing kept, every call plans (and the same values come out)
planned = (A @ v).to_numpy()
plans.set_enabled(False)
m = misses("matmul")
unplanned = [(A @ v).to_numpy() for _ in range(2)]
assert misses("matmul") == m + 2 and plans.stats()["matmul"]["plans"] == 0
assert all(u.tobytes() == planned.tobytes() for u in unplanned)
plans.set_enabled(True)
C.ok()


# -- nn layers: forward / backward planned once per input description -------------------------
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dmath import nn  # noqa: E402

NN = ("nn.conv", "nn.pool", "nn.linear")


def nn_misses() -> dict:
    return {k: misses(k) for k in NN}


def make_net(dtype, grid=None):
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, layout="data", dtype=dtype, seed=1,
                                   grid=grid),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3 * 2 * 3, 4, dtype=dtype, seed=3, grid=grid))


def torch_net(net, xs):
    """The same forward in torch (float64) from the gathered weights: y, dL/dx, dL/dw's."""
    ws = [torch.from_numpy(np.array(p.master.to_numpy())).double().requires_grad_() for p in net.params()]
    x = torch.from_numpy(xs).double().requires_grad_()
    h = F.max_pool2d(F.relu(F.conv2d(x, ws[0], ws[1], padding=1)), 2).flatten(1)
    y = F.linear(h, ws[2], ws[3])
    (y * torch.from_numpy(YW)).sum().backward()
    return y.detach().numpy(), x.grad.numpy(), [w.grad.numpy() for w in ws]


def nn_step(net, x):
    """(y, dx, grads) of loss = sum(y * YW): forward, backward, gradients reduced."""
    y = net(x)
    dy = dmath.from_numpy(YW, y.layout, grid=y.grid).astype(y.dtype)
    dx = net.backward(dy)
    return y, dx, [p.grad for p in net.params()]


def nn_bytes(out) -> list:
    y, dx, gs = out
    return [a.to_numpy().tobytes() for a in (y, dx, *gs)]


nb = 2 * P + 1                                  # batch: uneven over the ranks
XS = rng.standard_normal((nb, 2, 4, 6))
YW = rng.standard_normal((nb, 4))
DATA = dmath.Layout(C.ctx.world.size > 1 and "*" or None)
for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
    net = make_net(dtype)
    x = dmath.from_numpy(XS.astype(np.float64 if dtype == torch.float64 else np.float32), DATA)
    m0 = nn_misses()
    first = nn_step(net, x)
    m1 = nn_misses()
    # the first call plans every layer; a new dtype re-plans what reads it (the
    # convolution's choice weighs the itemsize; pooling and the linear layouts do not)
    assert all(m1[k] > m0[k] for k in (NN if dtype == torch.float64 else ("nn.conv",))), \
        (m0, m1)
    again = nn_step(net, x)
    assert nn_misses() == m1, "the same layer call planned again"
    assert nn_bytes(first) == nn_bytes(again)
    want = torch_net(net, XS)
    for got, w in zip((first[0], first[1], *first[2]), (want[0], want[1], *want[2])):
        np.testing.assert_allclose(got.to_numpy(), w, rtol=tol, atol=tol)
    C.ok()

# planned == unplanned, bit for bit (layers, plans off: every call plans anew)
net, x = make_net(torch.float64), dmath.from_numpy(XS, DATA)
planned = nn_bytes(nn_step(net, x))
plans.set_enabled(False)
m = nn_misses()
assert nn_bytes(nn_step(net, x)) == planned and nn_bytes(nn_step(net, x)) == planned
assert all(nn_misses()[k] >= m[k] + 2 for k in NN)
plans.set_enabled(True)
C.ok()

# a changed input layout (batch replicated) or grid plans again, same values
m = nn_misses()
xr = dmath.from_numpy(XS, dmath.Layout())
y_rep = nn_step(net, xr)
assert nn_misses()["nn.pool"] > m["nn.pool"] and nn_misses()["nn.conv"] > m["nn.conv"]
np.testing.assert_allclose(y_rep[0].to_numpy(), torch_net(net, XS)[0], rtol=1e-10, atol=1e-10)
np.testing.assert_allclose(y_rep[1].to_numpy(), torch_net(net, XS)[1], rtol=1e-10, atol=1e-10)
C.ok()
gp = dmath.Grid((P, 1), ("a", "b"))
net_g = make_net(torch.float64, grid=gp)
m = nn_misses()
out_g = nn_step(net_g, dmath.from_numpy(XS, DATA, grid=gp))
assert all(nn_misses()[k] > m[k] for k in NN)
np.testing.assert_allclose(out_g[0].to_numpy(), torch_net(net_g, XS)[0], rtol=1e-10, atol=1e-10)
C.ok()

# load_state_dict: new weights (same description: the plans are kept), never stale values
other = make_net(torch.float64)
for p in other.params():
    p.master *= 0.5
sd = {k: v.copy() for k, v in other.state_dict().items()}
m = nn_misses()
net.load_state_dict(sd)
got = nn_step(net, x)
assert nn_misses() == m                         # weights are values, not part of a plan
want = torch_net(net, XS)
np.testing.assert_allclose(got[0].to_numpy(), want[0], rtol=1e-10, atol=1e-10)
np.testing.assert_allclose(got[0].to_numpy(), torch_net(other, XS)[0], rtol=1e-10, atol=1e-10)
# ... a weight stored in a new layout (column-sharded Linear weight) is a new plan
lin = net.layers[-1]
lin.w.set_master(lin.w.master.redistribute(dmath.Layout("*", None) if P > 1 else
                                           dmath.Layout(None, None)))
m = nn_misses()
got = nn_step(net, x)
assert P == 1 or nn_misses()["nn.linear"] > m["nn.linear"]
np.testing.assert_allclose(got[0].to_numpy(), want[0], rtol=1e-10, atol=1e-10)
np.testing.assert_allclose(got[1].to_numpy(), want[1], rtol=1e-10, atol=1e-10)
C.ok()

# a changed setting (pooling window, eval mode's dropout) is a new plan / a new result
m = nn_misses()
y2 = nn.MaxPool2d(3, stride=1)(dmath.from_numpy(XS, DATA))
assert nn_misses()["nn.pool"] > m["nn.pool"]
np.testing.assert_allclose(y2.to_numpy(), F.max_pool2d(torch.from_numpy(XS), 3, 1).numpy())
C.ok()

C.report()
