"""One deploy path for the daemon, over HTTP and from ``--bundle`` at start: unpack (every file
listed and checksummed), check that the bundle fits every pipeline that runs its name, self-test
on this device, and only then swap the store's pointer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def deploy_checked(
    store: Any, name: str, archive: str | Path, pipelines: Sequence[Any] = ()
) -> dict[str, Any]:
    """Deploy ``archive`` as ``name`` in ``store``. Before the swap (in the store's ``check``,
    after the unpack verified every file): each of ``pipelines`` that runs ``name`` checks the
    new bundle fits it (BundleMisfitError naming each pipeline's problems; cheap, so before
    the self-test), then the bundle self-tests here. Any failure keeps the serving version.

    Returns the store's deploy record; its ``check`` holds runtime, passed, graphs, fits."""
    from edgekit.bundle.format import Bundle
    from edgekit.bundle.selftest import selftest
    from edgekit.daemon.pipelines import BundleMisfitError

    users = [p for p in pipelines if p.bundle == name]

    def check(path: Path) -> dict[str, Any]:
        bundle = Bundle.load(path, verify_checksums=False)  # unpack has just verified them
        misfits = {p.name: problems for p in users if (problems := p.fits(bundle))}
        if misfits:
            raise BundleMisfitError(
                f"bundle '{bundle.model}' does not fit the pipelines that run '{name}' here, "
                "which keep the serving version: "
                + " | ".join(f"{k}: {'; '.join(v)}" for k, v in misfits.items()),
                misfits,
            )
        result = selftest(str(path))
        return {
            "runtime": result.runtime,
            "passed": result.passed,
            "graphs": list(result.graphs),
            "fits": [p.name for p in users],
        }

    return store.deploy(name, archive, check)
