"""Matplotlib figures for the HTML report, returned as inline SVG text (no files, no network)."""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable

import matplotlib
from matplotlib.figure import Figure

from reports.coverage import LevelCoverage
from reports.history import RunPoint

# Style applied per figure (rc_context), not globally: importing this module changes nothing.
_RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "harness-report",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_STAGE_ORDER = ("load", "forward", "backward", "compile", "numerics", "on_device")


def _styled(fn: Callable[..., str | None]) -> Callable[..., str | None]:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(_RC):
            return fn(*args, **kwargs)

    return wrapper


def _svg(fig: Figure) -> str:
    """Figure -> inline <svg> text (no pyplot, so no GUI backend and no global figure state)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return re.sub(r"^.*?(<svg)", r"\1", text, count=1, flags=re.S)  # drop the XML prolog and DOCTYPE


@_styled
def history_svg(points: list[RunPoint]) -> str | None:
    """Pass rate (% of cases) per stage over the last runs, one panel per tier."""
    tiers = sorted({t for p in points for (t, _) in p.rates})
    if not tiers:
        return None
    fig = Figure(figsize=(3.6 * len(tiers) + 0.8, 2.8))
    axes = fig.subplots(1, len(tiers), squeeze=False, sharey=True)
    labels = [p.label for p in points]
    for ax, tier in zip(axes[0], tiers):
        stages = sorted(
            {s for p in points for (t, s) in p.rates if t == tier},
            key=lambda s: (_STAGE_ORDER.index(s) if s in _STAGE_ORDER else 99, s),
        )
        for stage in stages:
            ys = []
            for p in points:
                passed, total = p.rates.get((tier, stage), (0, 0))
                ys.append(100.0 * passed / total if total else float("nan"))
            ax.plot(range(len(points)), ys, marker="o", label=stage)
        ax.set_title(tier)
        ax.set_ylim(-5, 105)
        ax.set_xticks(range(len(points)), labels, rotation=45, ha="right")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    axes[0][0].set_ylabel("pass rate (% of cases)")
    return _svg(fig)


@_styled
def levels_svg(levels: list[LevelCoverage]) -> str | None:
    """Share of models (and of downloads) that load, compute, run fully on device, per tier."""
    if not levels:
        return None
    fig = Figure(figsize=(7.5, 0.45 * len(levels) + 0.9))
    ax = fig.subplots()
    names = [f"{lv.tier}: {lv.level}" for lv in levels][::-1]
    models = [100.0 * lv.models_reached / lv.models if lv.models else 0.0 for lv in levels][::-1]
    weight = [100.0 * lv.weight_reached / lv.weight if lv.weight else 0.0 for lv in levels][::-1]
    ys = range(len(levels))
    ax.barh([y + 0.2 for y in ys], models, height=0.38, label="% of models", color="#3b7dd8")
    ax.barh([y - 0.2 for y in ys], weight, height=0.38, label="% of downloads", color="#e69b2f")
    ax.set_yticks(list(ys), names)
    ax.set_xlim(0, 100)
    ax.set_xlabel("%")
    ax.legend(fontsize=7, loc="lower right")
    return _svg(fig)


@_styled
def fallback_svg(top_ops: list[dict]) -> str | None:
    """Fallback ops by the number of models they keep off the device."""
    ops = top_ops[:12]
    if not ops:
        return None
    fig = Figure(figsize=(7.5, 0.32 * len(ops) + 0.9))
    ax = fig.subplots()
    ax.barh(range(len(ops))[::-1], [o["models_blocked"] for o in ops], color="#c44e52")
    ax.set_yticks(range(len(ops))[::-1], [f"{o['op']} ({o['tier']})" for o in ops])
    ax.set_xlabel("models blocked")
    ax.xaxis.get_major_locator().set_params(integer=True)
    return _svg(fig)


@_styled
def heatmap_svg(grid: dict) -> str | None:
    """Native pass rate per op family (rows) and dtype (columns); empty cells: no sample CPU can run."""
    families, dtypes = grid.get("families") or [], grid.get("dtypes") or []
    if not families or not dtypes:
        return None
    import numpy as np

    rate = np.array([[np.nan if v is None else 100.0 * v for v in row] for row in grid["rate"]], dtype=float)
    fig = Figure(figsize=(0.62 * len(dtypes) + 2.6, 0.3 * len(families) + 1.4))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#eeeeee")
    image = ax.imshow(np.ma.masked_invalid(rate), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    ax.set_xticks(range(len(dtypes)), dtypes, rotation=60, ha="right")
    ax.set_yticks(range(len(families)), families)
    for i, row in enumerate(grid["n"]):
        for j, n in enumerate(row):
            if n:
                ax.text(j, i, f"{rate[i, j]:.0f}", ha="center", va="center", fontsize=6.5, color="#1d2330")
    fig.colorbar(image, ax=ax, label="% native pass (forward)", shrink=0.8)
    return _svg(fig)
