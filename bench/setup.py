"""physai_bench: the benchmark suite's library (results files, GPU-scale profiles, the factory and
multi-agent simulators, roofline models). The scripts beside it in bench/ are its entry points, one
per question a user asks; `make setup` installs the library, editable, into the development venv."""
from setuptools import find_packages, setup

setup(
    name="physai_bench",
    version="0.1.0",
    packages=find_packages(include=["physai_bench", "physai_bench.*"]),
    python_requires=">=3.10",
    description="The benchmark suite's library for physai_ros (development only).",
    license="Apache-2.0",
)
