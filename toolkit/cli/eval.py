"""CLI command ``edgekit eval``: a model's task metrics (torch or a bundle), its study
(``edgekit.study``), an LLM judge, or the Lens benchmark (a module-level function;
``register`` adds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgekit.cli.common import console, deprecated, handle_errors, renamed
from edgekit.cli.options import parse_options
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
            help="output: lens, the directory of its report and plots (default out/lens); a "
            "model with a study, its directory (default out/MODEL); SAM 2 cards with "
            "--option eval_set=real, the directory of a PNG sheet per clip (default "
            "out/MODEL); --ray, the grid report JSON"
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="run the grid (torch + each bundle x runtime; lens: each seed) as Ray tasks on "
            "the Ray cluster ADDRESS: 'local' (start one here), auto, HOST:6379, ray://HOST:10001",
        ),
    ] = None,
    judge: Annotated[Path | None, typer.Option("--judge", hidden=True)] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            help="KEY=VALUE (repeat): a card's options, e.g. checkpoint=PATH; judge=FOLDER "
            "(bingoguard, con-j: evaluate the LLM judge from local weights); lens: seeds=3, "
            'env=NAME or env=["a","b"], test_per_class=4, calib_per_class=2, '
            "classifier=NAME[:RECIPE] (or a list), variant=top1 (docs/lens.md)",
        ),
    ] = None,
    against: Annotated[
        list[str] | None,
        typer.Option(
            help="paired comparison, B = these KEY=VALUE options on top of A's (repeat): "
            "both score the same items (SAM 2: track the same objects); B - A per metric "
            "with its paired SE and 95% CI"
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", hidden=True)] = None,
    seeds: Annotated[int | None, typer.Option(hidden=True)] = None,
    env: Annotated[list[str] | None, typer.Option("--env", hidden=True)] = None,
    test_per_class: Annotated[int | None, typer.Option(hidden=True)] = None,
    calib_per_class: Annotated[int | None, typer.Option(hidden=True)] = None,
    classifier: Annotated[list[str] | None, typer.Option("--classifier", hidden=True)] = None,
    lens_model: Annotated[list[str] | None, typer.Option("--model", hidden=True)] = None,
    variant: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Print MODEL's task metrics (torch or a bundle), or run `edgekit eval lens`.
    With --ray, the torch reference and every bundle x runtime run as Ray tasks.
    With --against, compare two settings of the card item by item (SAM 2: object by object)."""
    out = renamed("eval", "--out", out, "--json", json_out)
    options = parse_options(option)
    old_lens = [  # (spelling, option key, value): eval lens's knobs before --option
        ("--seeds", "seeds", seeds), ("--env", "env", env or None),
        ("--test-per-class", "test_per_class", test_per_class),
        ("--calib-per-class", "calib_per_class", calib_per_class),
        ("--classifier", "classifier", classifier or None),
        ("--model", "classifier", lens_model or None), ("--variant", "variant", variant),
    ]  # fmt: skip
    given = [(flag, key, value) for flag, key, value in old_lens if value is not None]
    if given and model != "lens":
        raise InputError(
            f"{', '.join(flag for flag, _, _ in given)}: options of `edgekit eval lens` (now "
            f"--option KEY=VALUE), not of '{model}'; for '{model}' give --bundle or --option"
        )
    for flag, key, value in given:  # old spellings: one release, with the line
        deprecated(flag, "eval lens", f"--option {key}=...")
        if key == "classifier" and key in options:  # --classifier and --model: one list
            value = [*options[key], *value] if isinstance(options[key], list) else value
        elif key in options and options[key] != value:
            raise InputError(f"{flag} and --option {key} differ; give one")
        options[key] = value
    if judge is not None:  # the old spelling: one release, with the line
        deprecated("--judge", "eval", "--option judge=FOLDER")
        if options.get("judge", str(judge)) != str(judge):
            raise InputError("--judge and --option judge differ; give one")
        options["judge"] = str(judge)
    judge_path = options.pop("judge", None)
    from edgekit.lens.options import LensEvalOptions

    lens = LensEvalOptions.from_options(options) if model == "lens" else None
    if against and (ray or model == "lens"):
        raise InputError(
            "--against compares two settings of a card on torch (SAM 2 cards: or one "
            "bundle); it does not combine with --ray or `eval lens`"
        )
    from edgekit.runtimes import parse_runtime_spec

    for spec in runtime or []:  # a typo is one clear line here, not a failed cell per bundle
        parse_runtime_spec(spec)
    if ray:
        from edgekit.cli.cluster import eval_on_ray

        lens_ = lens or LensEvalOptions()
        if lens_.first_seed:
            raise InputError("--ray runs seeds 0 .. seeds-1; leave first_seed out with --ray")
        failed = eval_on_ray(
            model, bundle or [], runtime or [], ray, out or Path("out/lens"), lens_.seeds,
            list(lens_.env) or None, lens_.test_per_class, console(),
            out if model != "lens" else None, list(lens_.classifier) or None, lens_.variant,
            lens_.calib_per_class,
        )  # fmt: skip
        if failed:
            raise typer.Exit(1)
        return
    if len(bundle or []) > 1 or len(runtime or []) > 1:
        raise InputError("several --bundle or --runtime values need --ray (the grid)")
    bundle = bundle[0] if bundle else None
    runtime = runtime[0] if runtime else None
    if lens is not None:
        from edgekit.lens.report import eval_lens

        eval_lens(
            out or Path("out/lens"), lens.seeds, list(lens.env) or None, lens.test_per_class,
            progress=True, models=list(lens.classifier) or None, variant=lens.variant,
            calib_per_class=lens.calib_per_class, first_seed=lens.first_seed,
        )  # fmt: skip
        return
    from edgekit.build.verify import reference_runners
    from edgekit.registry import card_class, get_card
    from edgekit.study import study_for

    if bundle is not None and not options:  # the options the bundle was exported with
        from edgekit.bundle.format import Bundle

        options = dict(Bundle.load(bundle).manifest.get("source", {}).get("options") or {})
    if getattr(card_class(model), "out_option", None):  # a card writing figures as it evaluates
        options.setdefault(card_class(model).out_option, str(out or Path("out") / model))
    card = get_card(model, **options)
    study = study_for(card) if bundle is None and judge_path is None else None
    if study is not None:
        study(card, out or Path("out") / model, True)
        return
    if judge_path is not None:
        if not hasattr(card, "judge"):
            raise InputError(
                f"model '{model}' has no LLM judge to evaluate (option judge: bingoguard, con-j)"
            )
        metrics = card.evaluate_judge(card.judge(str(judge_path)))
        for key, value in metrics.items():
            console().print(f"{model} [judge {judge_path}] {key}: {value:.4f}")
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

        changes = parse_options(against)
        if hasattr(card, "compare"):  # SAM 2 cards: object by object, B may reuse A's graphs
            from edgekit.cli.stream import paired_table

            table = paired_table(card, runners, label, changes, bundle is not None)
        else:
            table = items_table(card, runners, label, changes, bundle is not None)
        console().print(escape(table), soft_wrap=True)
        return
    metrics = card.evaluate(runners)
    if hasattr(card, "metrics_table"):
        from rich.markup import escape

        console().print(escape(f"[{label}] {card.metrics_table(metrics)}"), soft_wrap=True)
        return
    for key, value in metrics.items():
        console().print(f"{model} [{label}] {key}: {value:.4f}")


def register(app: typer.Typer, *_: Any) -> None:
    """Add ``eval`` to ``app`` (further arguments, the error handler and console older callers
    pass, are not needed: the command imports its own)."""
    app.command("eval")(eval_cmd)


def items_table(
    card: Any, runners: Any, label: str, changes: dict[str, Any], from_bundle: bool
) -> str:
    """``edgekit eval NAME --against KEY=VALUE`` for a card with per-item scores: A = ``card``
    on ``runners``, B = the card with ``changes`` on top, on its own torch graphs; the paired
    table of edgekit.paired."""
    from edgekit.build.verify import reference_runners
    from edgekit.paired import format_rows, paired_rows
    from edgekit.registry import get_card

    if from_bundle:
        raise InputError(
            f"--against builds B's own graphs from the changed options, which a bundle cannot "
            f"hold: compare '{card.name}' on torch (leave --bundle out)"
        )
    a = card.item_scores(runners)
    if not a:
        raise InputError(
            f"'{card.name}' gives no per-item scores, so two settings cannot be compared "
            "item by item; run `edgekit eval` once per setting instead"
        )
    other = get_card(card.name, **{**card.options, **changes})
    b = other.item_scores(reference_runners(other))
    given = ", ".join(f"{k}={v}" for k, v in card.options.items()) or "the card's options"
    changed = ", ".join(f"{k}={v}" for k, v in changes.items())
    rows = paired_rows(a, b)
    title = (
        f"{card.name} [{label}], paired on {rows[0].items} items: A = {given}; B = A with "
        f"{changed} (torch)"
    )
    return format_rows(rows, title)
