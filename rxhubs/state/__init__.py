"""Event time and operator state: windows, keyed state, clocks, and the state committed with checkpoints.

What users import stays where they import it: the operators are ``hops.window`` and ``hops.scan_state``
(:mod:`rxhubs.operators`), the windows, aggregates and clocks are in :mod:`rxhubs.windows`. This room holds
how they work:

* ``_window`` (``hops.window``), ``_window_state`` (its open windows per key, watermark and restore),
  ``_spec`` (window kinds, aggregates, ``WindowBatch`` and ``ScanBatch``), ``_time`` (clocks and the watermark);
* ``_scan_state`` (``hops.scan_state``) and ``_stateful`` (what both stateful operators share: the per-partition
  runner, names, fingerprints, size caps);
* ``_codec`` (``OperatorState``, ``StateDelta``, the versioned encoding) and ``_committed`` (the fold of deltas
  the checkpoint operator commits with each checkpoint). The balancing loop decodes a claimed partition's
  state with ``_codec``, so the room sits below balancing, just above batches.
"""
