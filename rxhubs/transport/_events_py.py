"""Received pyamqp messages to :class:`~rxhubs.Event` s: the receive path's per-event wrapping, one source, two builds.

As :mod:`rxhubs.transport._frames_py`, this module runs as plain Python, and ``_events_c.py`` (a link to it) is
compiled by Cython with the C types of ``_events_c.pxd``. :func:`received_messages` wraps each message in the lazy
:class:`~rxhubs.transport._convert_messages.ReceivedMessage` (or :class:`ReceivedAnnotations` for a plain one):
body and sequence number set at once, every other field decoded on first read.

The compiled build also takes each event out of the garbage collector's care (``PyObject_GC_UnTrack``, as CPython
does for tuples and dicts that hold only atomic values): an event refers only to what was decoded for it (bytes,
ints, text, times, dicts of those) and nothing it refers to refers back to it, so it can never be part of a
reference cycle, and reference counting frees it. Without that, every event a consumer holds (its prefetch, a
batch in flight, a window) is visited by each collection of its generation: on the native receive path the
collector's full collections cost about 2.5 us of CPU per 1 KB event, a fifth of ``consume``'s work
(``docs/performance.md``). A user who stores an event inside its own ``properties`` dict makes a cycle the
collector no longer sees: that event is then not freed (do not).
"""

from typing import Any

from rxhubs.transport._convert import _SEQ, _SET_DATA
from rxhubs.transport._convert_messages import _SET_BODY, _SET_SEQUENCE_NUMBER, ReceivedAnnotations, ReceivedMessage
from rxhubs.transport._frame_errors import FrameError

__all__ = ["SOURCE_SHA256", "FrameError", "received_messages"]

try:  # the compiled build: the hash setup.py compiled in (a C macro, declared in the .pxd); rxhubs/_extensions.py
    SOURCE_SHA256: str = RXHUBS_SOURCE_SHA256.decode("ascii")  # type: ignore[name-defined]
    _COMPILED = True
except NameError:  # the pure-Python build has none
    SOURCE_SHA256 = ""
    _COMPILED = False


_NO_POSITION = (
    "a received event has no sequence number: its message annotations are missing or unreadable (a damaged"
    " frame?); the partition reconnects from its last event"
)


def received_messages(messages: list[Any]) -> list[Any]:
    """Wrap received AMQP messages: one :class:`ReceivedMessage` each, lazy but for two fields.

    The body of a one-data-section message (the same bytes object) and an int sequence number are set at once:
    every pipeline reads both (the receiver itself reads sequence numbers), and setting them costs less than
    the first read of a lazy field. Everything else is decoded on first read, as is an unusual body or sequence
    number. A plain message (see :class:`ReceivedAnnotations`) keeps only its annotations.

    A message without a sequence number among its annotations (every event the service delivers has one; a
    damaged section code makes readers skip the whole section, pyamqp and rxhubs' alike) raises
    :class:`~rxhubs.transport._frame_errors.FrameError`, retriable: the receive reconnects after its last event,
    and nothing downstream ever sees an event with no position (a checkpoint, an offset of ``"None"``, Spark
    columns). Example:

        >>> from azure.eventhub._pyamqp.message import Message
        >>> m = Message(data=[b"hi"], message_annotations={b"x-opt-sequence-number": 7})
        >>> [(type(e).__name__, e.body, e.sequence_number) for e in received_messages([m])]
        [('ReceivedAnnotations', b'hi', 7)]
    """
    new = object.__new__
    out: list[Any] = []
    event: Any
    for message in messages:
        data = message.data
        one = data.__class__ is list and len(data) == 1
        annotations = message.message_annotations
        sequence_number = annotations.get(_SEQ) if annotations.__class__ is dict else None
        if one and sequence_number.__class__ is int and message.properties is None and not (
            message.application_properties
        ):
            event = new(ReceivedAnnotations)  # the message itself can go (see ReceivedAnnotations)
            _SET_DATA(event, annotations)
            _SET_BODY(event, data[0])
            _SET_SEQUENCE_NUMBER(event, sequence_number)
        else:
            event = new(ReceivedMessage)
            _SET_DATA(event, message)
            if one:
                _SET_BODY(event, data[0])
            if sequence_number.__class__ is int:
                _SET_SEQUENCE_NUMBER(event, sequence_number)
            elif sequence_number is None:  # no position: it could only be checkpointed wrong (or fail later)
                raise FrameError(_NO_POSITION)
        if _COMPILED:
            rxhubs_untrack(event)  # type: ignore[name-defined]  # noqa: F821  (a C function of the .pxd)
        out.append(event)
    return out
