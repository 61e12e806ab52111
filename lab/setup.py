"""physai_lab: what only tests, benchmarks and training use (training our sim policy, closed-loop
evaluation in simulated time, the trace-driven fleet simulator, scripted pipeline backends, stream
tracing, op counting). It imports physai_ros; physai_ros never imports it, and a fleet's install
(pip or colcon) does not carry it. `make setup` installs it, editable, into the development venv."""
from setuptools import find_packages, setup

setup(
    name="physai_lab",
    version="0.1.0",
    packages=find_packages(include=["physai_lab", "physai_lab.*"]),
    python_requires=">=3.10",
    description="Training, evaluation and simulation tools for physai_ros (development only).",
    license="Apache-2.0",
)
