"""Earlier releases' code, for running them beside this one on one local stack (``orders-devhost
--beside``): the side-by-side, rollback and compatibility tests (docs/upgrading.md).

Each release names the commit it was cut from; at a release, add it here."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASES = {"1.0.0": "ecd4d9d2b06ad7706f37fe2c65762b5766136b15"}
# Where a checkout keeps its packages: src/ (what is deployed) and, since 1.1.0, tools/ (the local runtime
# and the tools); 1.0.0 keeps both in src/.
PACKAGE_FOLDERS = ("src", "tools")


def package_path(root: Path) -> str:
    """The PYTHONPATH that imports a checkout's own packages (its folders that exist)."""
    return os.pathsep.join(str(root / name) for name in PACKAGE_FOLDERS if (root / name).is_dir())


def protos_folder(root: Path) -> str:
    """Where a checkout's devhost keeps its .proto and the classes generated from it (``src/`` for a
    revision that has no devhost: the path then holds nothing)."""
    found = [name for name in reversed(PACKAGE_FOLDERS) if (root / name / "devhost").is_dir()]
    return f"{(found or [PACKAGE_FOLDERS[0]])[0]}/devhost/protos"


class ReleaseUnavailable(RuntimeError):
    """The repository's history does not hold the release's commit (a shallow clone)."""


def checkout(version: str, dest: Path) -> Path:
    """Release ``version``'s files from this repository's history in ``dest``, ready to run: its function
    app, its packages (its whole local stack with ``PYTHONPATH`` set to :func:`package_path`) and the message
    classes its devhost worker generates at install. Runs on this checkout's virtual environment and npm
    packages (a release's pins are the ones before it, or fewer)."""
    commit = RELEASES[version]
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=REPO_ROOT, capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise ReleaseUnavailable(f"release {version} ({commit[:12]}): {archive.stderr.decode().strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    # Its local stack runs Azurite from npm: the packages this checkout installed (the same pins or newer).
    if (REPO_ROOT / "node_modules").is_dir() and not (dest / "node_modules").exists():
        (dest / "node_modules").symlink_to(REPO_ROOT / "node_modules", target_is_directory=True)
    protos = protos_folder(dest)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            protos,
            f"--python_out={protos}",
            f"{protos}/function_rpc.proto",
        ],
        cwd=dest,
        check=True,
        capture_output=True,
    )
    return dest
