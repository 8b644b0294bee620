"""kgen's version, from the installed distribution's metadata.

In the core, not the package's ``__init__``, so that a module below the front door (the
harness records the version in every result, `kgen doctor` prints it) reads it without
importing the root ``kgen`` package; ``kgen.__version__`` is this value.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kgen")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"
