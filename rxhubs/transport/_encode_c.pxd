# C types for the compiled build of _encode_py.py (compiled as _encode_c: one source, two builds).
# Cython reads these declarations beside the Python source ("pure Python mode"); the Python build ignores them.
cimport cython


cpdef Py_ssize_t section_overhead(Py_ssize_t size) noexcept
cdef bytes _data(Py_ssize_t size)
@cython.locals(n=Py_ssize_t)
cdef bytes _string(bytes value, bytes small, bytes large)
cdef bytes _uint(unsigned long long value)
cdef bytes _value(object value)
@cython.locals(body=bytes, n=Py_ssize_t)
cdef bytes _map(list items, Py_ssize_t count)
@cython.locals(items=list)
cdef bytes _properties(object properties)
cdef bytes _prefix(object key)
@cython.locals(fields=bytes, n=Py_ssize_t, perf=bytes)
cdef bytes _head(Py_ssize_t size, unsigned int channel, unsigned long long handle, unsigned long long delivery_id,
                 unsigned long long tag, unsigned long long fmt, bint more)
cdef Py_ssize_t _overhead(unsigned int channel, unsigned long long handle, unsigned long long delivery_id,
                          unsigned long long tag, unsigned long long fmt) except -1
@cython.locals(room=Py_ssize_t, start=Py_ssize_t)
cdef _frames(list out, list pieces, Py_ssize_t size, unsigned int channel, unsigned long long handle,
             unsigned long long delivery_id, unsigned long long tag, unsigned long long fmt, Py_ssize_t max_frame)


cpdef tuple batch_frames(list events, Py_ssize_t start, object key, Py_ssize_t max_message, Py_ssize_t max_frame,
                         unsigned int channel, unsigned long long handle, unsigned long long delivery_id,
                         unsigned long long tag, Py_ssize_t max_deliveries)
cpdef tuple batch_frames_columns(list bodies, object properties, Py_ssize_t start, object key,
                                 Py_ssize_t max_message, Py_ssize_t max_frame, unsigned int channel,
                                 unsigned long long handle, unsigned long long delivery_id, unsigned long long tag,
                                 Py_ssize_t max_deliveries)
@cython.locals(prefix=bytes, base=Py_ssize_t, out=list, ends=list, n=Py_ssize_t, i=Py_ssize_t, last_section=bytes,
               mask="unsigned long long", pieces=list, size=Py_ssize_t, first=Py_ssize_t, per_event=bint,
               length=Py_ssize_t, grown=Py_ssize_t, number=Py_ssize_t)
cdef tuple _batch(list items, object properties, bint columns, Py_ssize_t start, object key, Py_ssize_t max_message,
                  Py_ssize_t max_frame, unsigned int channel, unsigned long long handle,
                  unsigned long long delivery_id, unsigned long long tag, Py_ssize_t max_deliveries)


# The SHA-256 of the source this build was compiled from: setup.py defines the C macro per compiled module
# (rxhubs/_extensions.py checks it at import; a stale build is not used).
cdef extern from *:
    """
    #ifndef RXHUBS_SOURCE_SHA256
    #define RXHUBS_SOURCE_SHA256 ""
    #endif
    """
    const char* RXHUBS_SOURCE_SHA256
