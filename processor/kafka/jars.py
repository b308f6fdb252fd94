"""JVM jars resolved from Maven Central into a user cache ("Maven bundles").

The embedded Kafka broker, and later Spark's connectors and Kafka Connect, run from official jars
rather than from a vendored distribution. Each bundle is a packaging pom under deploy/maven/<name>/;
Maven copies its runtime dependencies into ~/.cache/txbuffer/<name>-<version>/libs once, and every
later call reuses that directory without starting Maven. Pure stdlib plus structlog.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

MARKER = ".complete"  # holds the pom's sha256; written before the directory is renamed into place


class BundleError(RuntimeError):
    """A bundle could not be resolved: a missing tool, or Maven failed (the message says which)."""


def cache_root() -> Path:
    """TXBUFFER_CACHE, else $XDG_CACHE_HOME/txbuffer, else ~/.cache/txbuffer."""
    if env := os.environ.get("TXBUFFER_CACHE"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "txbuffer"


def maven_dir() -> Path:
    """The deploy/maven directory of the source tree, or TXBUFFER_MAVEN_DIR (installed wheels)."""
    if env := os.environ.get("TXBUFFER_MAVEN_DIR"):
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2] / "deploy" / "maven"


def bundle_pom(name: str) -> Path:
    return maven_dir() / name / "pom.xml"


def java_binary() -> str:
    """$JAVA_HOME/bin/java, else java on PATH; a clear error when there is none."""
    if home := os.environ.get("JAVA_HOME"):
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise BundleError(
            "no `java` on PATH and no JAVA_HOME: install a JDK 17+ (apt-get install openjdk-17-jre-headless)"
        )
    return found


def _mvn_binary() -> str:
    found = shutil.which("mvn")
    if not found:
        raise BundleError("no `mvn` on PATH: install Maven 3.8+ (apt-get install maven) to fetch the jars")
    return found


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def _is_complete(target: Path, digest: str) -> bool:
    try:
        return (target / MARKER).read_text().strip() == digest
    except OSError:
        return False


def ensure_bundle(name: str, version: str, pom: Path) -> Path:
    """The libs directory of bundle `name`-`version`, resolving it with Maven on first use.

    The marker records the pom's digest, so editing a pom without bumping the version still
    re-resolves. A file lock serialises concurrent test processes; the loser finds the marker.
    """
    pom = Path(pom)
    if not pom.is_file():
        raise BundleError(f"no pom for bundle {name!r} at {pom} (set TXBUFFER_MAVEN_DIR for an installed package)")
    digest = _pom_digest(pom)
    root = cache_root()
    target = root / f"{name}-{version}"
    if _is_complete(target, digest):
        return target / "libs"
    java_binary()  # a bundle of jars is useless without a JVM: say so before downloading
    mvn = _mvn_binary()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(target, digest):
            return target / "libs"
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-{version}-", dir=root))
        try:
            _copy_dependencies(mvn, pom, staging / "libs")
            jars = sorted(p.name for p in (staging / "libs").glob("*.jar"))
            if not jars:
                raise BundleError(f"Maven resolved no jars for bundle {name!r} from {pom}")
            (staging / MARKER).write_text(digest + "\n")
            if target.exists():  # an older or unfinished copy: never trusted, replaced whole
                shutil.rmtree(target)
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log.info(
        "maven.bundle.resolved",
        bundle=name,
        version=version,
        jars=len(jars),
        seconds=round(time.monotonic() - started, 1),
        libs=str(target / "libs"),
    )
    return target / "libs"


def _copy_dependencies(mvn: str, pom: Path, out: Path) -> None:
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BundleError(f"Maven failed ({proc.returncode}) resolving {pom}:\n{tail}")


def classpath(libs: Path) -> str:
    """A JVM classpath for every jar of a bundle (the JVM expands the wildcard itself)."""
    return str(libs / "*")


def bundle_version(name: str) -> str:
    """The version a bundle is cached under: its pom's own <version> (callers pin the same)."""
    import xml.etree.ElementTree as ET

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(bundle_pom(name)).getroot()
    version = root.find("m:version", ns)
    if version is None:
        version = root.find("version")
    if version is None or not (version.text or "").strip():
        raise BundleError(f"{bundle_pom(name)} has no <version>")
    return version.text.strip()


def main(argv: list[str] | None = None) -> int:
    """`python -m processor.kafka.jars [BUNDLE ...]`: resolve bundles ahead of time (make jars)."""
    import sys

    names = (argv if argv is not None else sys.argv[1:]) or sorted(p.parent.name for p in maven_dir().glob("*/pom.xml"))
    for name in names:
        libs = ensure_bundle(name, bundle_version(name), bundle_pom(name))
        print(f"{name}: {libs} ({len(list(libs.glob('*.jar')))} jars)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
