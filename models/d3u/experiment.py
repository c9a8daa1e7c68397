"""D3U study on synthetic heteroscedastic series: CRPS and MSE of

- point + Gaussian: the point forecaster with one residual std per channel (from training);
- diffusion on raw targets: PatchDN sampling the target from the history alone;
- D3U: point forecast + PatchDN residual samples (DDIM, 20 steps).

Also the 90 % interval coverage and the correlation of the predicted spread with the true noise
scale, and 95 % bootstrap intervals over the test windows of each method's CRPS / MSE and of
D3U's paired differences with the two baselines (``paired`` in the report). Models are cached (``train.py``); the first run trains for a few minutes on one thread.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.d3u.evaluate import d3u_score, score_gaussian
from edgekit.models.d3u.graphs import d3u_graphs
from edgekit.models.d3u.metrics import crps_gaussian, crps_samples
from edgekit.models.d3u.train import D3UConfig, train_d3u, train_raw_diffusion
from edgekit.numeric import bootstrap_interval
from edgekit.runtimes.torch import eager_runners
from edgekit.study import save_figure, write_study

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.d3u.card import D3UCard

METHODS = ("point+gaussian", "raw diffusion", "D3U")


def per_window(
    samples: np.ndarray | None, point: np.ndarray, std: np.ndarray | None, target: np.ndarray
) -> dict[str, np.ndarray]:
    """CRPS and MSE of each test window (B,): of ensemble ``samples`` (S, B, C, H), or of
    N(point, std^2) with ``std`` (C,) when ``samples`` is None."""
    if samples is None:
        full = np.broadcast_to(std[None, :, None], point.shape)
        crps = [crps_gaussian(point[b], full[b], target[b]) for b in range(len(target))]
        mean = point
    else:
        crps = [crps_samples(samples[:, b], target[b]) for b in range(len(target))]
        mean = samples.mean(axis=0)
    return {
        "crps": np.array(crps),
        "mse": ((mean - target) ** 2).reshape(len(target), -1).mean(axis=1),
    }


def window_intervals(windows: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """95 % bootstrap intervals over test windows: each method's CRPS / MSE (``intervals``)
    and D3U minus each baseline on the same resampled windows (``paired``; below 0 = D3U
    better)."""
    n = len(windows["D3U"]["crps"])
    intervals = {
        m: {k: list(bootstrap_interval(lambda i, v=v: float(v[i].mean()), n)) for k, v in w.items()}
        for m, w in windows.items()
    }
    paired = {
        f"D3U - {base}": {
            k: [
                float((windows["D3U"][k] - windows[base][k]).mean()),
                *bootstrap_interval(
                    lambda i, d=windows["D3U"][k] - windows[base][k]: float(d[i].mean()), n
                ),
            ]
            for k in ("crps", "mse")
        }
        for base in METHODS[:2]
    }
    return {"intervals": intervals, "paired": paired}


def run_study(
    config: D3UConfig | None = None, samples: int = 32, steps: int = 20, show_progress: bool = True
) -> dict[str, Any]:
    """Train (or load) both diffusion models and score the three methods on the test windows."""
    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    config = config or D3UConfig()
    data = config.data()
    test = data["test"]
    with step_progress("d3u study", 4, show_progress) as step:
        step("train point model + residual PatchDN")
        d3u = train_d3u(config)
        step("train PatchDN on raw targets")
        raw = train_raw_diffusion(config)
        step("sample D3U and raw diffusion")
        d3u_runners = eager_runners(
            d3u_graphs(d3u.point, d3u.denoiser, test.history[:2], config.horizon)
        )
        raw_runners = eager_runners(
            d3u_graphs(None, raw.denoiser, test.history[:2], config.horizon)
        )
        schedule = config.schedule()
        d3u_metrics, d3u_samples = d3u_score(d3u_runners, test, schedule, samples, steps)
        raw_metrics, raw_samples = d3u_score(
            raw_runners, test, schedule, samples, steps, residual=False
        )
        step("point + gaussian")
        train = data["train"]
        with torch.no_grad():
            train_point = d3u.point(torch.from_numpy(train.history)).numpy()
            test_point = d3u.point(torch.from_numpy(test.history)).numpy()
        std = (train.target - train_point).std(axis=(0, 2))  # (C,)
        gauss_metrics = score_gaussian(test_point, std, test)
        windows = {
            "point+gaussian": per_window(None, test_point, std, test.target),
            "raw diffusion": per_window(raw_samples, test_point, None, test.target),
            "D3U": per_window(d3u_samples, test_point, None, test.target),
        }
    rows = {
        "point+gaussian": gauss_metrics | {"train_seconds": d3u.seconds},
        "raw diffusion": raw_metrics | {"train_seconds": raw.seconds},
        "D3U": d3u_metrics | {"train_seconds": d3u.seconds},
    }
    example = {
        "history": test.history[0].tolist(),
        "target": test.target[0].tolist(),
        "sigma": test.sigma[0].tolist(),
        "point": test_point[0].tolist(),
        "d3u_quantiles": np.quantile(d3u_samples[:, 0], [0.05, 0.5, 0.95], axis=0).tolist(),
        "raw_quantiles": np.quantile(raw_samples[:, 0], [0.05, 0.5, 0.95], axis=0).tolist(),
        "d3u_spread": d3u_samples.std(axis=0).ravel()[::7].tolist(),
        "raw_spread": raw_samples.std(axis=0).ravel()[::7].tolist(),
        "true_sigma": test.sigma.ravel()[::7].tolist(),
    }
    return {
        "config": asdict(config),
        "samples": samples,
        "ddim_steps": steps,
        "test_windows": len(test),
        "gaussian_std": std.tolist(),
        "rows": rows,
        **window_intervals(windows),
        "example": example,
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    table = Table(
        title=f"D3U on {report['test_windows']} test windows ({report['samples']} samples, "
        f"DDIM {report['ddim_steps']} steps): lower CRPS / MSE is better, coverage target 0.90"
    )
    for col in (
        "method",
        "CRPS",
        "MSE (mean)",
        "MSE (point)",
        "90% coverage",
        "corr(spread, sigma)",
        "train s",
    ):
        table.add_column(col, justify="left" if col == "method" else "right")
    for name in METHODS:
        r = report["rows"][name]
        corr = (
            "-"
            if r["spread_sigma_corr"] != r["spread_sigma_corr"]
            else f"{r['spread_sigma_corr']:.3f}"
        )
        table.add_row(
            name,
            f"{r['crps']:.4f}",
            f"{r['mse']:.4f}",
            f"{r['point_mse']:.4f}",
            f"{r['coverage90']:.3f}",
            corr,
            f"{r['train_seconds']:.0f}",
        )
    wide_console().print(table)
    for pair, cells in report.get("paired", {}).items():
        wide_console().print(
            f"{pair} (95 % bootstrap over windows; below 0: D3U better): "
            + "; ".join(
                f"{k.upper()} {v[0]:+.4f} [{v[1]:+.4f}, {v[2]:+.4f}]" for k, v in cells.items()
            )
        )


def plot(report: dict[str, Any], path: Path) -> Path:
    """An example forecast with 90 % bands; CRPS / MSE bars; predicted spread vs true sigma."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ex = report["example"]
    fig, (ax_ex, ax_bar, ax_sp) = plt.subplots(1, 3, figsize=(16, 4.5))
    hist, target = np.asarray(ex["history"][0]), np.asarray(ex["target"][0])
    lookback, horizon = len(hist), len(target)
    future = np.arange(lookback, lookback + horizon)
    ax_ex.plot(np.arange(lookback), hist, color="k", lw=1, label="history")
    ax_ex.plot(future, target, color="k", ls="--", lw=1, label="truth")
    ax_ex.plot(future, ex["point"][0], color="tab:blue", label="point forecast")
    d3u, raw = np.asarray(ex["d3u_quantiles"]), np.asarray(ex["raw_quantiles"])
    ax_ex.fill_between(future, d3u[0, 0], d3u[2, 0], alpha=0.3, color="tab:green", label="D3U 90%")
    ax_ex.fill_between(
        future, raw[0, 0], raw[2, 0], alpha=0.2, color="tab:red", label="raw diffusion 90%"
    )
    ax_ex.set(title="test window 0, channel 0", xlabel="time step")
    ax_ex.legend(fontsize=7)
    rows = report["rows"]
    x = np.arange(len(METHODS))
    ax_bar.bar(x - 0.2, [rows[m]["crps"] for m in METHODS], 0.4, label="CRPS")
    ax_bar.bar(x + 0.2, [rows[m]["mse"] for m in METHODS], 0.4, label="MSE")
    ax_bar.set_xticks(x, METHODS)
    ax_bar.set(title="test CRPS and MSE (lower is better)")
    ax_bar.legend(fontsize=8)
    sigma = np.asarray(ex["true_sigma"])
    ax_sp.scatter(sigma, ex["d3u_spread"], s=3, alpha=0.4, label="D3U", color="tab:green")
    ax_sp.scatter(sigma, ex["raw_spread"], s=3, alpha=0.4, label="raw diffusion", color="tab:red")
    for c, s in enumerate(report["gaussian_std"]):
        ax_sp.axhline(
            s, color="tab:blue", lw=0.8, ls=":", label="point+gaussian std" if c == 0 else None
        )
    ax_sp.plot([0, sigma.max()], [0, sigma.max()], color="k", lw=0.8)
    ax_sp.set(
        xlabel="true noise sigma",
        ylabel="predicted spread (sample std)",
        title="heteroscedastic spread",
    )
    ax_sp.legend(fontsize=7)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: D3UConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its table, write ``report.json`` and ``d3u.png`` under ``out``."""
    return write_study(
        run_study(config, show_progress=show_progress), out, print_table, plot, "d3u.png"
    )


def run(card: D3UCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval d3u`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
