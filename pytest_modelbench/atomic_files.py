"""Atomic file writes: results, reports and baselines are replaced whole or not at all."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Write through an exclusive temporary file in the same folder, fsync, then rename over `path`.

    A reader (or a crash) never sees half a file; concurrent writers (pytest-xdist workers) each own their
    temporary file, and the last rename wins with a complete file. The file gets the usual permissions (0666 less
    the umask), not the temporary file's private 0600.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # a device, a pipe: renaming over it would replace it
        raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
