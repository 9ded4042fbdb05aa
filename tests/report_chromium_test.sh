#!/usr/bin/env bash
# `grpo stats --report` of a one-step run, rendered by headless Chromium: the page loads, every
# chart has marks at the run's values (no "no data", no -5.55e-17 ticks), and the per-prompt,
# per-verifier and per-step tables are there. Exits 77 (skipped) without chromium
# (`scripts/setup.sh --tests` installs it). Usage: report_chromium_test.sh GRPO_BIN SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "report_chromium_test: skipped: no chromium"
  exit 77
fi
tmp=$(mktemp -d /tmp/grpo_report_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "report_chromium_test: FAIL: $*" >&2; exit 1; }

"$bin" rollout --model "$src/tests/data/tiny_models/bf16" --prompts "$src/data/tiny_prompts.jsonl" \
  --group 4 --max-new-tokens 8 --db "$tmp/run.db" >"$tmp/rollout.txt" 2>&1 || fail "rollout"
"$bin" stats --db "$tmp/run.db" --report "$tmp/report.html" || fail "stats --report"
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile")
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$tmp/report.html" >"$tmp/dom.html" \
  2>"$tmp/chromium.txt" || fail "chromium --dump-dom: $(tail -3 "$tmp/chromium.txt")"
timeout 120 "$browser" "${flags[@]}" --window-size=1000,2400 --screenshot="$tmp/report.png" \
  "file://$tmp/report.html" >>"$tmp/chromium.txt" 2>&1 || fail "chromium --screenshot"

grep -q "<h1>grpo run report</h1>" "$tmp/dom.html" || fail "the page did not render"
[ "$(grep -o "<svg" "$tmp/dom.html" | wc -l)" -eq 5 ] || fail "expected 3 charts and 2 bar charts"
grep -q "no data" "$tmp/dom.html" && fail "a chart has no data"
# one mark per series at the one step: 1 reward + 3 length + 3 fraction series
[ "$(grep -o '<circle class="pt"' "$tmp/dom.html" | wc -l)" -eq 7 ] || fail "expected 7 marks"
grep -Eq '>-?[0-9.]+e-[0-9]+</text>' "$tmp/dom.html" && fail "an axis tick like -5.55e-17"
for h in "Per prompt: solve rate and pass@k" "Per verifier: pass rate and latency" "Per step"; do
  grep -q "$h" "$tmp/dom.html" || fail "no section \"$h\""
done
# a prompt row per prompt of the file (4 prompts)
n=$(wc -l <"$src/data/tiny_prompts.jsonl")
rows=$(sed -n '/Per prompt/,/Per verifier/p' "$tmp/dom.html" | grep -o "<tr>" | wc -l)
[ "$rows" -eq $((n + 1)) ] || fail "per-prompt table has $rows rows, expected $((n + 1))"
# a solve-rate bar per prompt, a pass-rate bar per verifier (math and format here)
bars=$(grep -o '<rect class="bar"' "$tmp/dom.html" | wc -l)
[ "$bars" -eq $((n + 2)) ] || fail "$bars bars, expected $((n + 2))"
[ "$(head -c 8 "$tmp/report.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
  fail "no PNG screenshot"
[ "$(stat -c %s "$tmp/report.png")" -gt 20000 ] || fail "the screenshot is nearly empty"
echo "report_chromium_test: ok ($rows table rows, $(stat -c %s "$tmp/report.png") byte screenshot)"
