"""Build hook for the compiled extensions; all other metadata lives in pyproject.toml.

processor/core/_avro_fast.pyx (the Avro codec), processor/sources/_redo_scan.pyx (the SQL_REDO
scanner), processor/kafka/_rdkafka_producer.pyx (the outputs' producer on librdkafka's C API) and
processor/kafka/_rdkafka_fetch.pyx (the raw topic's records from librdkafka's fetch queues) are
compiled with Cython when it is available (the build system requires it). All are optional: without
Cython or a C compiler the package installs anyway, processor.core.codec runs on fastavro alone, the
SQL_REDO parser on its pure-Python scanner (processor/sources/redo_scan.py), the outputs on
confluent-kafka's Producer and the input on its Consumer.
"""

from pathlib import Path

from setuptools import Extension, setup

PYX = {
    "processor.core._avro_fast": Path("processor/core/_avro_fast.pyx"),
    "processor.sources._redo_scan": Path("processor/sources/_redo_scan.pyx"),
    "processor.kafka._rdkafka_producer": Path("processor/kafka/_rdkafka_producer.pyx"),
    "processor.kafka._rdkafka_fetch": Path("processor/kafka/_rdkafka_fetch.pyx"),
}


def ext_modules() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        cythonize = None
    sources, generated = [], []
    for name, pyx in PYX.items():
        c_file = pyx.with_suffix(".c")  # generated; an sdist carries it
        if cythonize is not None and pyx.exists():
            sources.append(Extension(name, [str(pyx)], optional=True))
        elif c_file.exists():
            # Without Cython the generated C is compiled as it is: refuse one older than its sources
            # (an edited .pyx or .pxi would otherwise be silently ignored).
            newer = [
                p for p in (pyx, *pyx.parent.glob("*.pxi")) if p.exists() and p.stat().st_mtime > c_file.stat().st_mtime
            ]
            if newer:
                raise SystemExit(f"{c_file} is older than {newer[0]}: install Cython>=3 to regenerate it")
            generated.append(Extension(name, [str(c_file)], optional=True))
    if not sources:
        return generated
    return generated + cythonize(sources, compiler_directives={"language_level": "3"}, quiet=True)


# The sources ride in the sdist (MANIFEST.in) but not in the wheel.
setup(
    ext_modules=ext_modules(),
    exclude_package_data={
        "processor.core": ["_avro_fast.pyx", "_avro_fast.c", "*.pxi"],
        "processor.sources": ["_redo_scan.pyx", "_redo_scan.c"],
        "processor.kafka": [
            "_rdkafka_producer.pyx",
            "_rdkafka_producer.c",
            "_rdkafka_fetch.pyx",
            "_rdkafka_fetch.c",
            "*.pxi",
        ],
    },
)
