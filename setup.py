"""Build hook for the compiled Avro codec; all other metadata lives in pyproject.toml.

processor/core/_avro_fast.pyx is compiled with Cython when it is available (the build system
requires it). The extension is optional: without Cython or a C compiler the package installs
anyway and processor.core.codec runs on fastavro alone.
"""

from pathlib import Path

from setuptools import Extension, setup

PYX = Path("processor/core/_avro_fast.pyx")


def ext_modules() -> list:
    c_file = PYX.with_suffix(".c")  # generated; an sdist carries it
    try:
        from Cython.Build import cythonize
    except ImportError:
        cythonize = None
    if cythonize is None or not PYX.exists():
        return [Extension("processor.core._avro_fast", [str(c_file)], optional=True)] if c_file.exists() else []
    return cythonize(
        [Extension("processor.core._avro_fast", [str(PYX)], optional=True)],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )


# The sources ride in the sdist (MANIFEST.in) but not in the wheel.
setup(ext_modules=ext_modules(), exclude_package_data={"processor.core": ["_avro_fast.pyx", "_avro_fast.c", "*.pxi"]})
