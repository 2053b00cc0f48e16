"""The Switchyard dashboard's panels, written once: `python3 panels.py`
writes switchyard.json (Grafana's dashboard model), and render.py draws
the same queries from a Prometheus server."""

import json
import pathlib

RATE = "[1m]"

# (title, unit, [(legend, PromQL)]), two panels a row.
PANELS = [
    ("Requests per second, by route", "reqps", [
        ("{{route}}", f'sum by (route) (rate(switchyard_http_requests_total{RATE}))'),
    ]),
    ("Request latency", "s", [
        ("p50", f'histogram_quantile(0.5, sum by (le) (rate(switchyard_http_request_duration_seconds_bucket{RATE})))'),
        ("p99", f'histogram_quantile(0.99, sum by (le) (rate(switchyard_http_request_duration_seconds_bucket{RATE})))'),
    ]),
    ("Responses per second, by status", "reqps", [
        ("{{status}}", f'sum by (status) (rate(switchyard_http_requests_total{RATE}))'),
    ]),
    ("Deliveries per second, by outcome", "ops", [
        ("{{outcome}}", f'sum by (outcome) (rate(switchyard_deliveries_total{RATE}))'),
    ]),
    ("Event to delivery", "s", [
        ("p50", f'histogram_quantile(0.5, sum by (le) (rate(switchyard_delivery_duration_seconds_bucket{RATE})))'),
        ("p99", f'histogram_quantile(0.99, sum by (le) (rate(switchyard_delivery_duration_seconds_bucket{RATE})))'),
    ]),
    ("Outbox", "short", [
        ("pending", 'switchyard_outbox_pending'),
        ("oldest due (s)", 'switchyard_outbox_oldest_due_seconds'),
    ]),
    ("Plugin calls per second", "ops", [
        ("{{plugin}} {{outcome}}", f'sum by (plugin, outcome) (rate(switchyard_plugin_calls_total{RATE}))'),
    ]),
    ("Plugin call time, p99", "s", [
        ("{{plugin}}", f'histogram_quantile(0.99, sum by (le, plugin) (rate(switchyard_plugin_call_duration_seconds_bucket{RATE})))'),
    ]),
    ("Work queues", "short", [
        ("depth {{queue}}", 'switchyard_queue_depth'),
    ]),
    ("Queue wait, p99", "s", [
        ("{{queue}}", f'histogram_quantile(0.99, sum by (le, queue) (rate(switchyard_queue_wait_seconds_bucket{RATE})))'),
    ]),
    ("Inference tokens per second", "short", [
        ("{{model}} {{kind}}", f'sum by (model, kind) (rate(switchyard_inference_tokens_total{RATE}))'),
    ]),
    ("Inference requests and time to first token", "short", [
        ("{{model}} {{status}} req/s", f'sum by (model, status) (rate(switchyard_inference_requests_total{RATE}))'),
        ("{{model}} TTFT p50 (s)", f'histogram_quantile(0.5, sum by (le, model) (rate(switchyard_inference_time_to_first_token_seconds_bucket{RATE})))'),
    ]),
]


def dashboard():
    panels = []
    for n, (title, unit, targets) in enumerate(PANELS):
        panels.append({
            "id": n + 1,
            "type": "timeseries",
            "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (n % 2), "y": 8 * (n // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [
                {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                 "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                for i, (legend, expr) in enumerate(targets)
            ],
        })
    return {
        "title": "Switchyard",
        "uid": "switchyard",
        "description": "Requests, latency, deliveries, outbox, plugins, queues and inference of Switchyard hosts (GET /metrics).",
        "tags": ["switchyard"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-15m", "to": "now"},
        "templating": {"list": [{
            "name": "datasource", "label": "Prometheus", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0,
        }]},
        "panels": panels,
    }


if __name__ == "__main__":
    out = pathlib.Path(__file__).with_name("switchyard.json")
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {out}")
