"""Reading the TOML files in ``peers/`` and ``bootstrap/`` (stdlib ``tomllib``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["read_table"]


def read_table(path: str | Path, table: str) -> dict[str, Any]:
    """Return the ``[table]`` section of the TOML file at ``path``.

    Raises:
        ValueError: if the file is missing or unreadable, is not valid UTF-8 TOML, or has no such table (the
            message names the file).
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as e:
        raise ValueError(f"config file {path} does not exist") from e
    except IsADirectoryError as e:
        raise ValueError(f"config file {path} is a directory") from e
    except OSError as e:
        raise ValueError(f"config file {path} cannot be read: {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"config file {path} is not valid TOML: {e}") from e
    except UnicodeDecodeError as e:
        raise ValueError(f"config file {path} is not UTF-8 text: {e.reason}") from e
    section = data.get(table)
    if not isinstance(section, dict):
        raise ValueError(f"config file {path} has no [{table}] table")
    return section
