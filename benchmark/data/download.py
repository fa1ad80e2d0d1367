"""Download a dataset archive with a checksum and a network timeout, then extract it.

Used by `circlebench data download`. A refused or silent connection ends with an error
saying what to do offline, never a hang: every socket read is bounded by `timeout_s`.
"""

from __future__ import annotations

import hashlib
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from core.atomic import replaced

CHUNK = 1 << 20


def file_md5(path: Path) -> str:
    """Hex md5 of a file, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, md5: str, folder: Path, *, timeout_s: float = 10.0) -> Path:
    """Fetch `url` into `folder` (kept if its md5 already matches) and return the file.

    Raises ConnectionError naming the URL and the manual route when the network fails, and
    ValueError when the received bytes do not have the expected md5 (the file is deleted).
    """
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(urlparse(url).path).name
    present = file_md5(target) if target.is_file() else None
    if present == md5:
        return target
    # a copy put there by hand that is incomplete or another file: say so if we cannot fetch
    replace = (
        f" The {target.name} there now has md5 {present}, not {md5}: it is incomplete or "
        "another file; replace it."
        if present is not None
        else ""
    )
    digest = hashlib.md5(usedforsecurity=False)
    # the file replaces `target` only once the whole of it has the right md5; only the fetch
    # is the network's fault (a failing fsync or rename below is the disk's, raised as it is)
    with replaced(target) as partial:
        try:
            with (
                urllib.request.urlopen(url, timeout=timeout_s) as response,
                partial.open("wb") as f,
            ):
                while chunk := response.read(CHUNK):
                    digest.update(chunk)
                    f.write(chunk)
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as error:
            raise ConnectionError(
                f"could not download {url} ({getattr(error, 'reason', error)}); this machine may "
                f"be offline. Fetch the file on a connected machine, copy it to {target} and run "
                "the same command again: it checks the md5 and extracts it." + replace
            ) from error
        if digest.hexdigest() != md5:
            raise ValueError(
                f"{url} arrived with md5 {digest.hexdigest()}, expected {md5}: the download is "
                "incomplete or the file changed upstream; run the command again"
            )
    return target


def extract(archive: Path, folder: Path) -> None:
    """Extract a tar archive into `folder`, refusing members that would land outside it."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
    except (tarfile.TarError, OSError) as error:
        raise ValueError(
            f"cannot extract {archive} ({error}); delete it and download again"
        ) from error
