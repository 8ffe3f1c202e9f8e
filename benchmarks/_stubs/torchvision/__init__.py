"""Benchmark-only stand-in for torchvision so that Heat 1.8 imports beside torch 2.13.

Heat imports torchvision at import time for its MNIST / image-transform
helpers, which the GEMM benchmark never uses. Never on the library's path."""
from . import datasets, transforms  # noqa: F401
