"""The suite's PNG plots, drawn from the results dict (Agg backend: no display needed)."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from peers import NAMES  # noqa: E402

LOSS_FLOOR = 1e-9    # lossless plans (loss ~1e-16) drawn at this floor of the log axis


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both latency and loss (lower is better), by latency."""
    front, best = [], math.inf
    for x, y in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    return front


def _candidates(m: dict) -> list[tuple[float, float, str]]:
    """(latency / default, loss, label) of the default plan and every verified candidate."""
    base = m["default_ms"]
    pts = [(1.0, max(m["default_loss"] or 0.0, LOSS_FLOOR), "default")]
    for c in m["candidates"]:
        if c.get("measured_ms") and c.get("accuracy_loss") is not None:
            pts.append((c["measured_ms"] / base, max(c["accuracy_loss"], LOSS_FLOOR), c["label"]))
    return pts


def pareto(models: list[dict], out: Path) -> Path:
    ok = [m for m in models if not m.get("error")]
    cols = 4
    rows = max(1, math.ceil(len(ok) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, m in zip(axes.flat, ok):
        pts = _candidates(m)
        ax.scatter([p[0] for p in pts[1:]], [p[1] for p in pts[1:]], s=18, label="verified candidates")
        ax.scatter([1.0], [pts[0][1]], marker="s", color="black", s=24, label="default")
        front = pareto_front([(x, y) for x, y, _ in pts])
        ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="tab:red", lw=1, marker="o",
                mfc="none", ms=8, label="Pareto front")
        c = m.get("compare") or {}
        base = (c.get("ort_default") or {}).get("latency_ms")
        for k, mk in (("ort_static", "^"), ("ort_dynamic", "v"), ("ov_default", "D"), ("ov_f32", "d"),
                      ("ov_nncf_int8", "P")):
            v = c.get(k) or {}
            if base and v.get("latency_ms"):
                ax.scatter([v["latency_ms"] / base], [max(v["accuracy_loss"], LOSS_FLOOR)], marker=mk, s=30,
                           label=NAMES[k])
        _log_axes(ax, y_plain=False)
        ax.set_title(f"{m['name']} ({m['decision']})", fontsize=9)
        ax.set_xlabel("latency / default", fontsize=8)
        ax.set_ylabel("accuracy loss", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(ok):]:
        ax.axis("off")
    if ok:
        axes.flat[0].legend(fontsize=6)
    fig.suptitle("cpu (measured): verified candidates, latency vs accuracy loss", fontsize=10)
    fig.tight_layout()
    return _save(fig, out / "pareto.png")


def predicted_vs_measured(models: list[dict], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5.5, 5))
    lo, hi = math.inf, 0.0
    for m in models:
        if m.get("error"):
            continue
        pts = [(m["default_predicted_ms"], m["default_ms"])] + [(c["predicted_ms"], c["measured_ms"])
                                                                 for c in m["candidates"]]
        pts = [(p, q) for p, q in pts if p and q and p > 0 and q > 0]
        if pts:
            ax.scatter([p for p, _ in pts], [q for _, q in pts], s=16, label=m["name"])
            lo, hi = min(lo, *(min(p, q) for p, q in pts)), max(hi, *(max(p, q) for p, q in pts))
    if hi > 0:
        xs = [lo / 1.5, hi * 1.5]
        ax.plot(xs, xs, color="black", lw=0.8, label="predicted = measured")
        ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="grey", alpha=0.2, label="±10 %")
    _log_axes(ax)
    ax.set_xlabel("predicted latency (ms)")
    ax.set_ylabel("measured latency (ms)")
    ax.set_title("cpu: adapt's predictions vs its verify measurements", fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return _save(fig, out / "predicted_vs_measured.png")


def search_time(models: list[dict], scaling: list[dict] | None, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    if scaling:
        ax.plot([r["nodes"] for r in scaling], [r["search_s"] for r in scaling], "o-",
                label=f"generated residual CNNs, {scaling[0]['target']} (modeled), beam {scaling[0]['beam']} depth "
                      f"{scaling[0]['depth']}")
    ok = [m for m in models if not m.get("error") and m["timings"].get("search_s")]
    ax.scatter([m["nodes"] for m in ok], [m["timings"]["search_s"] for m in ok], color="tab:orange",
               label="adapt runs on cpu (suite's search config)")
    for m in ok:
        ax.annotate(m["name"], (m["nodes"], m["timings"]["search_s"]), fontsize=6)
    _log_axes(ax)
    ax.set_xlabel("nodes (after normalize)")
    ax.set_ylabel("search time (s)")
    ax.set_title("search time vs graph size", fontsize=10)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return _save(fig, out / "search_time_vs_nodes.png")


def _log_axes(ax, y_plain: bool = True) -> None:
    """Log scales with plain tick labels (0.2, 0.5, 1, 2 rather than 2x10^-1), minor labels off;
    y_plain=False keeps powers of ten (accuracy loss spans many decades)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in [ax.xaxis] + ([ax.yaxis] if y_plain else []):
        axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(ticker.FormatStrFormatter("%.3g"))
        axis.set_minor_formatter(ticker.NullFormatter())


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
