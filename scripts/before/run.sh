#!/bin/sh
# Run today's hardening tests against an older commit (default e1817ba, the last one before
# the hardening of the store, the readers and the CLI), to show which of them failed there.
#
#   scripts/before/run.sh [COMMIT] [PYTEST ARGS...]
#
# The commit is unpacked (git archive) and installed into a virtualenv of its own, in a
# temporary directory; today's tests are copied beside it. sitecustomize.py (put on PYTHONPATH)
# only makes today's module paths importable there (tachograph.record.jsonl and .event were
# top-level modules then); it changes no behaviour and no assertion.
set -eu
commit="${1:-e1817ba}"
[ $# -gt 0 ] && shift
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
mkdir -p "$work/src" "$work/run/tests"
git -C "$repo" archive "$commit" | tar -x -C "$work/src"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q -e "$work/src[dev]"
for part in conftest.py cli torture helpers vectors; do
    cp -r "$repo/tests/$part" "$work/run/tests/"
done
cp "$repo/pyproject.toml" "$work/run/"
cd "$work/run"
echo "commit $commit installed in $work/venv; tests in $work/run"
PYTHONPATH="$here" "$work/venv/bin/python" -m pytest -p no:cacheprovider -q --tb=line \
    "${@:-tests/cli/test_cli_hardening.py}" || true
