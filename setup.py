"""The one compiled part of the package: produce-time validation's record walk
(broker/protocol/_recordwalk.c).  Everything else is declared in pyproject.toml.

The extension is optional: without a C compiler the package installs and the broker uses the
Python walk (broker/protocol/record_walk.py), correct but several times slower per record.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "broker.protocol._recordwalk",
            ["broker/protocol/_recordwalk.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
