"""Builds and installs the ``ballast`` Python package (``ballast.torch``) the Python way:

    /usr/bin/python3 -m pip install --no-build-isolation --no-deps python/

The extension ``ballast.torch._C`` is built by the project's own CMake (the same target
that ``scripts/test`` builds, against the system libtorch, gRPC and OpenBLAS); nothing is
downloaded. ``--no-build-isolation`` lets the build see Debian's setuptools, torch and
pybind11. ``BALLAST_BUILD_DIR`` names the CMake build directory to build in (default:
``build-pip`` at the repository root); an existing, configured one is reused as it is.
On Debian, a system-wide install also needs ``--break-system-packages`` (PEP 668); a
virtual environment made with ``--system-site-packages``, or ``--target DIR``, does not.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent.parent


def version() -> str:
    """The version is written once, in the top-level CMakeLists.txt."""
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(ballast VERSION ([0-9.]+)", text)
    if not match:
        raise RuntimeError("no 'project(ballast VERSION x.y.z' in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = Path(os.environ.get("BALLAST_BUILD_DIR", ROOT / "build-pip")).resolve()
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.check_call([
                "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                "-DCMAKE_BUILD_TYPE=Release", "-DBALLAST_WITH_TORCH=ON",
                f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("BALLAST_BUILD_JOBS", str(min(2, os.cpu_count() or 1)))
        subprocess.check_call(["ninja", "-C", str(build_dir), f"-j{jobs}", "ballast_torch_ext"])
        built = sorted((build_dir / "python" / "ballast" / "torch").glob("_C*.so"))
        if not built:
            raise RuntimeError(f"the build in {build_dir} produced no ballast/torch/_C*.so "
                               f"(is libtorch installed? scripts/setup installs it)")
        destination = Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], destination)


setup(
    name="ballast",
    version=version(),
    description="Straggler control for tensor-parallel training: PyTorch layers",
    packages=["ballast", "ballast.torch"],
    package_dir={"": "."},  # pip runs this with the package folder (python/) as its cwd
    ext_modules=[CMakeExtension("ballast.torch._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
