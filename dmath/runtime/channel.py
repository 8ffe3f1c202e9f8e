"""The control channel between the client (rank 0) and the servers (other ranks).

Every command is one message of at most ``FRAME`` bytes (the receiver's
buffer): a 16-byte header ``(payload length, flags, sequence number)`` and
the payload, as long as they are; a payload longer than the frame's room
follows as a second message. Frames travel down a
binary tree of ranks (rank r forwards to 2r+1 and 2r+2 before running the
command), so rank 0 sends at most two messages and a frame reaches p ranks in
about log2(p) hops. Point-to-point messages, not ``MPI_Bcast``: a server can
wait for the next frame with a non-blocking receive that it polls
(``Test``) for ``spin_seconds()`` after the last frame and then between sleeps
growing to ``SLEEP_MAX``, so idle servers do not burn a core and answer
within ~2 ms when woken (a blocking broadcast would spin for ever, and
Open MPI's non-blocking one costs tens of microseconds more per command).

Errors travel the other way: a server whose command failed sends the detail
to rank 0 at once (non-blocking point-to-point, tag ``ERROR_TAG``) and keeps a
running count; ``gather_status()`` sums the counts up the tree to rank 0,
which then receives exactly the details it has not seen. A frame with the ``SYNC`` flag
asks every server to take part in that gather right after the command.

All of it runs on a private duplicate of the world communicator, so control
messages never match data collectives.
"""
from __future__ import annotations

import os
import struct
import time

import numpy as np

from .mpi import MPI

FRAME = 2048
_HEADER = struct.Struct("<IIQ")          # payload length, flags, sequence number
ROOM = FRAME - _HEADER.size

SYNC = 1        # gather error counts after this command
STOP = 2        # servers leave their loop
ERROR_TAG = 0x7E57
FRAME_TAG, REST_TAG, COUNT_TAG = 0x7E51, 0x7E52, 0x7E53

# Servers: spin on Test for this long after a frame (SPIN_S; SPIN_CROWDED_S when a
# node has more ranks than cores, where a spinning server takes the core rank 0
# needs), then sleep between polls (doubling from SLEEP_MIN up to SLEEP_BUSY during
# the first second, SLEEP_MAX after) so an idle session costs next to no CPU.
# DMATH_SPIN_S overrides the spin.
SPIN_S, SPIN_CROWDED_S = 0.05, 0.001
SLEEP_MIN, SLEEP_BUSY, SLEEP_MAX = 20e-6, 200e-6, 2e-3


def spin_seconds(local_size: int) -> float:
    """How long a rank on a node with ``local_size`` ranks spins before sleeping:
    short when the node is crowded (more ranks, or more runnable processes, than
    cores), since a spinning rank then takes the core another one needs."""
    env = os.environ.get("DMATH_SPIN_S")
    if env:
        return float(env)
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return SPIN_CROWDED_S if local_size > cores or load > cores else SPIN_S


class Channel:
    """Rank 0's and the servers' ends of the command broadcast and error reports."""

    def __init__(self, world: "MPI.Intracomm", local_size: int = 1):
        self.mpi = world.Dup()
        self.local_size = local_size
        self.spin_s = spin_seconds(local_size)
        self._spin_at = time.monotonic()
        self.rank = self.mpi.Get_rank()
        self.size = self.mpi.Get_size()
        self._frame = bytearray(FRAME)
        self._frame_np = np.frombuffer(self._frame, np.uint8)
        self._count = np.zeros(1, np.int64)
        self._child_counts = np.zeros((2, 1), np.int64)
        self.parent = (self.rank - 1) // 2
        self.children = [c for c in (2 * self.rank + 1, 2 * self.rank + 2) if c < self.size]
        self.frames = 0
        self.bytes = 0
        # server side: error reports sent and not yet completed
        self.errors_sent = 0
        self._pending: list = []
        # client side: error reports received
        self._seen = 0
        # persistent receives (no request made per command): the next frame from the
        # parent (servers), the children's error counts
        self._frame_req = None if self.rank == 0 else \
            self.mpi.Recv_init(self._frame_np, source=self.parent, tag=FRAME_TAG)
        self._count_reqs = [self.mpi.Recv_init(self._child_counts[i], source=c, tag=COUNT_TAG)
                            for i, c in enumerate(self.children)]
        # servers: the persistent send of this rank's count to its parent (started by
        # ``gather_status``, completed before the count is written again)
        self._count_send = None if self.rank == 0 else \
            self.mpi.Send_init(self._count, dest=self.parent, tag=COUNT_TAG)
        self._count_started = False

    # -- commands: rank 0 -> everyone ------------------------------------------------
    def send(self, seq: int, flags: int, payload) -> None:
        """Rank 0: send one command (``payload``: bytes-like) to every server."""
        n = len(payload)
        _HEADER.pack_into(self._frame, 0, n, flags, seq)
        if n <= ROOM:
            end = _HEADER.size + n
            self._frame[_HEADER.size:end] = payload
            rest = None
        else:
            end = FRAME
            self._frame[_HEADER.size:] = payload[:ROOM]
            rest = np.frombuffer(payload, np.uint8)[ROOM:]
        self._forward(end, rest)
        self.frames += 1
        self.bytes += end + (n - ROOM if rest is not None else 0)

    def _forward(self, end: int, rest) -> None:
        """Pass the frame's first ``end`` bytes (and the rest of a long payload) on to
        this rank's children (a frame travels only as long as its header and payload)."""
        if self.children:
            frame = [self._frame_np, end, MPI.BYTE]
            for c in self.children:
                self.mpi.Send(frame, dest=c, tag=FRAME_TAG)
            if rest is not None:
                for c in self.children:
                    self.mpi.Send(rest, dest=c, tag=REST_TAG)

    def receive(self, idle=None) -> tuple[int, int, memoryview]:
        """Servers: wait for the next command and pass it on down the tree;
        returns (seq, flags, payload). ``idle()`` is called now and then while
        waiting (a liveness check)."""
        req = self._frame_req
        req.Start()
        self._wait(req, idle)
        n, flags, seq = _HEADER.unpack_from(self._frame, 0)
        rest = None
        if n > ROOM:
            rest = np.empty(n - ROOM, np.uint8)
            self.mpi.Recv(rest, source=self.parent, tag=REST_TAG)
        end = _HEADER.size + min(n, ROOM)
        self._forward(end, rest)
        if rest is None:
            payload = memoryview(self._frame)[_HEADER.size:end]
        else:
            payload = memoryview(bytes(self._frame[_HEADER.size:]) + rest.tobytes())
        self.frames += 1
        self.bytes += end + (n - ROOM if rest is not None else 0)
        self._reap()
        return seq, flags, payload

    def _wait(self, req, idle=None) -> None:
        """Complete ``req`` polling: spin for ``spin_s``, then sleep between tests."""
        if req.Test():
            return
        start = time.perf_counter()
        sleep = SLEEP_MIN
        polls = 0
        while not req.Test():
            polls += 1
            if polls < 64 or time.perf_counter() - start < self.spin_s:
                continue
            time.sleep(sleep)
            # short naps for the first second of waiting (a busy rank answers soon),
            # then up to SLEEP_MAX (an idle session costs next to no CPU)
            sleep = min(2 * sleep, SLEEP_BUSY if time.perf_counter() - start < 1.0 else SLEEP_MAX)
            if polls % 256 == 0:
                if idle is not None:
                    idle()
                if start - self._spin_at > 2.0:           # the node's load changes
                    self.spin_s, self._spin_at = spin_seconds(self.local_size), start

    # -- errors: servers -> rank 0 ---------------------------------------------------
    def report(self, detail: dict) -> None:
        """Server: send one failure's detail to rank 0 (does not wait)."""
        self._pending.append(self.mpi.isend(detail, dest=0, tag=ERROR_TAG))
        self.errors_sent += 1

    def _reap(self) -> None:
        if self._pending:
            self._pending = [r for r in self._pending if not r.Test()]

    def status_requests(self) -> list:
        """The receives of this rank's children's counts for the command just run
        (rank 0 posts them and completes them later: ``gather_status(requests)``)."""
        reqs = self._count_reqs
        for r in reqs:
            r.Start()
        return reqs

    def gather_status(self, requests: list | None = None) -> list[dict]:
        """Every rank: on rank 0, the details of every failure not seen yet (sorted by
        sequence number); ``[]`` on the servers and when nothing failed.

        The counts of reports sent are summed up the tree (each rank waits for
        its children, politely: a rank 0 waiting for slow servers sleeps instead
        of taking their core); if the sum moved, rank 0 receives that many
        details, which were sent before the counts. ``requests``: the children's
        counts' receives posted earlier by ``status_requests`` (else posted now)."""
        total = self.errors_sent
        for i, req in enumerate(self.status_requests() if requests is None else requests):
            self._wait(req)
            total += int(self._child_counts[i, 0])
        if self.rank != 0:
            send = self._count_send
            if self._count_started:
                send.Wait()                   # the last count left long ago (8 bytes)
            self._count[0] = total
            send.Start()
            self._count_started = True
            return []
        if total == self._seen:
            return []                                 # the usual case: nothing new
        details = [self.mpi.recv(source=MPI.ANY_SOURCE, tag=ERROR_TAG)
                   for _ in range(total - self._seen)]
        self._seen = total
        return sorted(details, key=lambda d: (d["seq"], d["rank"]))

    def error_waiting(self) -> bool:
        """Rank 0: has a server reported a failure that was not collected yet?"""
        return self.mpi.Iprobe(source=MPI.ANY_SOURCE, tag=ERROR_TAG)

    def free(self) -> None:
        for r in self._pending:
            r.Wait()
        self._pending = []
        if self._count_started:
            self._count_send.Wait()
            self._count_started = False
        for r in [self._frame_req, self._count_send, *self._count_reqs]:
            if r is not None:
                r.Free()
        self._frame_req, self._count_send, self._count_reqs = None, None, []
        self.mpi.Free()
