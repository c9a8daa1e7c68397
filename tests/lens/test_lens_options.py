"""``edgekit eval lens`` takes its options as ``--option KEY=VALUE``, typed and checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from edgekit.errors import InputError
from edgekit.lens.options import LensEvalOptions


def test_defaults_and_parsed_values() -> None:
    assert LensEvalOptions.from_options({}) == LensEvalOptions()
    got = LensEvalOptions.from_options(
        {"seeds": 5, "env": ["dim-room", "noon"], "classifier": "photo-cnn:sensor-aware",
         "variant": "entropy-flip", "test_per_class": 12, "calib_per_class": 6,
         "first_seed": 1000}
    )  # fmt: skip
    assert got == LensEvalOptions(
        5, ("dim-room", "noon"), 12, 6, ("photo-cnn:sensor-aware",), "entropy-flip", 1000
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seed": 3}, "unknown option(s) seed"),
        ({"seeds": 0}, "option seeds is 0; it needs an integer of at least 1 seed"),
        ({"seeds": True}, "option seeds is True"),
        ({"test_per_class": "4"}, "option test_per_class is '4'"),
        ({"env": []}, "option env is []; expected a name or a JSON list"),
        ({"classifier": [1]}, "option classifier is [1]"),
        ({"variant": "best"}, "unknown VisiT variant 'best'"),
        ({"variant": 3}, "option variant is 3"),
        ({"first_seed": -1}, "option first_seed is -1; expected an integer >= 0"),
        ({"first_seed": "5"}, "option first_seed is '5'"),
    ],
)
def test_bad_values_name_the_option_and_what_is_expected(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError) as err:
        LensEvalOptions.from_options(options)
    assert message in str(err.value)


def test_the_cli_passes_options_and_old_spellings_to_the_benchmark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import edgekit.lens.report as report
    from edgekit.cli.app import app

    calls: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(report, "eval_lens", lambda *a, **k: calls.append((a, k)))
    runner = CliRunner()
    args = ["eval", "lens", "--out", str(tmp_path), "--option", "seeds=2"]
    new = runner.invoke(app, [*args, "--option", 'env=["noon"]', "--option", "variant=margin"])
    assert new.exit_code == 0, new.output
    old = runner.invoke(app, [*args, "--env", "noon", "--variant", "margin"])
    assert old.exit_code == 0, old.output
    assert "--env is deprecated for eval lens; use --option env=..." in old.output
    assert calls[0] == calls[1]
    (out, seeds, env, test_per_class), kwargs = calls[0][0], calls[0][1]
    assert (out, seeds, env, test_per_class) == (tmp_path, 2, ["noon"], 4)
    assert kwargs == {
        "progress": True, "models": None, "variant": "margin", "calib_per_class": 2,
        "first_seed": 0,
    }  # fmt: skip
    fresh = runner.invoke(app, [*args, "--option", "first_seed=1000"])
    assert fresh.exit_code == 0 and calls[-1][1]["first_seed"] == 1000
    on_ray = runner.invoke(app, [*args, "--option", "first_seed=1000", "--ray", "local"])
    assert on_ray.exit_code != 0 and "leave first_seed out with --ray" in on_ray.output
    clash = runner.invoke(app, [*args, "--seeds", "3"])
    assert clash.exit_code == 2 and "--seeds and --option seeds differ" in clash.output
