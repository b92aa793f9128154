# C types for the compiled build of _framing_py.py (compiled as _framing_c: one source, two builds).
# Cython reads these declarations beside the Python source ("pure Python mode"); the Python build ignores them.
cimport cython

from rxhubs.transport._frames_c cimport _Reader, _be, _decode, decode_message, message_event


cpdef tuple parse(bytes buf, Py_ssize_t channel, object handle, Py_ssize_t start=*)


@cython.locals(r=_Reader, messages=list, tail=Py_ssize_t, tail_end=Py_ssize_t)
cpdef tuple parse_frames(bytes buf, Py_ssize_t channel, object handle, Py_ssize_t start=*)


@cython.locals(r=_Reader, events=list, tail=Py_ssize_t, tail_end=Py_ssize_t)
cpdef tuple parse_events(bytes buf, Py_ssize_t channel, object handle, Py_ssize_t start=*)


@cython.locals(messages=list, view="const unsigned char[:]", n=Py_ssize_t, pos=Py_ssize_t, size="unsigned long long", doff="unsigned int",
               end=Py_ssize_t, frame_channel=Py_ssize_t, body=Py_ssize_t, payload=Py_ssize_t, frames=Py_ssize_t,
               tail=Py_ssize_t, tail_end=Py_ssize_t)
cdef tuple _read(_Reader r, bytes buf, Py_ssize_t channel, object handle, Py_ssize_t start, bint events)


@cython.locals(parts=list, view="const unsigned char[:]", pos=Py_ssize_t, frames=Py_ssize_t, size="unsigned long long",
               doff="unsigned int", stop=Py_ssize_t, body=Py_ssize_t, start=Py_ssize_t, more=bint)
cdef object _gather(_Reader r, bytes buf, Py_ssize_t n, Py_ssize_t payload, Py_ssize_t end, Py_ssize_t channel,
                    object handle, object did)


cdef bint _is_transfer(const unsigned char[:] buf, Py_ssize_t body, Py_ssize_t end) noexcept


@cython.locals(code="unsigned int", count=Py_ssize_t, index=Py_ssize_t, more=bint, leave=bint, payload=Py_ssize_t)
cdef Py_ssize_t _transfer(_Reader r, Py_ssize_t body, Py_ssize_t end, object handle) except? -2



# The SHA-256 of the source this build was compiled from: setup.py defines the C macro per compiled module
# (rxhubs/_extensions.py checks it at import; a stale build is not used).
cdef extern from *:
    """
    #ifndef RXHUBS_SOURCE_SHA256
    #define RXHUBS_SOURCE_SHA256 ""
    #endif
    """
    const char* RXHUBS_SOURCE_SHA256
