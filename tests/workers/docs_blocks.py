"""Run the documentation's python code blocks, as pasted, on N ranks.

    mpiexec -n N python -m mpi4py docs_blocks.py BLOCKS.json WORKDIR [--spmd]

BLOCKS.json: [[name, code], ...]. Each block runs in a fresh namespace, in its
own folder under WORKDIR; its own ``dmath.init()`` returns the running
session (client-server by default: rank 0 runs the blocks, the others serve;
``--spmd``: every rank runs them). Prints ``CASES k passed`` (k blocks).
"""
from __future__ import annotations

import json
import os
import sys
import traceback

import dmath

blocks_file, work = sys.argv[1], sys.argv[2]
spmd = "--spmd" in sys.argv
ctx = dmath.init(mode="spmd" if spmd else None)      # servers serve here until rank 0 ends
rank = ctx.world.rank
with open(blocks_file) as f:
    blocks = json.load(f)
passed = 0
for i, (name, code) in enumerate(blocks):
    d = os.path.join(work, f"block{i}-{'spmd' if spmd else 'cs'}")
    os.makedirs(d, exist_ok=True)
    os.chdir(d)
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
    except BaseException:
        print(f"FAILED {name}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        sys.exit(1)
    passed += 1
    if rank == 0:
        print(f"RAN {name}", flush=True)
total = ctx.world.allgather_obj(passed) if spmd else [passed]
if rank == 0:
    print(f"CASES {min(total)} passed", flush=True)
dmath.finalize()
