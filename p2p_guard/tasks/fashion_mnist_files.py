"""Where the ``fashion-mnist`` task's four IDX files are, and whether they are there; imports no torch.

:mod:`p2p_guard.tasks.fashion_mnist` reads the files with these lookups, and the CLI calls :func:`check_files`
before torch is imported, so a missing directory or file is reported in a fraction of a second (the full
header and payload checks of the files still run, later, when the task reads them).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR_HINT", "DEFAULT_DATA_DIR", "FILES", "check_data_dir", "check_files", "find_file"]

DEFAULT_DATA_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` installs the IDX files."""

FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
"""Base names of the four IDX files (each may also carry a ``.gz`` suffix)."""

DATA_DIR_HINT = "--task fashion-mnist:data_dir=DIR"
"""How the messages below say to name another folder; a command that takes it otherwise (``bench robustness
--data-dir``) puts its own flag in its place."""


def check_data_dir(data_dir: Path) -> None:
    """Fail unless ``data_dir`` is a directory.

    Raises:
        FileNotFoundError: naming the directory and how to get the files.
    """
    if not data_dir.is_dir():
        raise FileNotFoundError(
            f"fashion-mnist: directory {data_dir} does not exist; install the Debian package "
            f"(apt-get install dataset-fashion-mnist), or pass {DATA_DIR_HINT}"
        )


def find_file(data_dir: Path, base: str) -> Path:
    """The file ``base`` or ``base.gz`` in ``data_dir`` (the raw one first).

    Raises:
        FileNotFoundError: if neither is a file there (the message says how to get them).
    """
    for name in (base, base + ".gz"):
        candidate = data_dir / name
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"fashion-mnist: {base}[.gz] not found in {data_dir}; install the Debian package "
        f"(apt-get install dataset-fashion-mnist), which holds the four IDX files ({', '.join(FILES.values())}), "
        f"or pass {DATA_DIR_HINT}"
    )


def check_files(data_dir: Path | None = None) -> None:
    """Fail unless ``data_dir`` (None: :data:`DEFAULT_DATA_DIR`, read at call time) holds the four files.

    Only that they exist; their contents are checked when the task reads them.

    Raises:
        FileNotFoundError: naming the missing directory or the first missing file.
    """
    data_dir = DEFAULT_DATA_DIR if data_dir is None else data_dir
    check_data_dir(data_dir)
    for base in FILES.values():
        find_file(data_dir, base)
