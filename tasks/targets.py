"""A Luigi target that knows which parameters produced it.

Stage outputs keep the fixed names of FORMATS.md (`processed_trajectories.json`, ...), so the
file name cannot carry a parameter hash as gokart does. Instead every output has a manifest
beside it (`.skillsft/<name>.manifest.json`) holding the fingerprint of the parameters, code
and prompt versions and upstream outputs that produced it. The target exists only when the file
exists *and* its manifest carries the fingerprint the task expects now: a changed parameter
makes the stage (and, through the chained fingerprints, its dependants) run again, an unchanged
one leaves it alone.

The output is written first (atomically and durably: temporary file, fsync, rename, fsync of
the folder) and the manifest last (the same way), so a crash between the two only costs a
recomputation, never a stale file taken for fresh.
"""

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import luigi
import orjson
from pydantic import ValidationError

from skillsft.pipeline.durable import write_bytes_atomically
from skillsft.pipeline.workdir import manifest_for as manifest_path_for
from skillsft.pipeline.workdir import read_manifests
from skillsft.schemas.manifest import Manifest

__all__ = ["StageTarget", "iter_manifests", "manifest_path_for", "write_bytes_atomically"]


class StageTarget(luigi.LocalTarget):
    """A local file plus the manifest that says which fingerprint produced it."""

    def __init__(self, path: str | Path, fingerprint: str) -> None:
        super().__init__(str(path))
        self.fingerprint = fingerprint
        self.manifest_path = manifest_path_for(Path(path))

    def read_manifest(self) -> Manifest | None:
        try:
            return Manifest.model_validate_json(self.manifest_path.read_bytes())
        except (OSError, ValidationError):
            return None

    def exists(self) -> bool:
        if not super().exists():
            return False
        manifest = self.read_manifest()
        return manifest is not None and manifest.fingerprint == self.fingerprint

    def teacher_failures(self) -> int:
        """Teacher requests that failed when this output was made and that the next run will
        try again (manifests older than that count every failure)."""
        manifest = self.read_manifest()
        usages = manifest.teacher if manifest else []
        return sum(int(usage.get("retryable_failures", usage.get("calls_failed", 0)))
                   for usage in usages)

    def write(self, data: bytes | Iterable[bytes]) -> None:
        write_bytes_atomically(Path(self.path), data)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        body = Manifest(fingerprint=self.fingerprint, **manifest).model_dump(mode="json")
        write_bytes_atomically(self.manifest_path, orjson.dumps(body, option=orjson.OPT_INDENT_2))

    def invalidate(self) -> None:
        """Forget the manifest so the next run recomputes this output (used by --force)."""
        with contextlib.suppress(FileNotFoundError):
            self.manifest_path.unlink()


def iter_manifests(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every readable manifest in a work dir, by output file name, for the summary and tests
    (pipeline/workdir.py reads them; the report lists the unreadable ones as warnings)."""
    for name, manifest in read_manifests(folder):
        if not isinstance(manifest, str):
            yield name, manifest
