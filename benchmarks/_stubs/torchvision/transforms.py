"""Stub of torchvision.transforms: names Heat mentions in annotations and base classes."""


class _Unavailable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torchvision stub: transforms are not available in the benchmark")


def __getattr__(name):
    return _Unavailable
