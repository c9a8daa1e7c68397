"""Hand-written data tables (tab-separated, ``#`` comment lines, one header line), read with
errors that name the file and line."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path


def tsv_rows(
    file: Path, headers: Sequence[tuple[str, ...]]
) -> Iterator[tuple[int, tuple[str, ...], list[str]]]:
    """(line number, header, columns) of every data row of ``file``.

    Blank lines and lines starting with ``#`` are skipped; the first other line must be one of
    ``headers`` and every row after it must have as many columns. ValueError names
    ``file:line`` otherwise.
    """
    header: tuple[str, ...] | None = None
    for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if header is None:
            if tuple(cols) not in headers:
                wanted = " or ".join("<TAB>".join(h) for h in headers)
                raise ValueError(f"{file}:{lineno}: header must be '{wanted}', got {cols}")
            header = tuple(cols)
            continue
        if len(cols) != len(header):
            raise ValueError(f"{file}:{lineno}: expected {len(header)} columns, got {len(cols)}")
        yield lineno, header, cols
