#!/usr/bin/env bash
# `grpo stats --report` rendered by headless Chromium, for three runs of the tiny model: a plain
# one-step `grpo rollout` (every chart has marks, KL says "no data"), one with --ref-model (the KL
# chart), and a `grpo serve` pool of two workers (per-worker bars). For each page: it loads with no
# console error, every chart has marks inside its frame, no axis has repeated or exponent ticks
# (tests/report_dom_check.py); then a PNG screenshot of the plain run. Exits 77 (skipped) without
# chromium (`scripts/setup.sh --tests` installs it). Usage: report_chromium_test.sh GRPO_BIN SRC
set -euo pipefail
bin=$1 src=$2
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "report_chromium_test: skipped: no chromium"
  exit 77
fi
tmp=$(mktemp -d /tmp/grpo_report_XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "report_chromium_test: FAIL: $*" >&2; exit 1; }
model=$src/tests/data/tiny_models/bf16 prompts=$src/data/tiny_prompts.jsonl
gen=(--group 4 --max-new-tokens 8)
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars)

# render NAME: the DOM of NAME.html as Chromium built it, and its console (any error fails)
render() {
  timeout 120 "$browser" "${flags[@]}" --user-data-dir="$tmp/profile-$1" --enable-logging=stderr \
    --v=0 --dump-dom "file://$tmp/$1.html" >"$tmp/$1.dom.html" 2>"$tmp/$1.chromium.txt" ||
    fail "chromium --dump-dom $1: $(tail -3 "$tmp/$1.chromium.txt")"
  if grep -E 'CONSOLE|Uncaught' "$tmp/$1.chromium.txt" | grep -Eiq 'error|uncaught'; then
    fail "$1: console errors: $(grep -E 'CONSOLE|Uncaught' "$tmp/$1.chromium.txt" | head -3)"
  fi
}

report() { "$bin" stats --db "$tmp/$1.db" --report "$tmp/$1.html" || fail "stats --report $1"; }

n=$(wc -l <"$prompts")
# a plain run: 3 step charts + 2 throughput charts, 2 histograms; bars: a solve rate per prompt,
# a pass rate per verifier (math, format), one finish reason; KL has no data (no reference)
"$bin" rollout --model "$model" --prompts "$prompts" "${gen[@]}" --db "$tmp/plain.db" \
  >"$tmp/plain.txt" 2>&1 || fail "rollout: $(tail -3 "$tmp/plain.txt")"
report plain
render plain
nf=$("$bin" stats --db "$tmp/plain.db" --by finish --format csv | tail -n +2 | wc -l)
python3 "$src/tests/report_dom_check.py" "$tmp/plain.dom.html" --charts 5 --hists 2 \
  --bars $((n + 2 + nf)) --nodata 1 --prompts "$n" || fail "plain run's report"

# with a reference policy (the fp8 tiny model, same vocabulary): a KL chart too
"$bin" rollout --model "$model" --prompts "$prompts" "${gen[@]}" --db "$tmp/kl.db" \
  --ref-model "$src/tests/data/tiny_models/fp8" >"$tmp/kl.txt" 2>&1 ||
  fail "rollout --ref-model: $(tail -3 "$tmp/kl.txt")"
report kl
render kl
nf=$("$bin" stats --db "$tmp/kl.db" --by finish --format csv | tail -n +2 | wc -l)
python3 "$src/tests/report_dom_check.py" "$tmp/kl.dom.html" --charts 6 --hists 2 \
  --bars $((n + 2 + nf)) --nodata 0 --prompts "$n" --kl || fail "the --ref-model run's report"

# a grpo serve pool of two workers: a tokens/s bar per worker
url=ipc://$tmp/coord.ipc
"$bin" serve --prompts "$prompts" --db "$tmp/pool.db" --listen "$url" --lease-timeout 3 \
  --linger 1 "${gen[@]}" >"$tmp/serve.txt" 2>&1 &
serve=$!
pids+=("$serve")
for w in A B; do
  "$bin" worker --connect "$url" --model "$model" --threads 1 --id "$w" --give-up 10 \
    >"$tmp/worker$w.txt" 2>&1 &
  pids+=("$!")
done
wait "$serve" || fail "serve: $(tail -3 "$tmp/serve.txt")"
workers=$("$bin" stats --db "$tmp/pool.db" --by worker --format csv | tail -n +2 | wc -l)
[ "$workers" -ge 1 ] || fail "the pool recorded no worker"
report pool
render pool
nf=$("$bin" stats --db "$tmp/pool.db" --by finish --format csv | tail -n +2 | wc -l)
python3 "$src/tests/report_dom_check.py" "$tmp/pool.dom.html" --charts 5 --hists 2 \
  --bars $((n + 2 + nf + workers)) --nodata 1 --prompts "$n" || fail "the pool's report"
grep -q "Generated tokens per second, per worker" "$tmp/pool.dom.html" || fail "no worker bars"

timeout 120 "$browser" "${flags[@]}" --user-data-dir="$tmp/profile-shot" --window-size=1000,2400 \
  --screenshot="$tmp/report.png" "file://$tmp/plain.html" >>"$tmp/plain.chromium.txt" 2>&1 ||
  fail "chromium --screenshot"
[ "$(head -c 8 "$tmp/report.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
  fail "no PNG screenshot"
[ "$(stat -c %s "$tmp/report.png")" -gt 20000 ] || fail "the screenshot is nearly empty"
echo "report_chromium_test: ok (plain, --ref-model and a 2-worker pool; $(stat -c %s \
  "$tmp/report.png") byte screenshot)"
