"""`just bench-model-ab A B`: prompt and decode speed of two Switchyard
builds, served at once with their requests alternated, so that a drift in
the machine's speed falls on both alike. This machine's speed drifts by
20-30% over minutes; runs of one build after the other cannot see a 5%
change, this can.

Usage: python3 model_ab.py BINARY_A BINARY_B MODEL_GGUF [ROUNDS]
Prints each build's median prompt and decode tok/s (a streamed 128-token
greedy reply) and the median per-round ratios B/A.
"""

import statistics
import sys
import tempfile

from model import measure, start_host, switchyard_stream


def speeds(base):
    """(prompt tok/s, decode tok/s) of one streamed greedy reply."""
    prompt, completion, first, decoding = measure(switchyard_stream(base))
    if completion < 2 or decoding <= 0:
        raise SystemExit(f"{base} replied with {completion} token(s): too short to time "
                         "decoding; check that build's replies by hand")
    return prompt / first, (completion - 1) / decoding


def main(binaries, model_path, rounds):
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        hosts = [start_host(binary, model_path, data) for binary, data in zip(binaries, (a, b))]
        try:
            bases = [base for _, base in hosts]
            for base in bases:
                for _ in range(3):  # warm-up: loads the weights (both instances)
                    speeds(base)
            samples = [[], []]
            for i in range(rounds):
                order = (0, 1) if i % 2 == 0 else (1, 0)
                for side in order:
                    samples[side].append(speeds(bases[side]))
        finally:
            for proc, _ in hosts:
                proc.terminate()
                proc.wait()
    for what, at in (("prompt", 0), ("decode", 1)):
        for binary, side in zip(binaries, samples):
            print(f"{binary:<40} {what} median {statistics.median(s[at] for s in side):7.1f} tok/s")
        ratios = [b[at] / a[at] for a, b in zip(*samples)]
        ahead = sum(r > 1 for r in ratios)
        print(f"{what} B/A per round: median {statistics.median(ratios):.3f}x "
              f"(from {min(ratios):.3f} to {max(ratios):.3f}; B ahead in {ahead} of {rounds})")


if __name__ == "__main__":
    main(sys.argv[1:3], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 20)
