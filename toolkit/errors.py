"""Typed errors. Every failed check in edgekit raises one of these; none is only a warning."""

from __future__ import annotations


class EdgekitError(Exception):
    """Base class for every error edgekit raises on purpose."""


class MissingDependencyError(EdgekitError, ImportError):
    """An optional SDK is not installed; the message names the package and the extra to install."""

    def __init__(self, what: str, package: str, extra: str | None = None, detail: str = "") -> None:
        hint = f"pip install 'edgekit[{extra}]'" if extra else f"pip install {package}"
        msg = f"{what} needs the Python package '{package}', which is not importable here ({hint})."
        if detail:
            msg += f" {detail}"
        super().__init__(msg)
        self.package = package
        self.extra = extra


class InputError(EdgekitError, ValueError):
    """A feed, option or argument is not what was expected; the message says what and why."""


class ExportError(EdgekitError):
    """An export step failed (the torch graph could not be traced, a converter refused the model)."""


class BundleError(EdgekitError):
    """A bundle on disk is malformed: bad checksum, missing file, unknown schema, I/O mismatch."""


class ParityError(EdgekitError):
    """An exported artifact disagrees with its reference beyond the accepted tolerance or budget."""

    def __init__(self, message: str, report: dict | None = None) -> None:
        super().__init__(message)
        self.report = report or {}
        self.verify_report: object | None = None  # the VerifyReport, when verify raised this


class SelfTestError(BundleError):
    """A bundle's golden I/O does not reproduce on this machine; the bundle must not serve."""


class DeviceUnavailableError(EdgekitError):
    """A requested device or execution provider (CUDA, TensorRT, NPU) is not present here."""
