"""Tables: exactly once into a table, each partition's position committed inside the data commit.

- :class:`DeltaSink`: a Delta Lake table through the ``deltalake`` package (``pip install 'rxhubs[delta]'``);
  importing this package does not import deltalake.
"""

from __future__ import annotations

from rxhubs.tables._delta import DeltaSink

__all__ = ["DeltaSink"]
