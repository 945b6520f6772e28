"""Finding and starting the official Pub/Sub and Firestore emulators (plain java, no gcloud),
and the Cloud Storage emulator (gcp-storage-emulator, a Python package).

The jars come with the Cloud SDK components ``pubsub-emulator`` and
``cloud-firestore-emulator`` (or the Debian packages ``google-cloud-cli-pubsub-emulator`` and
``google-cloud-cli-firestore-emulator``). Override their location with
``ACKLOOP_PUBSUB_EMULATOR_JAR`` / ``ACKLOOP_FIRESTORE_EMULATOR_JAR`` or ``CLOUDSDK_ROOT``
(also ``CLOUD_SDK_ROOT``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from ackloop_dev.devstack.processes import ManagedProcess

INSTALL_HINT = (
    "install them with `gcloud components install pubsub-emulator cloud-firestore-emulator`, "
    "or the Debian packages google-cloud-cli-pubsub-emulator and "
    "google-cloud-cli-firestore-emulator (they need Java 11+); or point "
    "ACKLOOP_PUBSUB_EMULATOR_JAR and ACKLOOP_FIRESTORE_EMULATOR_JAR at the jars"
)

_COMMON_SDK_ROOTS = (
    "/usr/lib/google-cloud-sdk",
    "/usr/share/google-cloud-sdk",
    "/opt/google-cloud-sdk",
    "/google-cloud-sdk",
    "~/google-cloud-sdk",
)


class EmulatorsMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class EmulatorJars:
    pubsub: Path
    firestore: Path


def _sdk_roots() -> list[Path]:
    roots: list[Path] = []
    for variable in ("CLOUDSDK_ROOT", "CLOUD_SDK_ROOT"):
        if env_root := os.environ.get(variable):
            roots.append(Path(env_root))
    gcloud = shutil.which("gcloud")
    if gcloud:
        try:
            out = subprocess.run(
                [gcloud, "info", "--format=value(installation.sdk_root)"],
                capture_output=True, text=True, timeout=20, check=False,
            ).stdout.strip()
            if out:
                roots.append(Path(out))
        except (OSError, subprocess.TimeoutExpired):
            pass
        roots.append(Path(gcloud).resolve().parent.parent)
    roots.extend(Path(r).expanduser() for r in _COMMON_SDK_ROOTS)
    return roots


def find_jars() -> EmulatorJars:
    """Locate both jars, or raise :class:`EmulatorsMissing` saying where it looked."""
    pubsub = os.environ.get("ACKLOOP_PUBSUB_EMULATOR_JAR")
    firestore = os.environ.get("ACKLOOP_FIRESTORE_EMULATOR_JAR")
    looked: list[str] = [p for p in (pubsub, firestore) if p]
    # An explicit path is the only place looked at for that jar, and it must exist.
    explicit = {"pubsub": pubsub, "firestore": firestore}
    pubsub = pubsub if pubsub and Path(pubsub).is_file() else None
    firestore = firestore if firestore and Path(firestore).is_file() else None
    for root in _sdk_roots():
        if pubsub is None and not explicit["pubsub"]:
            lib = root / "platform/pubsub-emulator/lib"
            found = sorted(lib.glob("cloud-pubsub-emulator-*.jar"))
            looked.append(str(lib))
            if found:
                pubsub = str(found[-1])
        if firestore is None and not explicit["firestore"]:
            candidate = root / "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
            looked.append(str(candidate))
            if candidate.exists():
                firestore = str(candidate)
    missing = [n for n, v in (("pubsub", pubsub), ("firestore", firestore)) if not v]
    if missing or not shutil.which("java"):
        what = ", ".join(missing) or "java"
        raise EmulatorsMissing(
            f"emulator jars not found ({what}) at {sorted(set(looked))[:6]}; {INSTALL_HINT}"
        )
    assert pubsub and firestore
    return EmulatorJars(Path(pubsub), Path(firestore))


def pubsub_process(jars: EmulatorJars, port: int, log_dir: Path) -> ManagedProcess:
    return ManagedProcess(
        name="pubsub-emulator",
        argv=["java", "-jar", str(jars.pubsub), "--host=127.0.0.1", f"--port={port}"],
        log_path=log_dir / "pubsub-emulator.log",
        health_url=f"http://127.0.0.1:{port}/",
    )


def firestore_process(jars: EmulatorJars, port: int, log_dir: Path) -> ManagedProcess:
    return ManagedProcess(
        name="firestore-emulator",
        argv=[
            "java", "-Duser.language=en", "-cp", str(jars.firestore),
            "com.google.cloud.datastore.emulator.firestore.CloudFirestore", "start",
            "--host=127.0.0.1", f"--port={port}",
        ],
        log_path=log_dir / "firestore-emulator.log",
        health_url=f"http://127.0.0.1:{port}/",
    )


FILES_BUCKET = "ackloop-files"
"""The bucket the local stack keeps file bytes in (``ACKLOOP_FILES_BUCKET``)."""


def storage_process(port: int, log_dir: Path, data_dir: Path,
                    bucket: str = FILES_BUCKET) -> ManagedProcess:
    """The Cloud Storage emulator (gcp-storage-emulator, from PyPI: a dependency of the
    development tools), its objects on disk under ``data_dir``, ``bucket`` created at start."""
    return ManagedProcess(
        name="storage-emulator",
        argv=[sys.executable, "-m", "gcp_storage_emulator", "start", "--host=127.0.0.1",
              f"--port={port}", f"--default-bucket={bucket}"],
        log_path=log_dir / "storage-emulator.log",
        health_url=f"http://127.0.0.1:{port}/",
        env={**os.environ, "STORAGE_BASE": str(data_dir.parent), "STORAGE_DIR": data_dir.name},
    )


def storage_available() -> str | None:
    """None when the Cloud Storage emulator can be started here, else why not."""
    import importlib.util

    if importlib.util.find_spec("gcp_storage_emulator") is None:
        return ("gcp-storage-emulator is not installed: `pip install -e ./devtools` (it is a "
                "dependency of ackloop-dev)")
    return None


def ensure_bucket(host: str, bucket: str, project: str) -> None:
    """Create ``bucket`` on the storage emulator at ``host`` (``http://127.0.0.1:PORT``) unless
    it exists."""
    base = host if "://" in host else f"http://{host}"
    answer = httpx.post(f"{base}/storage/v1/b", params={"project": project},
                        json={"name": bucket}, timeout=10.0)
    if answer.status_code not in (200, 409):
        answer.raise_for_status()


def reset_firestore(port: int, project: str, database: str = "(default)") -> None:
    """Delete every document in the emulator's database."""
    url = (
        f"http://127.0.0.1:{port}/emulator/v1/projects/{project}/databases/{database}/documents"
    )
    httpx.delete(url, timeout=10.0).raise_for_status()


_HANDED_OUT: set[int] = set()
"""Ports this process has picked: never picked twice, so two processes started together never
get the same one."""


def ports_from_env() -> tuple[int, int] | None:
    """The Pub/Sub and Firestore emulators' ports from ``PUBSUB_EMULATOR_HOST`` and
    ``FIRESTORE_EMULATOR_HOST``; None unless both are set."""
    hosts = [os.environ.get(v) for v in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST")]
    if not (hosts[0] and hosts[1]):
        return None
    return int(hosts[0].rsplit(":", 1)[1]), int(hosts[1].rsplit(":", 1)[1])


def required_ports(parser: argparse.ArgumentParser) -> tuple[int, int]:
    """:func:`ports_from_env`, or the command line's error saying how to set them."""
    ports = ports_from_env()
    if ports is None:
        parser.error("set PUBSUB_EMULATOR_HOST and FIRESTORE_EMULATOR_HOST (ackloop dev up "
                     "--emulators-only prints them)")
    return ports


def free_port() -> int:
    """A loopback port nothing listens on, for a process about to start.

    Taken below the kernel's ephemeral range when it can be: a port from that range (what
    binding port 0 gives) may be handed to one of the machine's outgoing connections between
    now and the process's own bind, which then fails with "address already in use".
    """
    import random
    import socket

    low = _ephemeral_low()
    for _ in range(50):
        port = random.randrange(10_000, low) if low > 10_000 else 0
        if port in _HANDED_OUT:  # not bound yet by the process it was picked for
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            found: int = s.getsockname()[1]
            _HANDED_OUT.add(found)
            return found
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        fallback: int = s.getsockname()[1]
        return fallback


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux), else the IANA one's."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49_152
