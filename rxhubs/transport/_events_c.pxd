# C types for the compiled build of _events_py.py (compiled as _events_c: one source, two builds).
# Cython reads these declarations beside the Python source ("pure Python mode"); the Python build ignores them.
cimport cython

cdef bint _COMPILED


@cython.locals(out=list, one=bint)
cpdef list received_messages(list messages)


# An event can never be part of a reference cycle (see the module docstring): the collector need not visit it.
cdef extern from *:
    """
    static CYTHON_INLINE void rxhubs_untrack(PyObject *o) { PyObject_GC_UnTrack(o); }
    """
    void rxhubs_untrack(object o)


# The SHA-256 of the source this build was compiled from: setup.py defines the C macro per compiled module
# (rxhubs/_extensions.py checks it at import; a stale build is not used).
cdef extern from *:
    """
    #ifndef RXHUBS_SOURCE_SHA256
    #define RXHUBS_SOURCE_SHA256 ""
    #endif
    """
    const char* RXHUBS_SOURCE_SHA256
