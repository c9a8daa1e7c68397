"""CLI command ``edgekit eval``: a model's task metrics (torch or a bundle), its study
(``edgekit.study``), an LLM judge, or the Lens benchmark (a module-level function;
``register`` adds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgekit.cli.common import console, handle_errors, renamed
from edgekit.cli.options import OptionsArg, parse_options
from edgekit.errors import InputError


@handle_errors
def eval_cmd(
    model: Annotated[
        str,
        typer.Argument(help="registered model name, or 'lens' (the sensor-control benchmark)"),
    ],
    bundle: Annotated[
        list[Path] | None,
        typer.Option(help="evaluate this bundle instead of torch (repeat with --ray)"),
    ] = None,
    runtime: Annotated[
        list[str] | None,
        typer.Option(
            help="RUNTIME\\[@DEVICE] of --bundle, e.g. onnxruntime@cuda (repeat with --ray)"
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="output: lens, the directory of its report and plots (default out/lens); an "
            "model with a study, its directory (default out/MODEL); --ray, the grid report JSON"
        ),
    ] = None,
    seeds: Annotated[int, typer.Option(help="lens: simulator seeds (run-to-run noise)")] = 3,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", help="lens: lighting environments (repeat; default all)"),
    ] = None,
    test_per_class: Annotated[
        int, typer.Option(help="lens: held-out scenes per class and seed")
    ] = 4,
    calib_per_class: Annotated[
        int,
        typer.Option(
            help="lens: calibration scenes per class and seed (best-fixed, the candidate "
            "strategy, the VisiT variant and the setting prior are chosen on them; never "
            "scored)"
        ),
    ] = 2,
    classifier: Annotated[
        list[str] | None,
        typer.Option(
            "--classifier",
            help="lens: bench this classifier's fp32 and int8 bundles, NAME or NAME:RECIPE "
            "(repeat; default: photo-cnn fp32 + int8 and photo-vit fp32, as trained by "
            "default, by photo-cnn:sensor-aware and by photo-vit:sensor-rendered)",
        ),
    ] = None,
    variant: Annotated[
        str,
        typer.Option(
            help="lens: VisiT variant of the headline rows and checks: top1 | entropy | "
            "margin, or one of them with -flip (scored over the capture and its mirror)"
        ),
    ] = "top1",
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="run the grid (torch + each bundle x runtime; lens: each seed) as Ray tasks on "
            "the Ray cluster ADDRESS: 'local' (start one here), auto, HOST:6379, ray://HOST:10001",
        ),
    ] = None,
    judge: Annotated[
        Path | None,
        typer.Option(help="bingoguard: evaluate an LLM judge from local weights (a folder)"),
    ] = None,
    option: OptionsArg = None,
    against: Annotated[
        list[str] | None,
        typer.Option(
            help="SAM 2 cards: paired comparison, B = these KEY=VALUE options on top of "
            "A's (repeat); both track the same objects, Delta J&F +- its paired SE"
        ),
    ] = None,
    lens_model: Annotated[list[str] | None, typer.Option("--model", hidden=True)] = None,
    json_out: Annotated[Path | None, typer.Option("--json", hidden=True)] = None,
) -> None:
    """Print MODEL's task metrics (torch or a bundle), or run `edgekit eval lens`.
    With --ray, the torch reference and every bundle x runtime run as Ray tasks.
    With --against, compare two settings of a SAM 2 card object by object."""
    lens_model = renamed("eval", "--classifier", classifier, "--model", lens_model)
    out = renamed("eval", "--out", out, "--json", json_out)
    if against and (ray or model == "lens"):
        raise InputError(
            "--against compares two settings of a SAM 2 card on torch or one bundle; it "
            "does not combine with --ray or `eval lens`"
        )
    if variant != "top1":
        from edgekit.lens.visit import check_variant

        if model != "lens":
            raise InputError(f"--variant picks the VisiT of `edgekit eval lens`, not of '{model}'")
        check_variant(variant)
    if model != "lens" and (test_per_class, calib_per_class) != (4, 2):
        raise InputError(
            f"--test-per-class / --calib-per-class are options of `edgekit eval lens`, "
            f"not of '{model}'"
        )
    from edgekit.runtimes import parse_runtime_spec

    for spec in runtime or []:  # a typo is one clear line here, not a failed cell per bundle
        parse_runtime_spec(spec)
    if ray:
        from edgekit.cli.cluster import eval_on_ray

        failed = eval_on_ray(
            model, bundle or [], runtime or [], ray, out or Path("out/lens"), seeds, env,
            test_per_class, console(), out if model != "lens" else None, lens_model, variant,
            calib_per_class,
        )  # fmt: skip
        if failed:
            raise typer.Exit(1)
        return
    if len(bundle or []) > 1 or len(runtime or []) > 1:
        raise InputError("several --bundle or --runtime values need --ray (the grid)")
    bundle = bundle[0] if bundle else None
    runtime = runtime[0] if runtime else None
    if lens_model and model != "lens":
        raise InputError(
            f"--classifier picks the classifiers of `edgekit eval lens`; for '{model}' give "
            "--bundle or --option instead"
        )
    if model == "lens":
        from edgekit.lens.report import eval_lens

        eval_lens(
            out or Path("out/lens"), seeds, env or None, test_per_class, progress=True,
            models=lens_model, variant=variant, calib_per_class=calib_per_class,
        )  # fmt: skip
        return
    from edgekit.build.verify import reference_runners
    from edgekit.registry import get_card
    from edgekit.study import study_for

    options = parse_options(option)
    if bundle is not None and not options:  # the options the bundle was exported with
        from edgekit.bundle.format import Bundle

        options = dict(Bundle.load(bundle).manifest.get("source", {}).get("options") or {})
    card = get_card(model, **options)
    study = study_for(card) if bundle is None and judge is None else None
    if study is not None:
        study(card, out or Path("out") / model, True)
        return
    if judge is not None:
        if not hasattr(card, "judge"):
            raise InputError(f"model '{model}' has no LLM judge to evaluate")
        metrics = card.evaluate_judge(card.judge(str(judge)))
        for key, value in metrics.items():
            console().print(f"{model} [judge {judge}] {key}: {value:.4f}")
        return
    if bundle is None:
        runners, label = reference_runners(card), "torch"
    else:
        from edgekit.bundle.format import Bundle

        b = Bundle.load(bundle)
        name, device = parse_runtime_spec(runtime) if runtime else (None, None)
        runners, label = (
            b.sessions(runtime=name, device=device),
            f"{b.target} on {runtime or b.default_runtime()}",
        )
    if against:
        from rich.markup import escape

        from edgekit.cli.stream import paired_table

        table = paired_table(card, runners, label, parse_options(against), bundle is not None)
        console().print(escape(table), soft_wrap=True)
        return
    metrics = card.evaluate(runners)
    for key, value in metrics.items():
        console().print(f"{model} [{label}] {key}: {value:.4f}")


def register(app: typer.Typer, *_: Any) -> None:
    """Add ``eval`` to ``app`` (further arguments, the error handler and console older callers
    pass, are not needed: the command imports its own)."""
    app.command("eval")(eval_cmd)
