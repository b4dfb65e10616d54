"""Where reinstalled and installed wheels may come from, as the user said it (passed to uv/pip).

uv's own names (``--index-url``, ``--extra-index-url``, ``--find-links``, ``--offline``), so a
user's habits carry over; a plan keeps them (``Options``), so a saved plan applied later on
another node fetches from where it was planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class Sources:
    """``--offline``, ``--find-links``, ``--index-url``, ``--extra-index-url``, ``--no-fetch``:
    the wheel sources a plan may use."""

    offline: bool = False
    find_links: tuple[str, ...] = ()
    fetch: bool = True
    """Stage (download) reinstalled and installed wheels while planning; off: ``--no-fetch``."""
    index_url: str | None = None
    """The index in place of PyPI (``--index-url``, ``$UV_INDEX_URL``, ``$UV_DEFAULT_INDEX``)."""
    extra_index_urls: tuple[str, ...] = ()
    """Indexes searched besides it (``--extra-index-url``, ``$UV_EXTRA_INDEX_URL``)."""
    progress_fd: int | None = field(default=None, compare=False)
    """Where uv's own download progress is shown while it stages wheels (the user's
    terminal); None: its output is captured. How to fetch, never where from: not saved."""

    def cli_args(self) -> list[str]:
        """The sources as cudafix's (and uv's) options, for a command printed to run next."""
        args = ["--offline"] if self.offline else []
        args += ["--index-url", self.index_url] if self.index_url else []
        args += [w for url in self.extra_index_urls for w in ("--extra-index-url", url)]
        return args + [w for link in self.find_links for w in ("--find-links", link)]

    def installer_args(self, *, pip: bool = False) -> list[str]:
        """The same sources as uv's (or pip's, which has no ``--offline``) options, each value
        joined to its option (``--find-links=DIR``: a value starting with ``-`` is never read
        as an option); offline with local wheels means no index at all."""
        args = ["--offline"] if self.offline and not pip else []
        args += [f"--index-url={self.index_url}"] if self.index_url else []
        args += [f"--extra-index-url={url}" for url in self.extra_index_urls]
        args += [f"--find-links={link}" for link in self.find_links]
        if self.offline and (self.find_links or pip):
            args.append("--no-index")
        return args

    def described(self) -> list[str]:
        """Each source tried, in the order uv tries them, in words a user can act on."""
        said = [f"find-links {link}" for link in self.find_links]
        if self.offline:
            return [*said, "uv's cache (offline)"]
        said.append(f"the index {self.index_url or PYPI}")
        return said + [f"the extra index {url}" for url in self.extra_index_urls]


def is_url(link: str) -> bool:
    """A ``--find-links`` value that names a page (``https://``, ``file://``), not a directory."""
    return "://" in link


def link_path(link: str, base: Path = Path()) -> str:
    """A ``--find-links`` value as a plan keeps it: a URL as is, a directory absolute
    (relative to ``base``, else to the working directory, as uv reads it)."""
    return link if is_url(link) else str((base / link).absolute())
