"""Predicted vs measured whole-model latency, log-log, one colour per model, with the y = x
line and the +-10 % band: the picture of the leave-one-model-out validation."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")           # files only: no display on the machines this runs on
import matplotlib.pyplot as plt  # noqa: E402

from metainfer_core.predictor.lifecycle.validation import Scored  # noqa: E402


def predicted_vs_measured(scored: list[Scored], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 6.0), dpi=110)
    models = sorted({s.model for s in scored})
    cmap = plt.get_cmap("tab10")
    for i, m in enumerate(models):
        pts = [s for s in scored if s.model == m]
        ax.scatter([s.measured_ms for s in pts], [s.predicted_ms for s in pts], s=18, alpha=0.8,
                   color=cmap(i % 10), label=m)
    values = [v for s in scored for v in (s.measured_ms, s.predicted_ms) if v > 0]
    if values:
        lo, hi = min(values) / 1.3, max(values) * 1.3
        ax.plot([lo, hi], [lo, hi], color="black", lw=1)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2,
                        label="±10 %")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured latency (ms)")
    ax.set_ylabel("predicted latency (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
