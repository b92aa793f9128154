"""Scenarios ``rebalance`` and ``scale``, in virtual time: drivers, the shared world (``_sim``), the official rules."""
