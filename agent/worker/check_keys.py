"""The checks' secret keys and the page the checker kernels read them from.

No key is ever a kernel's argument: ptxas loads arguments into uniform registers, which no
scrub writes and a later kernel can read unset. The keys are on the device only in the key
page, and only while checker kernels are enqueued (`CheckKeys.on`): filled on the stream
before them and zeroed behind them, so no candidate's launch finds them there. The kernels
load them per thread (cuda/checks.cu, ws_key_word), which keeps them in vector registers,
and the register scrub overwrites those before every judged launch.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from .pages import alloc_pages

if TYPE_CHECKING:
    from ..runtime.native import Device

# Where each key sits in the page, in bytes from its start: two u64 words a PRF key.
REF_KEY, FENCE_KEY, SEAL_KEY, CHECKSUM_KEY = 0, 16, 32, 48
PAGE_WORDS = 8


def _pair() -> tuple[int, int]:
    return secrets.randbits(64), secrets.randbits(64)


class CheckKeys:
    """The PRF keys of the reference mask, the fences (a fence's salt goes into the second
    word) and the seals, the checksums' key, and the key page."""

    def __init__(self, device: Device):
        self.ref, self.fence, self.seal = _pair(), _pair(), _pair()
        self.checksum = secrets.randbits(64)
        self.page = alloc_pages(device, PAGE_WORDS * 8)
        self._depth = 0  # nested on() blocks open

    def words(self) -> np.ndarray:
        """The page's contents while the keys are on, at REF_KEY ... CHECKSUM_KEY."""
        words = np.zeros(PAGE_WORDS, dtype=np.uint64)
        words[:7] = [*self.ref, *self.fence, *self.seal, self.checksum]
        return words

    @contextmanager
    def on(self) -> Iterator[int]:
        """The page's address, the keys in it for the kernels enqueued inside the block and
        zeroed behind them, on the same stream: no other kernel runs while they are there.
        Nested blocks share the outermost one's fill (a timed launch's checks take one)."""
        if not self._depth:
            self.page.upload_async(self.words())
        self._depth += 1
        try:
            yield self.page.ptr
        finally:
            self._depth -= 1
            if not self._depth:
                self.page.fill_u32_async(0, 0, self.page.nbytes)
