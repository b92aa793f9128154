"""The Azure transport, by concern (kept as one import path for code written against rxhubs 0.1).

* :mod:`rxhubs.transport._hub`: :class:`EventHub`, the hub over azure-eventhub's aio clients;
* :mod:`rxhubs.transport._receiver`: :class:`AzurePartitionReceiver`, the pull receiver;
* :mod:`rxhubs.transport._convert`: received ``EventData`` -> :class:`~rxhubs.Event`;
* :mod:`rxhubs.transport._errors`: SDK exceptions -> the rxhubs exception tree.
"""

from __future__ import annotations

from rxhubs.transport._convert import SystemProperties, event_from_sdk
from rxhubs.transport._errors import translate_error
from rxhubs.transport._hub import EventHub
from rxhubs.transport._options import CLIENT_OPTIONS
from rxhubs.transport._receiver import AzurePartitionReceiver, forget_delivery_tags, sdk_delivery_tags

__all__ = [
    "CLIENT_OPTIONS",
    "AzurePartitionReceiver",
    "EventHub",
    "SystemProperties",
    "event_from_sdk",
    "forget_delivery_tags",
    "sdk_delivery_tags",
    "translate_error",
]
