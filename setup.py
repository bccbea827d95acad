"""The package list, discovered: each folder that [tool.setuptools].package-dir in pyproject.toml
maps into the tpuedge namespace, with every subpackage found under it. Everything else about
the project is declared in pyproject.toml."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
packages = []
for name, folder in package_dir.items():
    packages += [name, *(f"{name}.{sub}" for sub in find_packages(str(ROOT / folder)))]

setup(packages=sorted(set(packages)))
