"""The errors of the frame reader (:mod:`rxhubs.transport._frames`), shared by its Python and compiled builds."""

from rxhubs.errors import TransportError

__all__ = ["FrameError", "Unsupported"]


class FrameError(TransportError):
    """Bytes from the service that are not valid AMQP frames (truncated inside a frame, or malformed).

    Retriable, as any broken connection is: the receive reconnects from its last handed-out event, so nothing is
    lost, and only that partition's receive is affected.

    Example:
        >>> FrameError("a frame size of 3 bytes").retriable
        True
    """


class Unsupported(Exception):  # noqa: N818 - internal signal, never raised out of the transport
    """A frame the fast reader leaves to the SDK's own decoder (it is valid AMQP, or pyamqp decides it is not)."""
