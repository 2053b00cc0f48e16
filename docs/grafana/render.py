"""Draws the dashboard (switchyard.json) from a Prometheus server: each
panel's queries over a time range, in the dashboard's grid, as one PNG.
No Grafana server is at hand on our machines, so this stands in for its
renderer; the queries are the dashboard's own.

    python3 render.py http://127.0.0.1:9090 START END out.png
"""

import json
import pathlib
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def query_range(prometheus, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}") as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise SystemExit(f"{expr}: {body}")
    return body["data"]["result"]


def legend(template, labels):
    for key, value in labels.items():
        template = template.replace("{{" + key + "}}", value)
    return template


def main(prometheus, start, end, out):
    dashboard = json.loads(pathlib.Path(__file__).with_name("switchyard.json").read_text())
    start, end = float(start), float(end)
    step = max(1, int((end - start) / 300))
    panels = dashboard["panels"]
    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(16, 3.2 * rows), squeeze=False)
    empty = []
    for panel, ax in zip(panels, axes.flat):
        drawn = 0
        for target in panel["targets"]:
            for series in query_range(prometheus, target["expr"], start, end, step):
                points = [(float(t) - start, float(v)) for t, v in series["values"] if v not in ("NaN", "+Inf")]
                if not points:
                    continue
                xs, ys = zip(*points)
                ax.plot(xs, ys, label=legend(target["legendFormat"], series["metric"]), linewidth=1.2)
                drawn += 1
        if drawn == 0:
            empty.append(panel["title"])
        ax.set_title(panel["title"], fontsize=10, loc="left")
        ax.set_xlabel("seconds into the run", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        unit = panel["fieldConfig"]["defaults"]["unit"]
        if unit == "s":
            ax.set_ylabel("seconds", fontsize=8)
        if drawn:
            ax.legend(fontsize=7, loc="upper left", ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    figure.suptitle(dashboard["title"] + " (docs/grafana/switchyard.json over a real run)", fontsize=12)
    figure.tight_layout()
    figure.savefig(out, dpi=80)
    print(f"wrote {out}; panels without data: {empty or 'none'}")


if __name__ == "__main__":
    main(*sys.argv[1:])
