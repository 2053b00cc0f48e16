"""Renders docs/images/dashboard.png: starts the release host and Debian's
Prometheus scraping it, drives real traffic for a few minutes (webhook
deliveries to a local receiver that sometimes fails, chat requests to the
embedded model, a plugin that traps), then draws the dashboard's queries
with render.py. `just dashboard-picture`; needs `prometheus` and
matplotlib (pip), and the model in models/.

    python3 docs/grafana/picture.py target/release/switchyard MODEL.gguf
"""

import http.server
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = pathlib.Path(__file__).parent
KEY = "sy_dashboard_operator_key_012345"
RUN_SECONDS = int(os.environ.get("PICTURE_SECONDS", "240"))


def api(base, method, path, body=None, key=KEY):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("authorization", f"Bearer {key}")
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Receiver(http.server.BaseHTTPRequestHandler):
    """Answers 200, and 500 to one request in ten (retried later)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(500 if random.random() < 0.1 else 200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(binary, model):
    work = pathlib.Path(tempfile.mkdtemp(prefix="sy-dashboard-"))
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    (work / "switchyard.toml").write_text(
        f'[webhooks]\nallow_private = ["127.0.0.0/8"]\n'
        f'[delivery]\nretry_schedule_ms = [0, 2000, 5000]\n'
        f'[inference]\nauto_pull = false\nmodel_path = "{model}"\n'
    )
    host = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", "--config", str(work / "switchyard.toml"),
         "--data-dir", str(work / "data")],
        env={**os.environ, "SWITCHYARD_BOOTSTRAP_KEY": KEY, "RUST_LOG": "error"},
        stdout=subprocess.DEVNULL,
    )
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 2s\nscrape_configs:\n  - job_name: switchyard\n"
        f"    authorization:\n      credentials: {KEY}\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    prom_port = free_port()
    prometheus = subprocess.Popen(
        [shutil.which("prometheus") or "/usr/bin/prometheus", f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                if api(base, "GET", "/v1/system-check")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        start = time.time()
        drive(base, f"http://127.0.0.1:{receiver.server_port}/hook")
        end = time.time() + 10
        time.sleep(10)
        out = HERE.parent / "images" / "dashboard.png"
        subprocess.run([sys.executable, str(HERE / "render.py"), f"http://127.0.0.1:{prom_port}",
                        str(start), str(end), str(out)], check=True)
    finally:
        host.terminate()
        prometheus.terminate()
        host.wait()
        prometheus.wait()
        receiver.shutdown()
        shutil.rmtree(work, ignore_errors=True)


def drive(base, hook):
    project = "/v1/teams/demo/projects/vision"
    steps = [
        ("POST", "/v1/teams", {"name": "demo"}),
        ("PUT", "/v1/teams/demo/secrets/SIGN", {"value": "s1gn"}),
        ("POST", "/v1/teams/demo/webhooks", {"name": "sink", "url": hook, "signing_secret": "SIGN"}),
        ("POST", "/v1/teams/demo/projects", {"name": "vision"}),
        ("POST", f"{project}/collections", {"name": "model"}),
        ("POST", f"{project}/automations", {
            "name": "on-tag", "event": {"type": "ADD_ARTIFACT_TAG"}, "action": "Webhooks",
            "webhook": {"team": "demo", "name": "sink"},
            "payload": '{"tag": "${tag}", "version": "${artifact_version_string}"}'}),
        ("POST", f"{project}/automations", {
            "name": "on-alias", "event": {"type": "ADD_ARTIFACT_ALIAS", "alias_regex": "^prod"},
            "action": "Webhooks", "webhook": {"team": "demo", "name": "sink"},
            "payload": '{"alias": "${alias}"}'}),
    ]
    for method, path, body in steps:
        status, answer = api(base, method, path, body)
        assert status < 300, (path, status, answer)
    for _ in range(20):
        api(base, "POST", f"{project}/collections/model/versions", {"metadata": {"accuracy": 0.9}})
    deadline = time.time() + RUN_SECONDS
    stop = threading.Event()

    def tags(worker):
        n = 0
        while not stop.is_set():
            # Waves: busy for 20 s, quieter for 10 s.
            busy = int(time.time()) % 30 < 20
            api(base, "POST", f"{project}/collections/model/versions/v{n % 20}/tags",
                {"tag": f"w{worker}-{n}"})
            if n % 10 == 0:
                api(base, "POST", f"{project}/collections/model/versions/v{n % 20}/aliases",
                    {"alias": random.choice(["prod", "staging"])})
            api(base, "GET", f"{project}/automations")
            n += 1
            time.sleep(0.005 if busy else 0.1)

    def chats():
        while not stop.is_set():
            api(base, "POST", "/v1/chat/completions", {
                "model": "SmolLM2-135M-Instruct",
                "messages": [{"role": "user", "content": "Name three colours."}],
                "max_tokens": 24})
            api(base, "POST", "/v1/chat/completions", {"model": "no-such-model", "messages": []})

    workers = [threading.Thread(target=tags, args=(w,)) for w in range(4)] + [threading.Thread(target=chats)]
    for w in workers:
        w.start()
    while time.time() < deadline:
        time.sleep(1)
    stop.set()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main(*sys.argv[1:3])
