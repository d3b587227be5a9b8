"""Bar chart of benchmark ratios: python chart.py latest.csv latest.png"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(csv_path, png_path):
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    names = sorted({r["row"] for r in rows}, key=[r["row"] for r in rows].index)
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), sharey=True)
    for ax, column, title in ((axes[0], "vs_incr", "ops/s relative to INCR"),
                              (axes[1], "vs_lua", "ops/s relative to the Lua seckill")):
        for offset, pipeline in ((-0.2, "1"), (0.2, "16")):
            values = [next(float(r[column]) for r in rows if r["row"] == n and r["pipeline"] == pipeline)
                      for n in names]
            ax.barh([i + offset for i in range(len(names))], values, height=0.4, label=f"-P {pipeline}")
        ax.axvline(1.0, color="grey", linewidth=0.8)
        ax.set_title(title)
        ax.legend()
    axes[0].set_yticks(range(len(names)))
    axes[0].set_yticklabels(names)
    axes[0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
