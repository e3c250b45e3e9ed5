"""What the two scans share: finding files, reading them on a thread pool, reporting progress.

The image scan (:mod:`dataorder.diffusion.scan.images`) and the video scan
(:mod:`dataorder.diffusion.scan.videos`) differ only in how one file is read. Both list a folder
recursively in sorted order (so sample indices do not depend on the file system), read files in
chunks on a thread pool, keep the input order, and report progress through a rich bar, else a
tqdm bar, a callback, or not at all. No torch, no Pillow, no PyAV here.

Only regular files are opened (NOTE [ Regular files only ]): a FIFO, a socket, a device, a
directory or a broken symbolic link named like a media file is that path's error
(:class:`NotARegularFileError`, "skipped without opening it"), never the scan's, and never a
hang. A symbolic link to a regular file is followed and read like the file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypeVar

from dataorder._validate import check_bool, check_int, fail

__all__ = [
    "NotARegularFileError",
    "Progress",
    "Reporter",
    "check_regular_file",
    "extensions_arg",
    "list_files",
    "path_arg",
    "read_files",
    "scan_paths",
    "split_results",
    "workers_arg",
]

#: ``progress=`` of a scan: True for a bar on stderr, False for none, or ``callback(done, total)``.
Progress = bool | Callable[[int, int], None]

R = TypeVar("R")


def path_arg(name: str, value: object) -> str:
    """``value`` as a str path, or a TypeError naming ``name`` (``open(0)`` would read stdin)."""
    if not isinstance(value, str | os.PathLike) or not isinstance(os.fspath(value), str):
        fail(name, "a path (a str or os.PathLike)", value, TypeError)
    return os.fspath(value)


def extensions_arg(extensions: object) -> tuple[str, ...]:
    """File endings as a lower-case tuple, or a TypeError naming ``extensions``."""
    if isinstance(extensions, str) or not isinstance(extensions, Iterable):
        fail(
            "extensions",
            "an iterable of file endings such as ('.jpg', '.png')",
            extensions,
            TypeError,
        )
    ends = tuple(extensions)
    if not all(isinstance(e, str) for e in ends):
        fail("extensions", "an iterable of str", extensions, TypeError)
    return tuple(e.lower() for e in ends)


# NOTE [ Regular files only ]
# A scan opens a file only if os.stat says it is a regular file. Opening a FIFO blocks until a
# writer appears (forever, in a dataset folder), reading /dev/zero or /dev/urandom never ends, and
# opening some devices has side effects (a tape rewinds); a socket or a directory cannot be read
# at all. Such a path, and a symbolic link whose target is missing, is reported as that path's
# error with what it is, and never opened. Symbolic links are followed (os.stat, not os.lstat):
# datasets are often farms of links to files elsewhere, and a link to a regular file is read like
# the file. The check and the open are two steps: a file replaced by a FIFO between them could
# still block; scans read datasets, which are not rewritten under the scan.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotARegularFileError(OSError):
    """A path a scan skips without opening it: not a regular file, or a broken symbolic link.

    See NOTE [ Regular files only ]; the message says what the path is.
    """


def check_regular_file(path: str) -> None:
    """Return if ``path`` is a regular file (a symbolic link to one included), else raise.

    Only ``os.stat`` is called: the file is not opened (NOTE [ Regular files only ]).

    Raises:
        NotARegularFileError: If ``path`` is a FIFO, socket, device or directory (or a link to
            one), or a symbolic link whose target does not exist.
        OSError: If ``path`` does not exist or cannot be examined (e.g. a link loop).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not os.path.islink(path):
            raise
        raise NotARegularFileError(
            f"a broken symbolic link (its target {os.readlink(path)!r} does not exist); "
            "skipped without opening it"
        ) from None
    if stat.S_ISREG(mode):
        return
    what = next((name for test, name in _KINDS if test(mode)), f"not a file (mode {mode:o})")
    if os.path.islink(path):
        what = f"a symbolic link to {what}"
    raise NotARegularFileError(f"{what}, not a regular file; skipped without opening it")


def list_files(directory: str | os.PathLike[str], extensions: Iterable[str]) -> list[str]:
    """Every file under ``directory`` (recursively) whose name ends in one of ``extensions``.

    Endings are compared case-insensitively. The result is sorted, so a dataset's order (its
    sample indices) does not depend on the file system's listing order. Every kind of entry with
    such a name is listed except a directory, which is walked into (a folder's name says
    nothing of its files): the readers then skip what is not a regular file, with the reason
    (NOTE [ Regular files only ]). Symbolic links to directories are not walked into (no link
    loops); one named like a media file is listed, and so reported.

    Raises:
        TypeError: If ``directory`` is not a path or ``extensions`` not an iterable of str.
        ValueError: If ``directory`` is not an existing directory.
    """
    root = path_arg("directory", directory)
    if not os.path.isdir(root):
        fail("directory", "an existing directory", root)
    ends = extensions_arg(extensions)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        found.extend(os.path.join(dirpath, f) for f in filenames if f.lower().endswith(ends))
        for d in dirnames:
            if d.lower().endswith(ends) and os.path.islink(os.path.join(dirpath, d)):
                found.append(os.path.join(dirpath, d))
    found.sort()
    return found


def scan_paths(paths_or_dir: object, extensions: Iterable[str]) -> list[str]:
    """The files a scan reads: a directory's (:func:`list_files`) or the given ones, in order.

    Raises:
        TypeError: If ``paths_or_dir`` is neither a path nor an iterable of paths.
        ValueError: If it is a path that is not a directory.
    """
    if isinstance(paths_or_dir, str | os.PathLike):
        root = path_arg("paths_or_dir", paths_or_dir)
        if not os.path.isdir(root):
            fail("paths_or_dir", "a directory or an iterable of paths", root)
        return list_files(root, extensions)
    if isinstance(paths_or_dir, bytes) or not isinstance(paths_or_dir, Iterable):
        fail("paths_or_dir", "a directory or an iterable of paths", paths_or_dir, TypeError)
    return [path_arg(f"paths_or_dir[{i}]", p) for i, p in enumerate(paths_or_dir)]


def workers_arg(workers: object) -> int:
    """Reader threads: None means ``min(32, 4 * os.cpu_count())``.

    More threads than cores, because on network file systems each header read mostly waits (and
    Pillow's parsers and FFmpeg's probe release or barely hold the GIL).
    """
    default = min(32, 4 * (os.cpu_count() or 1))
    return check_int("workers", default if workers is None else workers, min_value=1)


class Reporter:
    """Progress through a rich bar, else a tqdm bar (if installed), a callback, or nothing."""

    def __init__(self, progress: Progress, total: int, label: str) -> None:
        self.total = total
        self.done = 0
        self.callback: Callable[[int, int], None] | None = None
        self.rich: Any = None
        self.tqdm: Any = None
        if callable(progress):
            self.callback = progress
            return
        if not check_bool("progress", progress) or not total:
            return
        try:
            from rich.console import Console
            from rich.progress import Progress as RichProgress
        except ImportError:
            try:
                from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]
            except ImportError:
                return
            self.tqdm = tqdm(total=total, desc=label, unit="file", leave=False)
            return
        self.rich = RichProgress(console=Console(stderr=True), transient=True)
        self.task = self.rich.add_task(label, total=total)
        self.rich.start()

    def advance(self, n: int) -> None:
        """``n`` more files are done: tell the callback or move the bar."""
        self.done += n
        if self.callback is not None:
            self.callback(self.done, self.total)
        if self.rich is not None:
            self.rich.update(self.task, completed=self.done)
        if self.tqdm is not None:
            self.tqdm.update(n)

    def close(self) -> None:
        """Stop the progress bar, if any."""
        if self.rich is not None:
            self.rich.stop()
        if self.tqdm is not None:
            self.tqdm.close()


def read_files(
    paths: Sequence[str],
    read_one: Callable[[str], R],
    *,
    workers: int,
    progress: Progress,
    label: str,
    chunk_range: tuple[int, int],
    fatal: tuple[type[BaseException], ...] = (),
) -> list[R | str]:
    """``read_one`` over ``paths`` on ``workers`` threads; one result per path, in order.

    One file's failure is that file's result, ``"<ExceptionType>: <message>"``, never the
    scan's; an exception of a type in ``fatal`` (e.g. a missing optional dependency) stops the
    scan. Chunks hold about 8 per thread, within ``chunk_range``, so threads finish together;
    ``workers=1`` reads in the calling thread.
    """

    def read_chunk(chunk: Sequence[str]) -> list[R | str]:
        out: list[R | str] = []
        for path in chunk:
            try:
                out.append(read_one(path))
            except fatal:
                raise
            except Exception as exc:  # one file's failure is that file's error, not the scan's
                out.append(f"{type(exc).__name__}: {exc}")
        return out

    reporter = Reporter(progress, len(paths), label)
    lo, hi = chunk_range
    size = max(lo, min(hi, len(paths) // (workers * 8)))
    chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
    results: list[list[R | str]] = [[] for _ in chunks]
    try:
        if workers == 1:
            for i, chunk in enumerate(chunks):
                results[i] = read_chunk(chunk)
                reporter.advance(len(chunk))
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = {pool.submit(read_chunk, c): i for i, c in enumerate(chunks)}
                for future in as_completed(futures):
                    i = futures[future]
                    results[i] = future.result()
                    reporter.advance(len(chunks[i]))
    finally:
        reporter.close()
    return [r for chunk in results for r in chunk]


def split_results(
    paths: Sequence[str], results: Sequence[R | str]
) -> tuple[list[str], list[R], list[tuple[str, str]]]:
    """:func:`read_files`' results as ``(paths read, their values, (path, reason) of the rest)``,
    each in input order."""
    good: list[str] = []
    values: list[R] = []
    errors: list[tuple[str, str]] = []
    for p, r in zip(paths, results, strict=True):
        if isinstance(r, str):
            errors.append((p, r))
        else:
            good.append(p)
            values.append(r)
    return good, values, errors
