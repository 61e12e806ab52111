"""physai_ros.install_paths: the share directory for each kind of install, decided by where the
imported package lives. Fake prefixes in tmp_path; the ament index is the real
ament_index_python reading AMENT_PREFIX_PATH."""
import sys
from pathlib import Path

import pytest

from physai_ros import install_paths
from physai_ros.install_paths import InstallLayoutError, install_layout, resolve_package_url

REPO = Path(__file__).resolve().parents[2]


def _site_package(prefix: Path) -> Path:
    pkg = prefix / "lib" / "python3.11" / "site-packages" / "physai_ros"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    return pkg


def _share(prefix: Path, marker: bool) -> Path:
    share = prefix / "share" / "physai_ros"
    (share / "config").mkdir(parents=True)
    (share / "config" / "fleet.yaml").write_text("robots: []\n")
    if marker:
        idx = prefix / "share" / "ament_index" / "resource_index" / "packages"
        idx.mkdir(parents=True)
        (idx / "physai_ros").write_text("")
    return share


def test_source_checkout_is_editable_and_its_root_is_the_share_dir():
    layout = install_layout()
    assert layout.kind == "editable"
    assert layout.share_dir == REPO and layout.package_dir == REPO / "physai_ros"
    assert install_paths.default_fleet_file() == REPO / "config" / "fleet.yaml"


def test_colcon_install_is_found_through_the_ament_index(tmp_path, monkeypatch):
    prefix = tmp_path / "install" / "physai_ros"
    pkg = _site_package(prefix)
    share = _share(prefix, marker=True)
    # A pip-style share under sys.prefix must not win over the ament index.
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("AMENT_PREFIX_PATH", f"{tmp_path / 'other'}:{prefix}")
    layout = install_layout(pkg)
    assert (layout.kind, layout.share_dir) == ("ament", share)


def test_pip_install_uses_sys_prefix_share(tmp_path, monkeypatch):
    prefix = tmp_path / "venv"
    pkg = _site_package(prefix)
    share = _share(prefix, marker=False)
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    assert install_layout(pkg) == install_paths.InstallLayout("pip", pkg, share)


def test_no_share_dir_anywhere_says_where_it_looked_and_what_to_do(tmp_path, monkeypatch):
    pkg = _site_package(tmp_path / "install" / "physai_ros")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "nothing"))
    with pytest.raises(InstallLayoutError) as err:
        install_layout(pkg)
    msg = str(err.value)
    assert str(pkg) in msg and "AMENT_PREFIX_PATH=" in msg and "source install/setup.bash" in msg


def test_a_checkout_look_alike_without_our_package_xml_is_not_editable(tmp_path, monkeypatch):
    root = tmp_path / "src"
    pkg = root / "physai_ros"
    pkg.mkdir(parents=True)
    (root / "setup.py").write_text("")
    (root / "package.xml").write_text("<package><name>other_pkg</name></package>")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    with pytest.raises(InstallLayoutError):
        install_layout(pkg)


def test_package_urls_assets_from_the_package_config_from_share():
    assert resolve_package_url("package://physai_ros/assets/tokenizer.json") == \
        REPO / "physai_ros" / "assets" / "tokenizer.json"
    assert resolve_package_url("package://physai_ros/config/fastdds_shm.xml") == \
        REPO / "config" / "fastdds_shm.xml"
    with pytest.raises(ValueError, match="not a package://physai_ros/ URL"):
        resolve_package_url("package://other/x")
