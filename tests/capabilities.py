"""A child process in which file modes hold whoever runs the tests: root's capabilities that bypass them dropped."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

CAP_DAC_OVERRIDE = 1  # root writes into a 0555 folder, reads a mode-000 file
CAP_DAC_READ_SEARCH = 2  # root reads any file and searches any folder
_PR_CAPBSET_DROP = 24


def drop_capabilities(*capabilities: int) -> None:
    """Drop `capabilities` from this process's capability bounding set (in a child, before it runs its command): the
    process then honours a file's or folder's mode as any other user does."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in capabilities:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {capability}) failed")


def as_any_user(*capabilities: int) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess that drops `capabilities` when the tests run as root; None for any other user,
    whom modes bind already."""
    return functools.partial(drop_capabilities, *capabilities) if os.geteuid() == 0 else None
