"""plan.md's two plots, drawn from plan.json's content: latency vs accuracy loss of the default
and every verified candidate with the accuracy bound, and predicted vs measured latency per
plan. Default a black square, the chosen plan a red star, each point labelled with its number
and what it does (#2 int8 u8s8 + fused layers)."""
from __future__ import annotations

import math
from pathlib import Path

from metainfer_core.plan.report import plan_name

LOSS_PLOT = "latency_vs_loss.png"
PREDICTION_PLOT = "predicted_vs_measured.png"


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _points(plan: dict) -> list[dict]:
    """label, predicted ms, measured ms, loss, role (default | chosen | candidate) per measured plan."""
    b = plan.get("baseline") or {}
    pts = [{"label": "default", "predicted": b.get("predicted_latency_ms"), "measured": b.get("latency_ms"),
            "loss": b.get("accuracy_loss"), "role": "default"}]
    for c in plan.get("candidates") or []:
        m = c.get("measured") or {}
        label = f"{str(c.get('label', '?')).replace('candidate', '#')} {plan_name(c.get('actions') or [])}"
        pts.append({"label": label, "predicted": c.get("predicted_latency_ms"),
                    "measured": m.get("latency_ms"), "loss": m.get("accuracy_loss"),
                    "role": "chosen" if (c.get("verdict") or "").startswith("chosen") else "candidate"})
    return [p for p in pts if _ok(p["measured"])]


STYLE = {"default": dict(marker="s", color="black", s=46, zorder=3),
         "chosen": dict(marker="*", color="tab:red", s=150, zorder=4),
         "candidate": dict(marker="o", color="tab:blue", s=30, zorder=2)}


def _scatter(ax, pts: list[dict], x: str, y: str) -> None:
    for role in STYLE:
        sel = [p for p in pts if p["role"] == role and _ok(p[x]) and _ok(p[y])]
        if sel:
            ax.scatter([p[x] for p in sel], [p[y] for p in sel], label=role, **STYLE[role])
    at: dict[tuple[str, str], list[dict]] = {}       # plans measured alike share one label
    for p in pts:
        if _ok(p[x]) and _ok(p[y]):
            at.setdefault((f"{p[x]:.2g}", f"{p[y]:.2g}"), []).append(p)
    for group in at.values():
        below = any(p["role"] == "default" for p in group)     # under its marker: apart from a plan beside it
        ax.annotate(", ".join(p["label"] for p in group), (group[0][x], group[0][y]), textcoords="offset points",
                    xytext=(6, -11 if below else 4), fontsize=7)


LOSSLESS = 1e-12        # an accuracy loss below this is float rounding (2.2e-16): drawn at 0


def loss_axis(ax, losses: list[float], bound: float | None) -> None:
    """An accuracy-loss y axis that shows zero honestly: symlog, a lossless plan at a tick
    labelled 0 on a short linear stretch, the lossy ones on a log scale above it (down to a
    decade below the smallest), and the accuracy bound drawn as a dashed line."""
    from matplotlib import ticker

    lossy = [v for v in losses if v > LOSSLESS] + ([bound] if _ok(bound) and bound > 0 else [])
    floor = 10 ** math.floor(math.log10(min(lossy + [1e-3]))) / 10
    ax.set_yscale("symlog", linthresh=floor, linscale=0.5)
    top = max(lossy + [floor * 10])
    ax.set_ylim(-floor * 0.9, top * 3)      # room below 0 for the markers and labels there
    decades = range(int(round(math.log10(floor))) + 1, int(math.floor(math.log10(top * 3))) + 1)
    ax.yaxis.set_major_locator(ticker.FixedLocator([0.0] + [10.0 ** d for d in decades]))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: "0" if v == 0 else f"{v:.0e}".replace("e-0", "e-")))
    ax.yaxis.set_minor_locator(ticker.NullLocator())
    if _ok(bound):
        ax.axhline(bound, color="tab:red", ls="--", lw=1, label=f"accuracy bound {bound:g}")


def write_plots(plan: dict, folder: Path) -> list[tuple[str, str]]:
    """Write both plots into `folder`; returns (title, file name) of each written."""
    import matplotlib      # here, not at import: only a finished run pays for it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    pts = _points(plan)
    written = []
    fig, ax = plt.subplots(figsize=(7.4, 4))
    bound = plan.get("accuracy_bound")
    loss_axis(ax, [p["loss"] for p in pts if _ok(p["loss"])], bound)
    _scatter(ax, pts, "measured", "loss")
    _save(plt, fig, ax, "measured latency (ms, median)", "accuracy loss (0 = lossless)",
          "verified plans: latency vs accuracy loss", folder / LOSS_PLOT)
    written.append(("Latency vs accuracy loss", LOSS_PLOT))

    both = [p for p in pts if _ok(p["predicted"]) and p["predicted"] > 0 and p["measured"] > 0]
    if both:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        lo = min(min(p["predicted"], p["measured"]) for p in both) / 1.5
        hi = max(max(p["predicted"], p["measured"]) for p in both) * 1.5
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="measured = predicted")
        ax.plot([lo, hi], [2 * lo, 2 * hi], color="grey", lw=0.8, ls=":", label="2x off")
        ax.plot([lo, hi], [lo / 2, hi / 2], color="grey", lw=0.8, ls=":")
        _scatter(ax, both, "predicted", "measured")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
            axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            axis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        _save(plt, fig, ax, "predicted latency (ms)", "measured latency (ms)",
              "predictor: predicted vs measured per plan", folder / PREDICTION_PLOT)
        written.append(("Predicted vs measured latency", PREDICTION_PLOT))
    return written


def _save(plt, fig, ax, xlabel: str, ylabel: str, title: str, path: Path) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))     # beside the plot: no point hidden
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
