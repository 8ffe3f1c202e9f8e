"""Entry of a spawned server process: ``python -m dmath.runtime.worker <parent pid>``.

``dmath.init(workers=N)`` spawns N-1 of these (``spawn.spawn_servers``):
``dmath.init()`` here finds the parent, joins its world and serves its commands;
a thread ends the process if the parent process disappears.
"""
from __future__ import annotations

import os
import sys
import threading
import time


def _watch_parent(pid: int, period: float = 0.5) -> None:
    def watch():
        while True:
            time.sleep(period)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:
                pass
    threading.Thread(target=watch, name="dmath-parent-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    """Join the parent's session and serve it (exits when told to stop)."""
    if argv:
        _watch_parent(int(argv[0]))
    from .session import init
    init()                 # finds the parent, merges, serves; exits when told to stop
    raise SystemExit("dmath.runtime.worker: not started by dmath.init(workers=N)")


if __name__ == "__main__":
    from dmath.runtime import worker as _worker      # the real module, not this __main__ copy
    _worker.main(sys.argv[1:])
