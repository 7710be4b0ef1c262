"""Compiles src/walk.c into shmenv_walk/_walk*.so (a plain C library: Python never imports
it, shmenv's workers dlopen it) and tags the wheel for any Python 3 on this platform."""

import os

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: the library does not use Python's C API."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


# shmenv_env.h: a copy in include/, or a clone's worker/include through SHMENV_INCLUDE.
include = os.environ.get("SHMENV_INCLUDE", "include")
setup(
    ext_modules=[
        Extension(
            "shmenv_walk._walk",
            ["src/walk.c"],
            include_dirs=[include],
            extra_compile_args=["-std=c99"],
        )
    ],
    cmdclass={"bdist_wheel": PlatformWheel},
)
