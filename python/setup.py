"""Builds libssmops with CMake (the checkout one level up; the CUDA backend where nvcc is found)
and ships it inside the package, so `pip install --no-build-isolation ./python` works offline
from a fresh clone. SSMOPS_CMAKE_FLAGS adds configure arguments (e.g. -DSSMOPS_CUDA=OFF)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def version():
    text = (ROOT / "include" / "ssmops.h").read_text()
    parts = [re.search(r"#define SSM_VERSION_%s\s+(\d+)" % k, text).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        build = HERE / "build-lib"
        flags = os.environ.get("SSMOPS_CMAKE_FLAGS", "").split()
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"] + flags)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "ssmops", "-j", str(os.cpu_count() or 2)])
        lib = build / "libssmops.so"
        target = Path(self.build_lib) / "ssmops" / "libssmops.so"
        shutil.copyfile(os.path.realpath(lib), target)


setup(version=version(), cmdclass={"build_py": BuildWithLibrary})
