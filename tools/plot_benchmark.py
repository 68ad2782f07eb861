#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draw the plots of tools/benchmark.py from its ratios.csv (matplotlib, Agg backend).

One PNG per model: two rows (the plugin's speed-up over stock tf2onnx's Loop; the plugin's latency
over the unmasked native op's) by one column per fill ratio, latency ratio against batch size,
one colour per sequence length T, solid lines for 1 intra-op thread and dashed for all threads.
The points are ratios of medians; the bars span the interquartile range of the per-round ratios
(interleaved rounds, so each ratio pairs two runs made back to back). The y range follows the
points, so a noisy cell's bar may run off the plot (ratios.csv has p10 and p90 too). Rows of the
realistic length distributions (set "dist") get one more PNG per model: latency against fill.

    .venv/bin/python tools/plot_benchmark.py [docs/benchmark/ratios.csv] [--out DIR] [--fills 1.0 0.5]

tools/benchmark.py calls this itself at the end of a run; running it by hand redraws the plots
from a saved CSV.
"""

from __future__ import annotations

import argparse
import csv
import math
import os

MODEL_TITLES = {"lstm": "Embedding(1000, 64, mask_zero=True) -> LSTM(128, return_sequences=True)",
                "bilstm": "Embedding(1000, 64, mask_zero=True) -> Bidirectional(LSTM(128, return_sequences=True))",
                "gru": "Embedding(1000, 64, mask_zero=True) -> GRU(128, return_sequences=True)"}
FILE_NAMES = {"lstm": "benchmark.png", "bilstm": "benchmark_bidirectional.png", "gru": "benchmark_gru.png"}
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def read_rows(path: str) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _num(row: dict, key: str) -> float:
    value = row.get(key, "")
    return float(value) if value not in ("", None) else float("nan")


def _rows_per_model(csv_path: str, row_set: str):
    """(model, its rows) for each model with rows of this set ("grid" or "dist") in the CSV."""
    rows = [r for r in read_rows(csv_path) if r["set"] == row_set]
    for model in MODEL_TITLES:
        mine = [r for r in rows if r["model"] == model]
        if mine:
            yield model, mine


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(plt, figure, path: str) -> str:
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot(csv_path: str, out_dir: str, fills=(1.0, 0.5), subtitle: str = "") -> list[str]:
    """Write one PNG per model found in csv_path; returns the paths written."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = _pyplot()
    written = []
    for model, mine in _rows_per_model(csv_path, "grid"):
        times = sorted({int(r["time"]) for r in mine})
        threads = sorted({int(r["threads"]) for r in mine})
        batches = sorted({int(r["batch"]) for r in mine})
        model_fills = [f for f in fills if any(abs(float(r["fill"]) - f) < 1e-9 for r in mine)]
        if not model_fills:
            continue
        metrics = (("loop_over_post", "speed-up of the plugin over the Loop\n(Loop latency / plugin latency)", 1.0),
                   ("post_over_unmasked", "plugin latency / unmasked native op\n(below 1: faster than unmasked)",
                    1.0))
        fig, axes = plt.subplots(len(metrics), len(model_fills), figsize=(5.2 * len(model_fills), 7.6),
                                 squeeze=False, sharex=True)
        for col, fill in enumerate(model_fills):
            for row_index, (key, label, reference) in enumerate(metrics):
                ax = axes[row_index][col]
                for t_index, steps in enumerate(times):
                    for thread_count in threads:
                        points = sorted((int(r["batch"]), _num(r, key), _num(r, key + "_p25"), _num(r, key + "_p75"))
                                        for r in mine if int(r["time"]) == steps
                                        and int(r["threads"]) == thread_count and abs(float(r["fill"]) - fill) < 1e-9)
                        if not points:
                            continue
                        # a small horizontal offset per line keeps the error bars apart
                        shift = 1.0 + 0.04 * (t_index - (len(times) - 1) / 2) + (0.015 if thread_count > 1 else 0)
                        xs = [p[0] * shift for p in points]
                        ys = [p[1] for p in points]
                        low = [max(0.0, p[1] - p[2]) for p in points]
                        high = [max(0.0, p[3] - p[1]) for p in points]
                        ax.errorbar(xs, ys, yerr=[low, high], color=COLOURS[t_index % len(COLOURS)],
                                    linestyle="-" if thread_count == 1 else "--", marker="o", markersize=4,
                                    linewidth=1.5, elinewidth=0.8, capsize=2)
                ax.axhline(reference, color="black", linewidth=0.8)
                if key == "post_over_unmasked":
                    ax.axhspan(reference, reference * 1.05, color="grey", alpha=0.15, linewidth=0)
                else:
                    ax.set_yscale("log")
                ax.set_xscale("log", base=2)
                ax.set_xticks(batches)
                ax.set_xticklabels([str(b) for b in batches])
                ax.grid(True, which="major", alpha=0.3)
                if row_index == 0:
                    ax.set_title(f"fill {fill!r}" + (" (every row full)" if fill == 1.0 else
                                                     " (valid steps / T, post-padded)"))
                if row_index == len(metrics) - 1:
                    ax.set_xlabel("batch size")
                if col == 0:
                    ax.set_ylabel(label)
            # the same y range along each row, so the columns compare at a glance
        for row_index, (key, _, reference) in enumerate(metrics):
            values = [_num(r, key) for r in mine if any(abs(float(r["fill"]) - f) < 1e-9 for f in model_fills)]
            values = [v for v in values if not math.isnan(v)] + [reference]
            for ax in axes[row_index]:
                if key == "post_over_unmasked":
                    ax.set_ylim(min(values) - 0.1, max(max(values), 1.05 * reference) + 0.1)
                else:
                    ax.set_ylim(min(values) / 1.25, max(values) * 1.25)
                    ticks = [t for t in (1, 1.5, 2, 3, 5, 7, 10, 15, 20, 30, 50)
                             if min(values) / 1.25 <= t <= max(values) * 1.25]
                    ax.set_yticks(ticks)
                    ax.set_yticklabels([f"{t:g}x" for t in ticks])
                    ax.minorticks_off()
        handles = [Line2D([], [], color=COLOURS[i % len(COLOURS)], marker="o", label=f"T = {t}")
                   for i, t in enumerate(times)]
        handles += [Line2D([], [], color="black", linestyle="-" if n == 1 else "--",
                           label=f"{n} intra-op thread{'s' if n > 1 else ''}") for n in threads]
        handles.append(Patch(color="grey", alpha=0.15, label="within 5% of unmasked"))
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)
        fig.suptitle(MODEL_TITLES[model] + ("\n" + subtitle if subtitle else ""), fontsize=10)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        written.append(_save(plt, fig, os.path.join(out_dir, FILE_NAMES[model])))
    return written


FILL_FILE_NAMES = {"lstm": "fill.png", "bilstm": "fill_bidirectional.png", "gru": "fill_gru.png"}
VARIANT_STYLES = {"loop": ("#d62728", "stock tf2onnx (Loop)"), "post": ("#1f77b4", 'plugin "post"'),
                  "sched": ("#9467bd", 'plugin "post", schedule=True'),
                  "any": ("#2ca02c", 'plugin "any"'), "unmasked": ("#7f7f7f", "unmasked native op, every step")}


def plot_fill(csv_path: str, out_dir: str, subtitle: str = "") -> list[str]:
    """Latency against fill (the mean share of valid steps) for the realistic length distributions
    (rows with set "dist"): one PNG per model, one panel per batch size, one line per variant."""
    plt = _pyplot()
    written = []
    for model, mine in _rows_per_model(csv_path, "dist"):
        batches = sorted({int(r["batch"]) for r in mine})
        figure, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 4.0), squeeze=False)
        for axis, batch in zip(axes[0], batches):
            cells = sorted((r for r in mine if int(r["batch"]) == batch), key=lambda r: _num(r, "fill_actual"))
            fills = [_num(r, "fill_actual") for r in cells]
            for variant, (colour, label) in VARIANT_STYLES.items():
                axis.plot(fills, [_num(r, f"{variant}_ms") for r in cells], "o-", color=colour, label=label)
            for r, fill in zip(cells, fills):
                axis.annotate(r["dist"], (fill, _num(r, "sched_ms")), fontsize=7, textcoords="offset points",
                              xytext=(3, -10))
            axis.set_title(f"batch {batch}, T={cells[0]['time']}, 1 thread", fontsize=9)
            axis.set_xlabel("fill (mean share of valid steps per row)")
            axis.set_ylabel("latency, ms (median)")
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        figure.suptitle(f"{MODEL_TITLES[model]}: latency against fill\n{subtitle}", fontsize=9)
        figure.tight_layout()
        written.append(_save(plt, figure, os.path.join(out_dir, FILL_FILE_NAMES[model])))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default=os.path.join("docs", "benchmark", "ratios.csv"))
    parser.add_argument("--out", help="folder for the PNGs (default: the CSV's folder)")
    parser.add_argument("--fills", type=float, nargs="+", default=[1.0, 0.5])
    parser.add_argument("--subtitle", default="", help="second title line (machine, versions)")
    args = parser.parse_args(argv)
    out_dir = args.out or os.path.dirname(os.path.abspath(args.csv))
    for path in plot(args.csv, out_dir, args.fills, args.subtitle) + plot_fill(args.csv, out_dir, args.subtitle):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
