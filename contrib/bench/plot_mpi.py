#!/usr/bin/env python3
"""Plots of compare_mpi.py's CSV: per transport, <plot-dir>/mpi_<transport>.svg (point to
point and collectives) and <plot-dir>/onesided_<transport>.svg (one-sided MPI and OpenSHMEM).

mpi_*: osu_latency and osu_allreduce latency against size (log-log), osu_bw (solid) and
osu_bibw (dashed) bandwidth, osu_mbw_mr message rate. onesided_*: osu_put_latency (solid)
and osu_get_latency (dashed), osu_put_bw and osu_get_bw, osu_oshm_put latency and
osu_oshm_put_mr message rate. One line per stack (the median over repeats, the band min to
max); panels without data, and figures without panels, are left out. Uses matplotlib's Agg backend (Debian's python3-matplotlib); the SVG carries
no date, so a re-plot of the same CSV gives the same file.

    contrib/bench/plot_mpi.py CSV [--plot-dir docs/img] [--format svg]
"""
import argparse
import csv
import os

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "loom"  # stable element ids: the same CSV, the same SVG
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

COLORS = {"loom": "tab:red", "ucx": "tab:blue", "ob1": "tab:green"}
DESCRIPTION = {"loom": "loom = pml ucx over Loom", "ucx": "ucx = pml ucx over UCX 1.13",
               "ob1": {"shm": "ob1 = pml ob1, btl vader", "tcp": "ob1 = pml ob1, btl tcp"}}
ORDER = ("loom", "ucx", "ob1")
# (title, y label, [(benchmark, line style)], log y)
PANELS = [
    ("osu_latency", "one-way latency (us)", [("osu_latency", "-")]),
    ("osu_allreduce (2 ranks)", "latency (us)", [("osu_allreduce", "-")]),
    ("osu_bw (solid), osu_bibw (dashed)", "bandwidth (MB/s)", [("osu_bw", "-"), ("osu_bibw", "--")]),
    ("osu_mbw_mr (1 pair)", "messages/s", [("osu_mbw_mr", "-")]),
]
ONESIDED_PANELS = [
    ("osu_put_latency (solid), osu_get_latency (dashed)", "latency (us)",
     [("osu_put_latency", "-"), ("osu_get_latency", "--")]),
    ("osu_put_bw (solid), osu_get_bw (dashed)", "bandwidth (MB/s)", [("osu_put_bw", "-"), ("osu_get_bw", "--")]),
    ("OpenSHMEM osu_oshm_put (heap)", "latency (us)", [("osu_oshm_put", "-")]),
    ("OpenSHMEM osu_oshm_put_mr (heap)", "messages/s", [("osu_oshm_put_mr", "-")]),
]
# file name prefix: (panels, what the title says the stacks run)
FIGURES = {
    "mpi": (PANELS, "Open MPI 4.1, 2 ranks"),
    "onesided": (ONESIDED_PANELS, "Open MPI 4.1 one-sided (osc ucx; ob1: osc rdma/pt2pt) and OpenSHMEM "
                                  "(spml ucx), 2 ranks"),
}


def size_label(x, _pos=None):
    x = int(round(x))
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if x >= div:
            return f"{x // div}{unit}"
    return str(x)


def plot(rows, plot_dir, transports=None, fmt="svg"):
    """rows: dicts with benchmark, transport, stack, size, median, min, max. Returns the
    paths written."""
    data = {}
    for r in rows:
        data.setdefault((r["transport"], r["benchmark"], r["stack"]), []).append(
            (int(r["size"]), float(r["median"]), float(r["min"]), float(r["max"])))
    if transports is None:
        transports = sorted({t for t, _, _ in data})
    os.makedirs(plot_dir, exist_ok=True)
    paths = []
    for (prefix, (all_panels, what)), transport in [(f, t) for f in FIGURES.items() for t in transports]:
        panels = [pn for pn in all_panels if any((transport, b, s) in data for b, _ in pn[2] for s in ORDER)]
        if not panels:
            continue
        cols = 2 if len(panels) > 1 else 1
        nrows = (len(panels) + cols - 1) // cols
        fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4.2 * nrows), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        for ax, (title, ylabel, lines) in zip(axes.flat, panels):
            for bench, style in lines:
                for stack in ORDER:
                    pts = sorted(data.get((transport, bench, stack), []))
                    pts = [p for p in pts if p[1] > 0]
                    if not pts:
                        continue
                    x = [p[0] for p in pts]
                    label = stack if len(lines) == 1 else f"{stack} {bench[4:]}"
                    ax.plot(x, [p[1] for p in pts], style, color=COLORS.get(stack), marker=".",
                            markersize=4, linewidth=1.3, label=label)
                    ax.fill_between(x, [p[2] for p in pts], [p[3] for p in pts],
                                    color=COLORS.get(stack), alpha=0.15, linewidth=0)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(size_label))
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=8)
        reps = sorted({int(r["repeats"]) for r in rows if r["transport"] == transport})
        present = [s for s in ORDER if any(k[0] == transport and k[2] == s for k in data)]
        desc = [DESCRIPTION[s] if isinstance(DESCRIPTION[s], str) else DESCRIPTION[s].get(transport, s)
                for s in present]
        fig.suptitle(f"OSU 7.4, {what}, {transport}: {'; '.join(desc)}\n"
                     f"(medians of {'/'.join(str(x) for x in reps)} runs, band min-max)", fontsize=11)
        fig.tight_layout()
        path = os.path.join(plot_dir, f"{prefix}_{transport}.{fmt}")
        fig.savefig(path, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
        plt.close(fig)
        paths.append(path)
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--plot-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "..", "docs", "img"))
    p.add_argument("--format", default="svg")
    p.add_argument("--transports", default="", help="comma-separated (default: every one in the CSV)")
    a = p.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    transports = [t for t in a.transports.split(",") if t] or None
    for path in plot(rows, os.path.normpath(a.plot_dir), transports, a.format):
        print(path)


if __name__ == "__main__":
    main()
