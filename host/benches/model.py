"""`just bench-model`: prompt and decode speed of the embedded model through
Switchyard's HTTP API, and of llama.cpp (llama-cpp-python) on the same GGUF
with 1 and 2 threads, in the same run. Switchyard runs twice: with one
instance of the model (one core, `second_instance = false`) and with the
default second instance (two cores). Prints medians and the ratios, each
Switchyard side against llama.cpp on as many threads.

Usage: python3 model.py SWITCHYARD_BINARY MODEL_GGUF [RUNS]
Needs `llama-cpp-python` for the llama.cpp side (skipped, with a note, if it
is not installed).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

MODEL = "SmolLM2-135M-Instruct"
KEY = "sk-bench-bootstrap-key-0001"
PROMPT = (
    "Summarise the following in one paragraph. Rivers carry water from the "
    "mountains to the sea. Along the way they shape valleys, feed farms and "
    "cities, and give homes to fish, birds and insects. People have built "
    "towns beside rivers for thousands of years because rivers bring water, "
    "food and a way to travel. Today many rivers are dammed for power, and "
    "their health depends on how we use the land around them."
)
MAX_TOKENS = 128


def measure(stream):
    """(prompt tokens, completion tokens, seconds to first token, seconds of
    decoding after it) from an iterator of (text, usage-or-None)."""
    start = time.perf_counter()
    first = last = None
    usage = None
    for text, u in stream:
        now = time.perf_counter()
        if text and first is None:
            first = now
        if text:
            last = now
        if u:
            usage = u
    return usage[0], usage[1], first - start, last - first


def switchyard_stream(base):
    body = json.dumps({
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=body,
        headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage"):
                u = chunk["usage"]
                yield "", (u["prompt_tokens"], u["completion_tokens"])
            for choice in chunk["choices"]:
                yield choice["delta"].get("content") or "", None


def llama_stream(llm, prompt_tokens):
    """llama.cpp's own stream; the prompt's token count (same template, same
    tokenizer) is taken from Switchyard's usage."""
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
    )
    n = 0
    for chunk in out:
        text = chunk["choices"][0]["delta"].get("content") or ""
        n += bool(text)
        yield text, None
    yield "", (prompt_tokens, n)


def fresh_llama_stream(llm, prompt_tokens):
    """A function starting a llama.cpp stream from an empty context, so
    every request evaluates the whole prompt, as Switchyard's do."""
    def stream():
        llm.reset()
        return llama_stream(llm, prompt_tokens)
    return stream


def report(name, samples):
    prompt = statistics.median(p / t for p, _, t, _ in samples)
    decode = statistics.median((c - 1) / d for _, c, _, d in samples if d > 0)
    print(f"{name:<28} prompt {prompt:7.1f} tok/s   decode {decode:6.1f} tok/s")
    return prompt, decode


def start_host(binary, model_path, data, second_instance=True):
    """Starts `binary` on an ephemeral port with its data in `data`; returns
    the process and its base URL."""
    env = dict(os.environ, SWITCHYARD_BOOTSTRAP_KEY=KEY)
    config = os.path.join(data, "switchyard.toml")
    with open(config, "w") as f:
        f.write(f'[inference]\nauto_pull = false\nmodel_path = "{model_path}"\n')
        if not second_instance:
            f.write("second_instance = false\n")
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--config", config, "--data-dir", data + "/data"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
    )
    for line in proc.stdout:
        if line.startswith("switchyard listening on "):
            return proc, line.split()[-1]
    raise SystemExit("switchyard did not start")


def main(binary, model_path, runs):
    """Rounds alternate Switchyard and llama.cpp (1 and 2 threads), so a
    drift in this machine's speed over the run falls on every side alike
    instead of on whichever ran last."""
    try:
        from llama_cpp import Llama
    except ImportError:
        Llama = None
        print("llama.cpp: llama-cpp-python is not installed; `pip install llama-cpp-python` for the comparison")
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        hosts = [start_host(binary, model_path, one, False), start_host(binary, model_path, two)]
        try:
            sides = {}
            for (_, base), cores in zip(hosts, (1, 2)):
                for _ in range(2):  # warm-up: loads the weights (both instances)
                    list(switchyard_stream(base))
                prompt_tokens = measure(switchyard_stream(base))[0]
                name = f"switchyard, {cores} core{'s' if cores > 1 else ''} (wasm, HTTP)"
                sides[name] = lambda base=base: switchyard_stream(base)
            if Llama:
                for threads in (1, 2):
                    llm = Llama(model_path=model_path, n_threads=threads, n_ctx=2048, verbose=False)
                    list(llama_stream(llm, prompt_tokens))  # warm-up
                    name = f"llama.cpp ({threads} thread{'s' if threads > 1 else ''}, in-process)"
                    sides[name] = fresh_llama_stream(llm, prompt_tokens)
            samples = {name: [] for name in sides}
            for _ in range(runs):
                for name, stream in sides.items():
                    samples[name].append(measure(stream()))
        finally:
            for proc, _ in hosts:
                proc.terminate()
                proc.wait()
    results = [report(name, s) for name, s in samples.items()]
    for threads, (ours, theirs) in enumerate(zip(results[:2], results[2:]), start=1):
        print(f"ratio switchyard {threads} core{'s' if threads > 1 else ''} / llama.cpp {threads}t: "
              f"prompt {ours[0] / theirs[0]:.2f}x   decode {ours[1] / theirs[1]:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)
