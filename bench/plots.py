"""The suite's PNG plots, drawn from the results dict (Agg backend: no display needed)."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from metainfer_core.plan.plots import STYLE, loss_axis  # noqa: E402
from bench.labels import NAMES, PEERS, PLANS  # noqa: E402


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both latency and loss (lower is better), by latency."""
    front, best = [], math.inf
    for x, y in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    return front


def _chosen(m: dict, c: dict) -> bool:
    """The candidate adapt chose (its verdict; in a results.json from before verdicts were kept,
    the adapted plan's measured latency)."""
    if "verdict" in c:
        return (c.get("verdict") or "").startswith("chosen")
    return m["decision"] == "adapted" and c.get("measured_ms") == m.get("adapted_ms")


def _points(m: dict) -> list[dict]:
    """latency / default, loss, label (number and action kinds), role of the default and every
    verified candidate of one model."""
    base = m["default_ms"]
    pts = [{"x": 1.0, "loss": m["default_loss"] or 0.0, "label": "default", "role": "default"}]
    for c in m["candidates"]:
        if c.get("measured_ms") and c.get("accuracy_loss") is not None:
            kinds = "+".join(k for k in c.get("actions") or [] if k != "binding") or "binding"
            pts.append({"x": c["measured_ms"] / base, "loss": c["accuracy_loss"],
                        "label": f"{c['label'].replace('candidate', '#')} {kinds}",
                        "role": "chosen" if _chosen(m, c) else "candidate"})
    return pts


# each peer's marker, then meta-infer's other plan (weights=latency); the chosen plan has its own style
MARKERS = dict(zip((*PEERS[1:], PLANS[1]), "^vDdPXh", strict=True))


def pareto(models: list[dict], out: Path) -> list[Path]:
    """One panel per model, `pareto_<model>.png`: every verified plan's latency (over the default's)
    against its accuracy loss, each labelled with its actions, the default and the chosen plan
    marked, the Pareto front, the peers of the same comparison run and the accuracy bound; zero
    loss at a labelled 0 (plan_plots.loss_axis)."""
    files = []
    for m in [m for m in models if not m.get("error")]:
        pts = _points(m)
        fig, ax = plt.subplots(figsize=(7, 4.6))
        peers = []
        c = m.get("compare") or {}
        base = (c.get("ort_default") or {}).get("latency_ms")
        for k, mk in MARKERS.items():
            v = c.get(k) or {}
            if base and v.get("latency_ms") and v.get("accuracy_loss") is not None:
                peers.append((v["latency_ms"] / base, v["accuracy_loss"], mk, NAMES[k]))
        loss_axis(ax, [p["loss"] for p in pts] + [p[1] for p in peers], m.get("accuracy_bound"))
        front = pareto_front([(p["x"], p["loss"]) for p in pts])
        ax.step([x for x, _ in front], [y for _, y in front], where="post", color="tab:red", lw=1, alpha=0.6,
                label="Pareto front")
        for role, style in STYLE.items():
            sel = [p for p in pts if p["role"] == role]
            if sel:
                ax.scatter([p["x"] for p in sel], [p["loss"] for p in sel], label=role, **style)
        for x, y, mk, name in peers:
            ax.scatter([x], [y], marker=mk, s=34, label=f"{name} (peer)", alpha=0.8)
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
        _labels(ax, pts)
        ax.set_title(f"{m['name']} on cpu (measured): {m['decision']}, verified plans", fontsize=10)
        ax.set_xlabel("latency / default (lower is faster)")
        ax.set_ylabel("accuracy loss (0 = lossless)")
        ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        files.append(_save(fig, out / f"pareto_{m['name']}.png"))
    return files


def _labels(ax, pts: list[dict], near_px: float = 14) -> None:
    """Each point's label beside it; points drawn within `near_px` of each other share one."""
    ax.autoscale_view()
    groups: list[tuple[tuple[float, float], list[dict]]] = []
    for p in pts:
        at = ax.transData.transform((p["x"], p["loss"]))
        near = next((g for g in groups if math.dist(g[0], at) < near_px), None)
        if near:
            near[1].append(p)
        else:
            groups.append((tuple(at), [p]))
    placed: list[tuple[float, float, float, float]] = []     # label boxes drawn so far (pixels)
    scale = ax.figure.dpi / 72
    for at, group in groups:
        text = ", ".join(p["label"] for p in group)
        w, h = len(text) * 7 * 0.55 * scale, 9 * scale
        for dx, dy in ((6, 4), (6, -12), (6, 14), (6, -22), (6, 24), (-8 - w / scale, 4), (6, -32)):
            x0, y0 = at[0] + dx * scale, at[1] + dy * scale
            box = (x0, y0, x0 + w, y0 + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
        placed.append(box)
        ax.annotate(text, (group[0]["x"], group[0]["loss"]), textcoords="offset points", xytext=(dx, dy), fontsize=7)


def predicted_vs_measured(models: list[dict], out: Path) -> Path:
    """Every model's plans, predicted against measured latency, one colour per model; its
    default a square, its chosen plan a star."""
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    lo, hi = math.inf, 0.0
    ran = [m for m in models if not m.get("error")]
    palette = plt.cm.tab10 if len(ran) <= 10 else plt.cm.tab20      # tab20 pairs close shades: only when needed
    for i, m in enumerate(ran):
        colour = palette(i % palette.N)
        pts = [(m["default_predicted_ms"], m["default_ms"], "default")] + [
            (c["predicted_ms"], c["measured_ms"], "chosen" if _chosen(m, c) else "candidate") for c in m["candidates"]]
        pts = [(p, q, r) for p, q, r in pts if p and q and p > 0 and q > 0]
        if not pts:
            continue
        for role, style in STYLE.items():
            sel = [(p, q) for p, q, r in pts if r == role]
            if sel:
                ax.scatter([p for p, _ in sel], [q for _, q in sel], label=m["name"] if role == "candidate" else None,
                           **dict(style, color=colour, edgecolors="black" if role != "candidate" else "none",
                                  linewidths=0.6))
        lo, hi = min(lo, *(min(p, q) for p, q, _ in pts)), max(hi, *(max(p, q) for p, q, _ in pts))
    if hi > 0:
        xs = [lo / 1.5, hi * 1.5]
        ax.plot(xs, xs, color="black", lw=0.8, label="predicted = measured")
        ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="grey", alpha=0.2, label="±10 %")
        ax.plot(xs, [2 * x for x in xs], color="grey", lw=0.8, ls=":", label="2x off")
        ax.plot(xs, [x / 2 for x in xs], color="grey", lw=0.8, ls=":")
    ax.scatter([], [], marker="s", color="white", edgecolors="black", label="default (square)")
    ax.scatter([], [], marker="*", s=150, color="white", edgecolors="black", label="chosen (star)")
    _log_axes(ax)
    ax.set_xlabel("predicted latency (ms)")
    ax.set_ylabel("measured latency (ms)")
    ax.set_title("cpu: adapt's predictions vs its verify measurements", fontsize=10)
    ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
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


def _log_axes(ax) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax.xaxis)
    _plain_log(ax.yaxis)


def _plain_log(axis) -> None:
    """Plain tick labels on a log axis (0.2, 0.5, 1, 2 rather than 2x10^-1), minor labels off."""
    axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FormatStrFormatter("%.3g"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
