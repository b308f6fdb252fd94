"""The built wheel works on its own: `python -m build`, install into a clean venv, run the CLI.

This catches what an editable install hides: modules or package data (the .avsc schemas) missing
from the wheel, and imports of files that exist only in the source tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Unoptimised C (-O0 comes after Python's own -O2): what the wheel holds is what this checks,
    # and the optimiser took 30 of the build's 50 seconds, more beside the suite's other lanes.
    # Built from a copy: setuptools keeps its objects in the source's build/, and a later
    # `setup.py build_ext --inplace` there reused this -O0 extension as up to date (a bench ran
    # 1.7x slower on it).
    source = _copy_checkout(out / "source")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "CFLAGS": f"{os.environ.get('CFLAGS', '')} -O0".strip()},
    )
    (wheel,) = out.glob("txbuffer-*.whl")
    env_dir = out / "venv"
    venv.create(env_dir, with_pip=True)
    # The runtime dependencies only (no extras); pip's cache makes this quick after `make venv`.
    subprocess.run(
        [str(env_dir / "bin" / "pip"), "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return env_dir


def _copy_checkout(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new ones not ignored): no build/, no
    compiled extensions, no .venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, copy = ROOT / name, dest / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():  # processor/schemas -> ../schemas
            copy.symlink_to(os.readlink(src))
        elif src.is_file():  # a tracked file deleted in the working tree is not copied
            shutil.copy2(src, copy)
    return dest


def _run(env_dir: Path, *args: str) -> subprocess.CompletedProcess:
    # Run outside the source tree, without TXBUFFER_SCHEMAS, so nothing resolves to the checkout.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXBUFFER_") and k != "PYTHONPATH"}
    return subprocess.run(
        [str(env_dir / "bin" / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        cwd=env_dir,
        env=env,
        timeout=120,
    )


def test_wheel_cli_help(installed):
    top = _run(installed, "txbuffer", "--help")
    assert top.returncode == 0, top.stderr
    for command in ("broker", "run", "generate", "demo", "replay", "capture", "status", "spark"):
        assert command in top.stdout
    run = _run(installed, "txbuffer", "run", "--help")
    assert run.returncode == 0, run.stderr
    assert "--bootstrap" in run.stdout


def test_wheel_ships_the_schemas_and_encodes_with_them(installed):
    code = (
        "import processor.core.events as ev, pathlib;"
        "assert 'site-packages' in str(ev.SCHEMA_DIR.resolve()), ev.SCHEMA_DIR;"
        "print(sorted(p.name for p in pathlib.Path(ev.SCHEMA_DIR).glob('*.avsc')));"
        "ev.raw_schema(); ev.change_schema(); ev.transaction_schema()"
    )
    result = _run(installed, "python", "-c", code)
    assert result.returncode == 0, result.stderr
    assert "raw_event.avsc" in result.stdout and "change_event.avsc" in result.stdout
