"""A DuckDB connection that reads Iceberg metadata, its extensions loaded from their PyPI packages.

DuckDB downloads extensions at run time by default; the packages `duckdb-extension-avro` and
`duckdb-extension-iceberg` (built for one DuckDB version) ship them, so machines without that access read too.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any


def duckdb_iceberg_connection() -> Any:
    """A new DuckDB connection with the avro and iceberg extensions loaded (ImportError when not installed)."""
    import duckdb

    con = duckdb.connect()
    for name in ("avro", "iceberg"):  # iceberg reads its manifests with avro
        package = importlib.import_module(f"duckdb_extension_{name}")
        folder = Path(str(package.__file__)).parent / "extensions" / f"v{duckdb.__version__}"
        con.sql(f"LOAD '{folder / f'{name}.duckdb_extension'}'")
    return con
