"""Earlier releases' code, for running them beside this one on one local stack (``orders-devhost
--beside``): the side-by-side, rollback and compatibility tests (docs/upgrading.md).

Each release names the commit it was cut from; at a release, add it here."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASES = {"1.0.0": "ecd4d9d2b06ad7706f37fe2c65762b5766136b15"}
PROTOS = "src/devhost/protos"


class ReleaseUnavailable(RuntimeError):
    """The repository's history does not hold the release's commit (a shallow clone)."""


def checkout(version: str, dest: Path) -> Path:
    """Release ``version``'s files from this repository's history in ``dest``, ready to run: its function
    app, its packages under ``src/`` (its whole local stack with ``PYTHONPATH=<dest>/src``) and the message
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
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            PROTOS,
            f"--python_out={PROTOS}",
            f"{PROTOS}/function_rpc.proto",
        ],
        cwd=dest,
        check=True,
        capture_output=True,
    )
    return dest
