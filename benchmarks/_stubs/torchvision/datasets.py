"""Stub: Heat's MNIST helper subclasses this; the benchmark never uses it."""


class MNIST:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torchvision stub: datasets are not available in the benchmark")
