"""Builds the _mmnpz extension with CMake (Debian's cmake, pybind11 and zlib)."""
import os
import pathlib
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        source = pathlib.Path(__file__).parent.resolve()
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        target_dir = pathlib.Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        subprocess.run(
            ["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
             f"-DPython_EXECUTABLE={sys.executable}", "-DMMNPZ_BUILD_PYTHON=ON",
             "-DMMNPZ_BUILD_TESTS=OFF", "-DMMNPZ_BUILD_EXAMPLES=OFF", "-DMMNPZ_BUILD_TOOLS=OFF"],
            check=True,
        )
        subprocess.run(["cmake", "--build", str(build), "--target", "_mmnpz", "-j",
                        str(os.cpu_count() or 1)], check=True)
        built = next((build / "python" / "mmnpz").glob("_mmnpz*.so"))
        target_dir.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(target_dir / built.name))


setup(ext_modules=[CMakeExtension("mmnpz._mmnpz")], cmdclass={"build_ext": CMakeBuild})
