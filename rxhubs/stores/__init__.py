"""Checkpoint stores: ownership and checkpoints for consumer groups, behind one contract.

See :class:`CheckpointStore` for the contract every store keeps.
"""

from __future__ import annotations

from rxhubs.stores._contract import CheckpointStore

__all__ = ["CheckpointStore"]
