"""scripts/gpu_wheels.sh, the wheel install that scripts/gpu_check.sh and scripts/gpu_paper_regime.sh share: it
installs the carried wheels this interpreter takes (any ``py3``, or its own version's) and skips a wheel built for
another Python version with a line naming it, so that the GPU check's CPU smoke runs on a Python other than the GPU
machine's 3.12."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _wheel(folder: Path, name: str, tag: str) -> Path:
    """A minimal valid wheel of one module ``name`` (``VALUE = 1``) with the Python tag ``tag``."""
    info = f"{name}-1.0.dist-info"
    files = {f"{name}.py": b"VALUE = 1\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}-none-any\n"
             .encode()}
    digest = {path: base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
              for path, data in files.items()}
    record = "".join(f"{path},sha256={digest[path]},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = folder / f"{name}-1.0-{tag}-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def _install(root: Path, site: Path) -> subprocess.CompletedProcess:
    script = f'. "{ROOT}/scripts/gpu_wheels.sh"; install_gpu_wheels "{site}" gpu_check.sh; echo done'
    return subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PY": sys.executable})


def test_installs_the_wheels_this_python_takes_and_names_the_ones_it_skips(tmp_path: Path) -> None:
    wheels = tmp_path / ".gpu" / "wheels"
    wheels.mkdir(parents=True)
    version = f"{sys.version_info[0]}{sys.version_info[1]}"
    other = "39" if version != "39" else "310"
    _wheel(wheels, "anypy", "py3")
    _wheel(wheels, "bothpy", "py2.py3")
    _wheel(wheels, "thispy", f"py{version}")
    skipped = _wheel(wheels, "otherpy", f"py{other}")
    site = tmp_path / "site"
    done = _install(tmp_path, site)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert sorted(path.name for path in site.glob("*.py")) == ["anypy.py", "bothpy.py", "thispy.py"]
    assert f"gpu_check.sh: skipping {skipped.name} (built for py{other}; this is Python {version})" in done.stderr


def test_without_wheels_it_says_so_and_goes_on(tmp_path: Path) -> None:
    done = _install(tmp_path, tmp_path / "site")
    assert done.returncode == 0 and done.stdout.strip() == "done"
    assert "no wheels in .gpu/wheels" in done.stderr


def test_a_failed_install_exits_3_naming_it(tmp_path: Path) -> None:
    wheels = tmp_path / ".gpu" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    done = _install(tmp_path, tmp_path / "site")
    assert done.returncode == 3 and "done" not in done.stdout
    assert "gpu_check.sh: installing .gpu/wheels failed" in done.stderr
