"""plan.md's section on the input shapes a plan serves: the range (declared or derived), the
tuned shape, and per verified point its weight, the default's and the plan's latency timed
alone, the speed-up and the accuracy loss; and the plot of speed-up along the dim that varies."""
from __future__ import annotations

from pathlib import Path
from typing import Any

SHAPES_PLOT = "speedup_by_shape.png"


def _ok(x: Any) -> bool:
    return isinstance(x, (int, float)) and x == x


def _shape_words(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{name} {list(dims)}" for name, dims in shapes.items())


def _range_words(ranges: dict[str, list]) -> str:
    def dim(d) -> str:
        if isinstance(d, int):
            return str(d)
        return f"{d[0]}..{d[1]}" + (f" step {d[2]}" if len(d) > 2 else "")
    return ", ".join(f"{name} [{', '.join(dim(d) for d in dims)}]" for name, dims in ranges.items())


def shapes_section(plan: dict) -> list[str]:
    """The markdown lines (none when the plan serves one shape)."""
    shapes = plan.get("shapes")
    if not shapes:
        return []
    origin = ("declared by model.shape_range" if shapes.get("declared") else
              "no model.shape_range: the model keeps every symbolic dim and was verified at half and double the "
              "tuned size along each")
    out = ["## Shapes served", "",
           f"Range: {_range_words(shapes.get('range') or {})} ({origin}); tuned at "
           f"{_shape_words(shapes.get('tuned') or {})}. The delivered model.onnx keeps the symbolic dims.", ""]
    rows = []
    for p in shapes.get("points") or []:
        d, m = p.get("default_ms"), p.get("plan_ms")
        rows.append((p["name"], _shape_words(p.get("shapes") or {}), f"{p.get('weight', 0):.2f}",
                     f"{d:.4g}" if _ok(d) else "-", f"{m:.4g}" if _ok(m) else "-",
                     f"{d / m:.2f}x" if _ok(d) and _ok(m) and m > 0 else "-",
                     f"{p['accuracy_loss']:.3g}" if _ok(p.get("accuracy_loss")) else "-"))
    out += ["| point | shapes | weight | default ms | plan ms | speed-up | accuracy loss |",
            "|---|---|---|---|---|---|---|", *("| " + " | ".join(r) + " |" for r in rows), ""]
    agg = shapes.get("aggregate_ratio")
    out.append("Latencies: the plan and the default timed alone together at each point; accuracy loss at the tuned "
               "shape on the judging samples, elsewhere on data.inputs' samples of that shape or else random inputs, "
               "against the original model"
               + (f"; weighted speed-up {1 / agg:.2f}x." if _ok(agg) and agg > 0 else "."))
    if shapes.get("not_verified"):
        out += [""] + [f"- {w}" for w in shapes["not_verified"]]
    return out + [""]


def _varying_axis(points: list[dict]) -> tuple[str, int] | None:
    """(input, axis) of the first dim whose size differs between the points."""
    first = points[0].get("shapes") or {}
    for name, dims in first.items():
        for axis in range(len(dims)):
            if len({tuple((p.get("shapes") or {}).get(name, []))[axis:axis + 1] for p in points}) > 1:
                return name, axis
    return None


def write_shapes_plot(plan: dict, folder: Path) -> list[tuple[str, str]]:
    """The speed-up at each timed point against the size of the dim that varies; nothing when
    fewer than two points were timed."""
    points = [p for p in (plan.get("shapes") or {}).get("points") or []
              if _ok(p.get("default_ms")) and _ok(p.get("plan_ms")) and p["plan_ms"] > 0]
    where = _varying_axis(points) if len(points) > 1 else None
    if where is None:
        return []
    import matplotlib      # here, not at import: only a finished run pays for it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name, axis = where
    pts = sorted(((p["shapes"][name][axis], p["default_ms"] / p["plan_ms"], p["name"]) for p in points))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker="o")
    for x, y, label in pts:
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_xlabel(f"{name} axis {axis}")
    ax.set_ylabel("speed-up over the default (x)")
    ax.set_title("speed-up across the shape range (timed alone with the default)", fontsize=10)
    fig.tight_layout()
    fig.savefig(folder / SHAPES_PLOT, dpi=90)
    plt.close(fig)
    return [("Speed-up across the shape range", SHAPES_PLOT)]
