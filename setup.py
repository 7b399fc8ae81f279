"""The compiled parts of the package: produce-time validation's record walk
(broker/protocol/_recordwalk.c) and the analytics source's Avro decoder (analytics/_avrovm.c).
Everything else is declared in pyproject.toml.

Both extensions are optional: without a C compiler the package installs and runs the Python
twin of each (broker/protocol/record_walk.py; the generated decoders of
analytics/avro_codegen.py), correct but several times slower per record.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "broker.protocol._recordwalk",
            ["broker/protocol/_recordwalk.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "analytics._avrovm",
            ["analytics/_avrovm.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
