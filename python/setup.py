"""Builds libsluice.so with Go when `make python` has not put it in place."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(HERE, "sluice", "libsluice.so")


class BuildWithLib(build_py):
    def run(self):
        if not os.path.exists(LIB):
            repo = os.path.dirname(HERE)
            subprocess.check_call(
                ["go", "build", "-buildmode=c-shared", "-o", LIB, "./cmd/libsluice"], cwd=repo
            )
        super().run()


setup(cmdclass={"build_py": BuildWithLib})
