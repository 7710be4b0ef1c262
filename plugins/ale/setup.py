"""Packs shmenv_ale/libale_atari.so, built beforehand by python/build_wheel.sh
(examples/cpp/build_ale.sh), into a wheel tagged for any Python 3 on this platform."""

from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
if not (HERE / "shmenv_ale" / "libale_atari.so").is_file():
    raise SystemExit(
        "shmenv-ale: shmenv_ale/libale_atari.so is missing; build the wheels with `bash python/build_wheel.sh` "
        "in a clone of shmenv, which compiles the library (examples/cpp/build_ale.sh) before packing it"
    )


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: a native library that does not use Python's C API."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


class BinaryDistribution(Distribution):
    """A platform wheel (platlib): the package carries a shared library."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"bdist_wheel": PlatformWheel}, distclass=BinaryDistribution)
