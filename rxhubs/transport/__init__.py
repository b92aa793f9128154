"""Transports: the hub and receiver protocols, and the Azure implementation over azure-eventhub."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rxhubs.transport._base import DEFAULT_CONSUMER_GROUP, Hub, PartitionReceiver, ReceiverBase

if TYPE_CHECKING:
    from rxhubs.transport._azure import EventHub

__all__ = ["DEFAULT_CONSUMER_GROUP", "EventHub", "Hub", "PartitionReceiver", "ReceiverBase"]


def __getattr__(name: str) -> Any:
    if name == "EventHub":
        from rxhubs.transport._azure import EventHub

        return EventHub
    raise AttributeError(name)
