"""Build of the optional compiled frame readers and the send path's encoder (everything else is in pyproject.toml).

``rxhubs/transport/_frames_c.py`` is a link to ``_frames_py.py``: Cython compiles that one source with the C
types of ``_frames_c.pxd`` into the extension ``rxhubs.transport._frames_c``. The send path's encoder
(``rxhubs/transport/_encode_py.py``, link ``_encode_c.py``) and the Spark source's Arrow builder
(``rxhubs/spark/_arrow_values_py.py`` and ``_arrow_frames_py.py``, links ``_arrow_values_c.py`` and
``_arrow_frames_c.py``) are built the same way, types in their ``.pxd``. The extensions are optional: where
Cython or a C compiler is missing, or with ``RXHUBS_NO_EXTENSIONS=1``, the build leaves it out and rxhubs runs
its pure-Python receive path (``docs/performance.md``). ``RXHUBS_REQUIRE_EXTENSIONS=1`` makes a failed build an
error instead (CI).

Each compiled module is built with the C macro ``RXHUBS_SOURCE_SHA256``: the SHA-256 of the source it was compiled
from. At import, ``rxhubs/_extensions.py`` compares it with the source beside the build; a stale build (an older
source) logs a WARNING and is not used. ``CONTRIBUTING.md`` ("Compiled modules") says how to add one.
"""

import hashlib
import os
from pathlib import Path

from setuptools import Extension, setup


def _compiled(name: str, required: bool) -> Extension:
    """The extension ``name`` (``a.b._x_c``) from its source ``a/b/_x_c.py``, carrying the source's SHA-256."""
    source = name.replace(".", "/") + ".py"
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    return Extension(name, [source], optional=not required, define_macros=[("RXHUBS_SOURCE_SHA256", f'"{digest}"')])


def _extensions() -> list[Extension]:
    if os.environ.get("RXHUBS_NO_EXTENSIONS", "").strip() not in ("", "0"):
        return []
    required = os.environ.get("RXHUBS_REQUIRE_EXTENSIONS", "").strip() not in ("", "0")
    try:
        from Cython.Build import cythonize
    except ImportError:
        if required:
            raise
        return []
    modules = ("rxhubs.transport._frames_c", "rxhubs.transport._events_c", "rxhubs.transport._encode_c",
               "rxhubs.spark._arrow_values_c", "rxhubs.spark._arrow_frames_c")
    compiled = [_compiled(name, required) for name in modules]
    built = cythonize(
        compiled, language_level=3, quiet=True,
        # types come from the .pxd only (the annotations are for mypy); bounds stay checked
        compiler_directives={"annotation_typing": False, "wraparound": False, "cdivision": True},
    )
    for extension in built:  # cythonize makes new Extension objects and drops `optional`
        extension.optional = not required
    return built


setup(ext_modules=_extensions())
