"""``dmath.fft``: the array API's fft extension over distributed arrays (numpy.fft's
semantics): local torch.fft along whole axes, slab / pencil transposes
(``redistribute``) to bring the next axis local, the four-step algorithm for
a sharded 1-D array. See docs/fft.md and ``transforms``' docstring."""
from .frequencies import fftfreq, fftshift, ifftshift, rfftfreq
from .transforms import (fft, fft2, fftn, hfft, ifft, ifft2, ifftn, ihfft, irfft, irfft2, irfftn,
                         rfft, rfft2, rfftn)

__all__ = ["fft", "fft2", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifft2", "ifftn",
           "ifftshift", "ihfft", "irfft", "irfft2", "irfftn", "rfft", "rfft2", "rfftfreq",
           "rfftn"]
