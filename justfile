# Development recipes. The README's two commands need none of these.

# Serve with the default configuration (127.0.0.1:8080, data in ./data).
serve:
    cargo run --release -- serve

# The full test suite, as CI runs it (the plugins' native unit tests included).
test:
    cargo test --workspace

# Build the plugins workspace (host/components/build.rs also does this on every host build).
build-plugins:
    cd plugins && cargo build --release

fmt:
    cargo fmt --all
    cd plugins && cargo fmt --all
    cd plugins/model-smollm && cargo fmt --all
    cd examples/discord-adapter && cargo fmt --all

lint:
    cargo clippy --all-targets -- -D warnings
    cd plugins && cargo clippy --release -- -D warnings
    cd plugins/model-smollm && cargo clippy --release -- -D warnings

# Fuzz the live API with schemathesis (pinned) against its OpenAPI document
# for SECONDS; CI runs it for two minutes.
fuzz-api SECONDS="120":
    cargo build
    bash tests/fuzz_api.sh target/debug/switchyard {{SECONDS}}

# Plugin runtime figures: cold load, render p50 vs native, hot swap under load,
# and plugins from `switchyard plugin new` in Rust, Python and JS built by
# their own toolchains (compile, cached load, render p50 kept and fresh).
bench-plugins:
    cargo bench --bench plugins

# Webhook delivery figures per store engine (BENCH_STORE=sled|postgres,
# BENCH_HOSTS=1..3): events/s end to end, host CPU per event, p99 at
# 1,000 events/s, exactly-once checked; one summary line per run.
bench-delivery:
    cargo bench --bench delivery

# Start-up against history on the embedded store: start time (median of
# five), RSS, open files and disk per retained event with no history and
# with BENCH_HISTORY settled deliveries (1,000,000), and the ratio.
bench-start:
    cargo bench --bench start

# Console page latency: p50/p99 per page beside the API's JSON, alternating.
bench-console:
    cargo bench --bench console

# Idle cost: CPU per second of a host that serves nothing, on each engine
# (BENCH_STORE=sled|postgres picks one).
bench-idle:
    cargo bench --bench idle

# Proxy overhead: a mock OpenAI upstream, direct and through model-openai, at
# 500, 2,000 and 5,000 QPS in 5 rounds; prints p50/p99 added latency per
# round and their medians. In the same rounds: tracing on against off (host
# CPU and added p50) and cache hits against upstream answers.
bench-gateway:
    cargo bench --bench gateway

# Embedded model speed through the HTTP API, beside llama.cpp (llama-cpp-python)
# on the same GGUF with 1 and 2 threads; prints medians and ratios.
bench-model:
    cargo build --release
    [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] || target/release/switchyard model pull --to models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 host/benches/model.py target/release/switchyard "$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# Prompt and decode speed of two builds of the host (binaries A and B), both
# served at once with their requests alternated; prints medians and ratios B/A.
bench-model-ab A B:
    [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] || target/release/switchyard model pull --to models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 host/benches/model_ab.py "{{A}}" "{{B}}" "$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# The dashboard's picture (docs/images/dashboard.png): Debian's Prometheus
# scrapes a release host under real traffic for four minutes, and
# docs/grafana/render.py draws docs/grafana/switchyard.json's queries.
# Needs `apt-get install prometheus` and `pip install matplotlib`.
dashboard-picture:
    cargo build --release
    [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] || target/release/switchyard model pull --to models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 docs/grafana/picture.py target/release/switchyard "$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf"
