"""Packs shmenv_mujoco/libmujoco_locomotion.so, built beforehand by python/build_wheel.sh
(examples/c/build_mujoco.sh), into a wheel tagged for any Python 3 on this platform, which
requires the MuJoCo build the library links (SHMENV_MUJOCO_REQUIREMENT, e.g.
``mujoco-core==4.0.0``)."""

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REQUIREMENT = os.environ.get("SHMENV_MUJOCO_REQUIREMENT")
if (
    not (HERE / "shmenv_mujoco" / "libmujoco_locomotion.so").is_file()
    or not REQUIREMENT
):
    raise SystemExit(
        "shmenv-mujoco: shmenv_mujoco/libmujoco_locomotion.so or SHMENV_MUJOCO_REQUIREMENT is missing; build "
        "the wheels with `bash python/build_wheel.sh` in a clone of shmenv, which compiles the library "
        "(examples/c/build_mujoco.sh) and names the MuJoCo it links before packing it"
    )


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: a native library that does not use Python's C API."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


class BinaryDistribution(Distribution):
    """A platform wheel (platlib): the package carries a shared library."""

    def has_ext_modules(self):
        return True


setup(
    install_requires=["shmenv>=0.1", "gymnasium>=1.0", REQUIREMENT],
    cmdclass={"bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
)
