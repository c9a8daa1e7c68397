"""The certified-unlearning study (``edgekit eval certified-unlearning``), synthetic data, 1 core.

1. Utility: test loss vs forget-set size f and dimension d for retraining (exact, no noise),
   unlearning (ERM warm start + T GD steps + calibrated noise) and DP training (T = 0: noise
   for the whole sensitivity), at one (q, eps) budget.
2. Cost: GD steps on the retain set needed to reach a target noise level, for in- and
   out-of-distribution forget sets, from an ERM and from a trimmed-mean model: certified (the
   bound) and empirical (the true distance to the retrained model), against retraining.
3. Audit (audit.py): a loss-threshold membership-inference attack on the forgotten rows vs
   held-out rows, for the original, skipped-steps, unlearned and retrained models, on the card's
   digits recipe and on a memorising one; and the distinguishing attack on the digits recipe.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.card import ModelCard
from edgekit.models.certified_unlearning import audit, certify, data, logistic


@dataclass(frozen=True)
class StudyConfig:
    """Sizes and constants of the study (defaults: about a minute on one core)."""

    n: int = 4000
    n_test: int = 2000
    lam: float = 0.05
    q: float = 2.0
    eps: float = 1.0
    unlearn_steps: int = 50
    dims: tuple[int, ...] = (4, 16, 64)
    forget_sizes: tuple[int, ...] = (1, 8, 32, 128)
    noise_draws: int = 10
    cost_dim: int = 16
    ood_norm: float = 50.0
    target_sigma: float = 0.02
    erm_tol: float = 1e-8
    robust_tol: float = 1e-7
    seed: int = 0
    audit_scenarios: tuple[str, ...] = ("digits", "memorising")  # keys of audit.SCENARIOS
    audit_draws: int = 100
    audit_boots: int = 2000
    distinguish_draws: int = 200  # 0: no distinguishing audit


def _test_loss(weights: np.ndarray, split: data.Split) -> float:
    return logistic.cross_entropy(weights, logistic.augment(split.x_test), split.y_test)


def utility_rows(config: StudyConfig, step: Any = None) -> list[dict[str, Any]]:
    """One row per (d, f): sigma and mean test loss of unlearn / DP, retrain test loss."""
    budget = certify.RenyiBudget(config.q, config.eps)
    rows = []
    for dim in config.dims:
        for f in config.forget_sizes:
            if step:
                step(f"utility d={dim} f={f}")
            split = data.synthetic_split(config.n, config.n_test, dim, f, config.seed)
            xa, keep = logistic.augment(split.x), split.retain
            trained = logistic.fit_erm(xa, split.y, 2, config.lam, config.erm_tol)
            retrained = logistic.fit_erm(xa[keep], split.y[keep], 2, config.lam, config.erm_tol)
            lipschitz = float(np.sqrt(2.0 * (1.0 + 1.0)))  # G = sqrt(2) ||(x, 1)||, ||x|| <= 1
            distance0 = certify.erm_distance_bound(
                f, config.n, lipschitz, config.lam, config.erm_tol
            )
            row: dict[str, Any] = {
                "dim": dim,
                "forget": f,
                "retrain_loss": _test_loss(retrained, split),
            }
            for name, steps in (("unlearn", config.unlearn_steps), ("dp", 0)):
                rng = np.random.default_rng(config.seed + 100 * dim + f)
                losses, sigma = [], 0.0
                for _ in range(config.noise_draws):
                    out = certify.unlearn(
                        trained, xa[keep], split.y[keep], config.lam, distance0, steps, budget, rng
                    )
                    losses.append(_test_loss(out.weights, split))
                    sigma = out.sigma
                row[f"{name}_loss"] = float(np.mean(losses))
                row[f"{name}_sigma"] = sigma
            rows.append(row)
    return rows


def _empirical_steps(
    start: np.ndarray, xa: np.ndarray, y: np.ndarray, lam: float, goal: np.ndarray, target: float
) -> int:
    """GD steps (1/L) on (xa, y) from ``start`` until ||w - goal|| <= target (cap 100000)."""
    step = 1.0 / logistic.smoothness(xa, lam)
    w = np.array(start, dtype=np.float64)
    for t in range(100000):
        if np.linalg.norm(w - goal) <= target:
            return t
        w -= step * logistic.gradient(w, xa, y, lam)
    return 100000


def cost_rows(config: StudyConfig, step: Any = None) -> list[dict[str, Any]]:
    """One row per (in/out of distribution, f): certified and empirical unlearning steps from
    an ERM and a trimmed-mean (trim = f) model, and the steps of retraining from zero."""
    budget = certify.RenyiBudget(config.q, config.eps)
    target = config.target_sigma / certify.gaussian_sigma(1.0, budget)  # Delta at target sigma
    rows = []
    for ood in (False, True):
        feature_bound = config.ood_norm * 1.1 if ood else 1.0  # the public norm bound
        for f in config.forget_sizes:
            if step:
                step(f"cost {'ood' if ood else 'in'} f={f}")
            split = data.synthetic_split(
                config.n, config.n_test, config.cost_dim, f, config.seed, ood, config.ood_norm
            )
            x = data.clip_rows(split.x, feature_bound)
            xa, keep = logistic.augment(x), split.retain
            xr, yr = xa[keep], split.y[keep]
            smooth = logistic.smoothness(xr, config.lam)
            retrained = logistic.fit_erm(xr, yr, 2, config.lam, config.erm_tol)
            erm = logistic.fit_erm(xa, split.y, 2, config.lam, config.erm_tol)
            robust, _ = logistic.fit_trimmed(
                xa, split.y, 2, config.lam, f, 1.0 / smooth, config.robust_tol
            )
            lipschitz = float(np.sqrt(2.0 * (feature_bound**2 + 1.0)))
            bounds = {
                "erm": certify.erm_distance_bound(
                    f, config.n, lipschitz, config.lam, config.erm_tol
                ),
                "robust": certify.trimmed_distance_bound(
                    f, config.n, f, certify.retained_spread(xr, 2), config.lam, config.robust_tol
                ),
                "retrain": float(np.linalg.norm(logistic.gradient(0 * erm, xr, yr, config.lam)))
                / config.lam,
            }
            starts = {"erm": erm, "robust": robust, "retrain": np.zeros_like(erm)}
            row: dict[str, Any] = {"forget_data": "out" if ood else "in", "forget": f}
            for name, start in starts.items():
                row[f"{name}_certified_steps"] = certify.steps_needed(
                    bounds[name], target, config.lam, smooth
                )
                row[f"{name}_empirical_steps"] = _empirical_steps(
                    start, xr, yr, config.lam, retrained, target
                )
                row[f"{name}_distance"] = float(np.linalg.norm(start - retrained))
                row[f"{name}_bound"] = bounds[name]
            rows.append(row)
    return rows


def audit_rows(config: StudyConfig, step: Any = None) -> dict[str, Any]:
    """{"membership": one entry per scenario, "distinguishing": the digits distinguisher}."""
    membership = []
    for key in config.audit_scenarios:
        if step:
            step(f"membership audit {key}")
        result = audit.membership_audit(
            audit.SCENARIOS[key], config.audit_draws, config.audit_boots, config.seed
        )
        membership.append(
            {
                "key": key,
                **asdict(result),
                "control_above_chance": result.control_above_chance,
                "control_above_retrained": result.control_above_retrained,
            }  # fmt: skip
        )
    distinguishing = None
    if config.distinguish_draws:
        if step:
            step("distinguishing audit digits")
        distinguishing = asdict(
            audit.distinguishing_audit(audit.DIGITS, config.distinguish_draws, seed=config.seed)
        )
    return {"membership": membership, "distinguishing": distinguishing}


def run_study(config: StudyConfig | None = None, show_progress: bool = True) -> dict[str, Any]:
    """The three parts of the study; returns the report dict (config, utility rows, cost rows,
    audits)."""
    from edgekit.progress import step_progress

    config = config or StudyConfig()
    total = len(config.dims) * len(config.forget_sizes) + 2 * len(config.forget_sizes)
    total += len(config.audit_scenarios) + bool(config.distinguish_draws)
    started = time.perf_counter()
    with step_progress("certified unlearning", total, show_progress) as step:
        utility = utility_rows(config, step)
        cost = cost_rows(config, step)
        audits = audit_rows(config, step)
    return {
        "config": asdict(config),
        "utility": utility,
        "cost": cost,
        **audits,
        "seconds": time.perf_counter() - started,
    }


MODEL_LABELS = {
    "original": "original (before unlearning, no noise)",
    "skipped": "original + noise (steps skipped: broken)",
    "unlearned": "unlearned + noise (the release)",
    "retrained": "retrained + noise (reference)",
}


def _interval(cell: dict[str, float] | None, digits: int = 3, percent: bool = False) -> str:
    if cell is None:
        return "-"
    scale, unit = (100.0, " %") if percent else (1.0, "")
    value, low, high = (scale * cell[k] for k in ("value", "low", "high"))
    return f"{value:+.{digits}g}{unit} [{low:+.{digits}g}, {high:+.{digits}g}]"


def print_audit(report: dict[str, Any], console: Any) -> None:
    """The membership table (one block of rows per scenario), its verdict lines and the
    distinguisher's line."""
    from rich.table import Table

    membership = report.get("membership") or []
    if membership:
        cfg = report["config"]
        table = Table(
            title="membership-inference audit (loss threshold): AUC at telling forgotten rows "
            f"from held-out rows, {cfg['audit_draws']} noise draws, 95 % bootstrap intervals "
            "over rows"
        )
        for col in ("scenario", "f / held out", "model", "sigma", "attack AUC",
                    "AUC - retrained", "share of original's excess"):  # fmt: skip
            table.add_column(col, justify="right" if col != "model" else "left")
        for entry in membership:
            for i, row in enumerate(entry["rows"]):
                auc = row["auc"]
                table.add_row(
                    entry["key"] if i == 0 else "",
                    f"{entry['members']} / {entry['nonmembers']}" if i == 0 else "",
                    MODEL_LABELS.get(row["model"], row["model"]), f"{row['sigma']:.3g}",
                    f"{auc['value']:.3f} [{auc['low']:.3f}, {auc['high']:.3f}]",
                    _interval(row["minus_reference"]),
                    _interval(row["share_of_control"], percent=True),
                )  # fmt: skip
            table.add_section()
        console.print(table)
        for entry in membership:
            chance = "above chance" if entry["control_above_chance"] else "NOT above chance"
            power = (
                "the paired comparison finds it (the audit has power here)"
                if entry["control_above_retrained"]
                else "nor above the retrained model's: the audit has NO power on this scenario"
            )
            console.print(f"{entry['key']}: the original model's AUC is {chance}; {power}")
    found = report.get("distinguishing")
    if found:
        console.print(
            "distinguisher (knows the forget set, digits): AUC unlearned vs retrained "
            f"{found['unlearned_auc']['value']:.3f} [{found['unlearned_auc']['low']:.3f}, "
            f"{found['unlearned_auc']['high']:.3f}]; steps skipped vs retrained "
            f"{found['control_auc']['value']:.3f} [{found['control_auc']['low']:.3f}, "
            f"{found['control_auc']['high']:.3f}]"
        )


def print_report(report: dict[str, Any], console: Any) -> None:
    """Rich tables: utility (d, f), cost (in/out, f) and the audits (``print_audit``)."""
    from rich.table import Table

    cfg = report["config"]
    utility = Table(
        title=f"test loss: retrain vs unlearn ({cfg['unlearn_steps']} GD steps) vs DP, "
        f"(q, eps) = ({cfg['q']}, {cfg['eps']}), n = {cfg['n']}, lam = {cfg['lam']}"
    )
    for col in ("d", "f", "retrain", "unlearn", "DP", "sigma unlearn", "sigma DP"):
        utility.add_column(col, justify="right")
    for r in report["utility"]:
        utility.add_row(
            str(r["dim"]), str(r["forget"]), f"{r['retrain_loss']:.4f}", f"{r['unlearn_loss']:.4f}",
            f"{r['dp_loss']:.4f}", f"{r['unlearn_sigma']:.3g}", f"{r['dp_sigma']:.3g}",
        )  # fmt: skip
    console.print(utility)
    cost = Table(
        title=f"GD steps on the retain set to reach sigma = {cfg['target_sigma']} "
        f"(d = {cfg['cost_dim']}, OOD norm {cfg['ood_norm']}): certified / empirical"
    )
    for col in ("forget data", "f", "ERM start", "trimmed-mean start", "retrain from 0"):
        cost.add_column(col, justify="right")
    for r in report["cost"]:
        cells = [
            f"{r[f'{k}_certified_steps']} / {r[f'{k}_empirical_steps']}"
            for k in ("erm", "robust", "retrain")
        ]
        cost.add_row(r["forget_data"], str(r["forget"]), *cells)
    console.print(cost)
    print_audit(report, console)


def plot_report(report: dict[str, Any], path: Path) -> None:
    """study.png: test loss vs f per d (three methods) and steps vs f (in/out, ERM/robust)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    dims = sorted({r["dim"] for r in report["utility"]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for color, dim in zip(colors, dims, strict=False):
        rows = [r for r in report["utility"] if r["dim"] == dim]
        f = [r["forget"] for r in rows]
        ax1.plot(f, [r["retrain_loss"] for r in rows], ":", color=color, label=f"retrain d={dim}")
        ax1.plot(f, [r["unlearn_loss"] for r in rows], "o-", color=color, label=f"unlearn d={dim}")
        ax1.plot(f, [r["dp_loss"] for r in rows], "x--", color=color, label=f"DP d={dim}")
    ax1.set(xscale="log", yscale="log", xlabel="forget-set size f", ylabel="test loss")
    ax1.set_title("utility at a fixed (q, eps)")
    ax1.legend(fontsize=7, ncol=3)
    styles = {("erm", "in"): "o-", ("erm", "out"): "o--", ("robust", "in"): "s-"}
    styles[("robust", "out")] = "s--"
    for (method, where), style in styles.items():
        rows = [r for r in report["cost"] if r["forget_data"] == where]
        ax2.plot(
            [r["forget"] for r in rows],
            [max(r[f"{method}_certified_steps"], 1) for r in rows],
            style,
            label=f"{'ERM' if method == 'erm' else 'trimmed mean'}, {where}-distribution",
        )
    retrain = [r["retrain_certified_steps"] for r in report["cost"]]
    ax2.axhline(max(retrain), color="k", lw=1, label="retrain from 0")
    ax2.set(xscale="log", yscale="log", xlabel="forget-set size f", ylabel="certified GD steps")
    ax2.set_title("unlearning cost, in vs out of distribution")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_study(
    out: Path, show_progress: bool = True, config: StudyConfig | None = None
) -> dict[str, Any]:
    """Run, print, write report.json and study.png under ``out``; returns the report."""
    from edgekit.cache import atomic_write_text
    from edgekit.console import wide_console

    report = run_study(config, show_progress)
    console = wide_console()
    print_report(report, console)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, default=float))
    plot_report(report, out / "study.png")
    console.print(f"wrote {out / 'report.json'} and {out / 'study.png'}")
    return report


def run(card: ModelCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval certified-unlearning`` (``edgekit.study.Study``);
    its settings are fixed: the card's options do not change them."""
    return write_study(Path(out), show_progress)
