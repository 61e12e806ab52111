"""ament_python package physai_ros (also a plain pip-installable package).

kernels/ sits at the top level of the repository (the user's layout) and is installed as
physai_ros.kernels, so site-packages never gets a top-level package named "kernels".
"""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "physai_ros"

NODES = {
    "sim_robot": "physai_ros.nodes.sim_robot:main",
    "trajectory_controller": "physai_ros.nodes.trajectory_controller:main",
    "robot_client": "physai_ros.nodes.robot_client:main",
    "policy_server": "physai_ros.nodes.policy_server:main",
    "engine_worker": "physai_ros.nodes.engine_worker:main",
    "diagnostics_aggregator": "physai_ros.nodes.diagnostics_aggregator:main",
    "openpi_gateway": "physai_ros.nodes.openpi_gateway:main",
}

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]) + [f"{PACKAGE}.kernels"],
    package_dir={f"{PACKAGE}.kernels": "kernels"},
    package_data={PACKAGE: ["assets/*", "assets/**/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.json")),
    ],
    python_requires=">=3.10",
    zip_safe=False,
    maintainer="physai_ros maintainers",
    maintainer_email="maintainers@physai-ros.org",
    description="Real-time serving of pi0-class VLA models to fleets of ROS 2 robots.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [f"{name} = {target}" for name, target in NODES.items()]
        + ["physai-fleet = physai_ros.fleet.cli:main"],
    },
)
