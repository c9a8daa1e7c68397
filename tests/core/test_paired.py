"""``edgekit eval NAME --against KEY=VALUE`` for any card with per-item scores: the paired rows
(hand-computed), the errors, and the real CLI on two shipped BingoGuard scorers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.paired import format_rows, paired_rows


def test_paired_rows_on_a_hand_computed_case() -> None:
    a = {"acc": np.array([1, 0, 1, 0, 1, 1, 0, 1.0]), "only_a": np.ones(8)}
    b = {"acc": np.array([1, 1, 1, 0, 1, 1, 1, 1.0]), "only_b": np.ones(8)}
    (row,) = paired_rows(a, b)
    d = np.array([0, 1, 0, 0, 0, 0, 1, 0.0])
    assert row.metric == "acc" and row.items == 8 and row.changed == 2
    assert (row.a, row.b, row.delta) == pytest.approx((5 / 8, 7 / 8, 2 / 8))
    assert row.se == pytest.approx(d.std(ddof=1) / np.sqrt(8))
    assert 0.0 <= row.ci_low < row.delta < row.ci_high <= 1.0
    same = paired_rows(a, {"acc": a["acc"].copy()})[0]
    assert same.delta == same.ci_low == same.ci_high == same.changed == 0  # no difference
    table = format_rows([row], "title")
    assert table.splitlines()[0] == "title" and "+0.2500" in table and "2/8" in table


def test_paired_rows_refuse_different_items_or_no_shared_metric() -> None:
    with pytest.raises(InputError, match="same items"):
        paired_rows({"acc": np.ones(5)}, {"acc": np.ones(6)})
    with pytest.raises(InputError, match="share no per-item metric"):
        paired_rows({"acc": np.ones(5)}, {"f1": np.ones(5)})


def test_items_table_errors() -> None:
    from edgekit.cli.eval import items_table
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="leave --bundle out"):
        items_table(get_card("photo-cnn"), {}, "onnx", {"seed": 1}, from_bundle=True)
    with pytest.raises(InputError, match="gives no per-item scores"):
        items_table(get_card("wlks"), {}, "torch", {"seed": 1}, from_bundle=False)


@pytest.mark.slow
def test_the_cli_compares_two_bingoguard_scorers_text_by_text() -> None:
    """The shipped query+response and response-only heads on the 165 held-out texts: the
    table names both settings and every per-item metric; the question changes topic answers
    (measured: topic accuracy 0.945 with it, 0.861 without)."""
    exe = shutil.which("edgekit", path=os.path.dirname(sys.executable)) or "edgekit"
    out = subprocess.run(
        [exe, "eval", "bingoguard", "--against", "input=response"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "bingoguard [torch], paired on 165 items" in out.stdout
    assert "B = A with input=response" in out.stdout
    rows = {line.split()[0]: line.split() for line in lines if line.split()}
    assert {"binary_accuracy", "severity_accuracy", "topic_accuracy", "brier"} <= set(rows)
    topic = rows["topic_accuracy"]
    assert float(topic[1]) > float(topic[2]) and float(topic[3]) < 0  # B (no question) loses
