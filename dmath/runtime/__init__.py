"""Runtime layer: MPI start-up, devices, communication backends, process grids."""
from .comm import STATS, Comm, CommStats
from .session import finalize, init, set_default_grid
from .state import context, default_grid, device, is_initialized, world
from .dispatch import RemoteError, command, sync
from .divergence import DivergenceError
from .grid import Grid, most_square
from .caching import set_cache_budget
from .memstats import memory_stats

__all__ = ["STATS", "Comm", "CommStats", "Grid", "context", "default_grid", "device",
           "finalize", "init", "is_initialized", "most_square", "set_default_grid", "world",
           "DivergenceError", "RemoteError", "command", "memory_stats", "set_cache_budget", "sync"]
