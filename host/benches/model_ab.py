"""`just bench-model-ab A B`: prompt speed of two Switchyard builds, served at
once with their requests alternated, so that a drift in the machine's speed
falls on both alike. This machine's speed drifts by 20-30% over minutes; runs
of one build after the other cannot see a 5% change, this can.

Usage: python3 model_ab.py BINARY_A BINARY_B MODEL_GGUF [ROUNDS]
Prints each build's median prompt tok/s and the median per-round ratio B/A.
"""

import json
import statistics
import sys
import tempfile
import time
import urllib.request

from model import KEY, MODEL, PROMPT, start_host


def prompt_speed(base):
    """Prompt tokens per second of one request for a single token."""
    body = json.dumps({
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 1,
        "temperature": 0,
    }).encode()
    request = urllib.request.Request(
        base + "/v1/chat/completions", data=body,
        headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"},
    )
    start_time = time.perf_counter()
    with urllib.request.urlopen(request) as response:
        usage = json.load(response)["usage"]
    return usage["prompt_tokens"] / (time.perf_counter() - start_time)


def main(binaries, model_path, rounds):
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        hosts = [start_host(binary, model_path, data) for binary, data in zip(binaries, (a, b))]
        try:
            bases = [base for _, base in hosts]
            for base in bases:
                for _ in range(3):  # warm-up: loads and re-quantizes
                    prompt_speed(base)
            speeds = [[], []]
            for i in range(rounds):
                order = (0, 1) if i % 2 == 0 else (1, 0)
                for side in order:
                    speeds[side].append(prompt_speed(bases[side]))
        finally:
            for proc, _ in hosts:
                proc.terminate()
                proc.wait()
    for binary, samples in zip(binaries, speeds):
        print(f"{binary:<40} prompt median {statistics.median(samples):7.1f} tok/s")
    ratios = [b / a for a, b in zip(*speeds)]
    ahead = sum(r > 1 for r in ratios)
    print(f"B/A per round: median {statistics.median(ratios):.3f}x "
          f"(from {min(ratios):.3f} to {max(ratios):.3f}; B ahead in {ahead} of {rounds})")


if __name__ == "__main__":
    main(sys.argv[1:3], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 20)
