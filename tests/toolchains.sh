#!/usr/bin/env bash
# Installs the plugin toolchains the tests build with, where the tests look
# for them: componentize-py in target/componentize-py (a venv), and jco's
# npm packages, with everything they depend on, in npm's cache. The tests make the same on first use; CI runs
# this first so that downloads stay out of test timings.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/componentize-py
componentize_py=$(sed -n 's/^pub const COMPONENTIZE_PY: &str = "\(.*\)";/\1/p' host/src/plugin/scaffold.rs)
if [ ! -f "$venv/.ready" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$componentize_py"
    touch "$venv/.ready"
fi
"$venv/bin/componentize-py" --version
jco=$(sed -n 's/^const JCO: &str = "\(.*\)";/\1/p' host/src/plugin/scaffold.rs)
componentize_js=$(sed -n 's/^const COMPONENTIZE_JS: &str = "\(.*\)";/\1/p' host/src/plugin/scaffold.rs)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent \
    "@bytecodealliance/jco@$jco" "@bytecodealliance/componentize-js@$componentize_js")
echo "jco $jco and componentize-js $componentize_js in npm's cache"
