#!/usr/bin/env bash
# The whole GRPO loop on the bundled demo policy, in one command (issue 12; docs/loop.md):
#
#   scripts/train_demo.sh            # about 10-15 minutes on a loaded 2-core machine
#
# 1. builds `grpo` if needed (build-loop/), snapshots models/demo into the work folder;
# 2. writes a training prompt file with tools/demo_model's task generator (fixed seed; the
#    held-out data/demo_prompts.jsonl and the demo's evaluation set are excluded);
# 3. measures held-out accuracy: `grpo rollout` on data/demo_prompts.jsonl (and on the demo's
#    120-prompt evaluation set), fixed seed;
# 4. starts `grpo rollout --publish ipc://...` on the training prompts and
#    examples/train_grpo.py together: batches flow to the trainer, new weights flow back;
# 5. measures held-out accuracy again with the trainer's final weights (same seed);
# 6. checks every policy version in the store against the sha256 the trainer published, writes
#    `grpo stats --by step` and `grpo stats --report`, and prints a summary (also summary.md).
#
# Settings (environment): WORK (default build-loop/train_demo), N_PROMPTS (400), GROUP (16),
# MAX_NEW (160), GROUPS_PER_STEP (4), PUBLISH_EVERY (2), LR (2e-5), BETA (0), LOSS_AGG
# (token-mean), ADVANTAGE (engine), EVAL_GROUP (128: samples per held-out prompt), EVALSET_GROUP
# (16: samples per prompt of the demo's 120-prompt evaluation set; 0 = skip), EVAL_SEED (12345), TRAIN_SEED (1),
# PROMPT_SEED (4242), ENGINE_THREADS (1), TRAINER_THREADS (1: torch threads spin badly on a
# loaded machine), EXTRA_TRAIN_ARGS (--log-kl), EXTRA_ROLLOUT_ARGS (none; e.g. --record-routes with
# EXTRA_TRAIN_ARGS="--log-kl --replay-routes" for routing replay), EVAL_ROLLOUT_ARGS (none: extra
# `grpo rollout` options of the held-out measurements), MODEL (models/demo: the starting policy,
# copied into the work folder), HELDOUT (data/demo_prompts.jsonl: the held-out prompts),
# PUBLISH_DTYPE (bf16; fp8 = the checkpoint's FP8 format), PUBLISH_FORMAT (full; delta or auto:
# weight deltas, schemas/weights_delta.md), TRAINABLE (all; a regex of the parameters trained).
#
# Weight deltas in the deployment format, e.g. only the last layer trained:
#
#   PUBLISH_DTYPE=fp8 PUBLISH_FORMAT=auto TRAINABLE='layers\.3\.' scripts/train_demo.sh
#
# The tool-use policy (models/demo-tools, tools/demo_model/train_tools.py) with the python tool:
#
#   MODEL=models/demo-tools HELDOUT=data/tool_prompts.jsonl EXTRA_ROLLOUT_ARGS="--tools python" \
#       EVAL_ROLLOUT_ARGS="--tools python" EVALSET_GROUP=0 scripts/train_demo.sh
set -euo pipefail

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BUILD=${BUILD:-$ROOT/build-loop}
WORK=${WORK:-$BUILD/train_demo}
N_PROMPTS=${N_PROMPTS:-400}
GROUP=${GROUP:-16}
MAX_NEW=${MAX_NEW:-160}
GROUPS_PER_STEP=${GROUPS_PER_STEP:-4}
PUBLISH_EVERY=${PUBLISH_EVERY:-2}
LR=${LR:-2e-5}
BETA=${BETA:-0}
LOSS_AGG=${LOSS_AGG:-token-mean}
ADVANTAGE=${ADVANTAGE:-engine}
EVAL_GROUP=${EVAL_GROUP:-128}
EVAL_SEED=${EVAL_SEED:-12345}
EVALSET_GROUP=${EVALSET_GROUP:-16}
TRAIN_SEED=${TRAIN_SEED:-1}
PROMPT_SEED=${PROMPT_SEED:-4242}
ENGINE_THREADS=${ENGINE_THREADS:-1}
TRAINER_THREADS=${TRAINER_THREADS:-1}
EXTRA_TRAIN_ARGS=${EXTRA_TRAIN_ARGS:---log-kl}
EXTRA_ROLLOUT_ARGS=${EXTRA_ROLLOUT_ARGS:-}
EVAL_ROLLOUT_ARGS=${EVAL_ROLLOUT_ARGS:-}
PUBLISH_DTYPE=${PUBLISH_DTYPE:-bf16}
PUBLISH_FORMAT=${PUBLISH_FORMAT:-full}
TRAINABLE=${TRAINABLE:-}
MODEL_SRC=$(realpath "${MODEL:-$ROOT/models/demo}")
HELDOUT_SRC=$(realpath "${HELDOUT:-$ROOT/data/demo_prompts.jsonl}")

say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

python3 -c 'import torch, transformers, pynng, safetensors' 2>/dev/null || {
    echo "train_demo.sh: needs python3 with torch, transformers, pynng and safetensors" >&2
    exit 1
}
[ -f "$MODEL_SRC/model.safetensors" ] || {
    echo "train_demo.sh: $MODEL_SRC/model.safetensors is missing (tools/demo_model/train.py makes models/demo)" >&2
    exit 1
}
GRPO=$BUILD/cli/grpo
if [ ! -x "$GRPO" ]; then
    say "building grpo in $BUILD"
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DGRPO_WERROR=ON -DGRPO_CUDA=OFF >/dev/null
    ninja -C "$BUILD" -j2 grpo >/dev/null
fi

rm -rf "$WORK"
mkdir -p "$WORK"
T_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# The run works on its own copy of the starting model (a re-export of models/demo during the run
# cannot change the starting point).
cp -r "$MODEL_SRC" "$WORK/model0"
cp "$HELDOUT_SRC" "$WORK/heldout.jsonl"
MODEL=$WORK/model0
HELDOUT=$WORK/heldout.jsonl

say "training prompts: $N_PROMPTS from tools/demo_model/tasks.py, seed $PROMPT_SEED"
python3 - "$ROOT" "$WORK/train_prompts.jsonl" "$N_PROMPTS" "$PROMPT_SEED" "$HELDOUT" "$WORK/evalset.jsonl" <<'EOF'
import json, random, sys
root, out_path, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, root + "/tools/demo_model")
import train  # the demo's own task sets: held-out (data/demo_prompts.jsonl) + evaluation set
_, evalset, seen = train.make_heldout(1234)  # every held-out and evaluation question, excluded
with open(sys.argv[6], "w") as f:            # the demo's larger evaluation set (20 per level)
    for t in evalset:
        f.write(json.dumps(train.prompt_record(t)) + "\n")
held = {json.loads(l)["prompt"] for l in open(sys.argv[5])}
seen |= held
# Levels weighted towards where the demo policy has some but not all answers right (GRPO learns
# only from groups with mixed rewards): L1 2%, L2 15%, L3 35%, L4 30%, L5 13%, code 5%.
weights = {1: 2, 2: 15, 3: 35, 4: 30, 5: 13, 6: 5}
levels = [lv for lv, w in weights.items() for _ in range(w)]
r = random.Random(seed)
with open(out_path, "w") as f:
    k = 0
    while k < n:
        lv = r.choice(levels)
        t = train.draw_level(r, lv)
        if t["question"] in seen:
            continue
        seen.add(t["question"])
        t["id"] = "train-l%d-%04d" % (lv, k)
        f.write(json.dumps(train.prompt_record(t)) + "\n")
        k += 1
EOF

# shellcheck disable=SC2086
evaluate() { # $1 = model dir, $2 = name: the held-out prompts, and the demo's evaluation set
    "$GRPO" rollout --model "$1" --prompts "$HELDOUT" --group "$EVAL_GROUP" \
        --max-new-tokens "$MAX_NEW" --seed "$EVAL_SEED" --threads 2 --db "$WORK/$2.db" \
        --out "$WORK/$2.jsonl" $EVAL_ROLLOUT_ARGS >"$WORK/$2.log" 2>&1
    [ "$EVALSET_GROUP" -gt 0 ] || return 0
    "$GRPO" rollout --model "$1" --prompts "$WORK/evalset.jsonl" --group "$EVALSET_GROUP" \
        --max-new-tokens "$MAX_NEW" --seed "$EVAL_SEED" --threads 2 --db "$WORK/${2}_set.db" \
        $EVAL_ROLLOUT_ARGS >"$WORK/${2}_set.log" 2>&1
}

say "held-out accuracy before training (data/demo_prompts.jsonl, G=$EVAL_GROUP, seed $EVAL_SEED)"
evaluate "$MODEL" eval_before

say "training: grpo rollout --publish + examples/train_grpo.py"
URL="ipc://$WORK/bridge.sock"
T_TRAIN=$(date +%s)
# shellcheck disable=SC2086
"$GRPO" rollout --model "$MODEL" --prompts "$WORK/train_prompts.jsonl" --group "$GROUP" \
    --max-new-tokens "$MAX_NEW" --seed "$TRAIN_SEED" --db "$WORK/train.db" --publish "$URL" \
    --publish-window $((2 * GROUPS_PER_STEP)) --max-pending-groups "$GROUPS_PER_STEP" \
    --kv-budget "$((GROUP * 64 * 4 * 3))t" --threads "$ENGINE_THREADS" $EXTRA_ROLLOUT_ARGS \
    >"$WORK/rollout.log" 2>&1 &
ENGINE=$!
trap 'kill $ENGINE 2>/dev/null || true' EXIT
# shellcheck disable=SC2086
python3 "$ROOT/examples/train_grpo.py" --model "$MODEL" --url "$URL" --out-dir "$WORK/trainer" \
    --groups-per-step "$GROUPS_PER_STEP" --publish-every "$PUBLISH_EVERY" --lr "$LR" \
    --beta "$BETA" --loss-agg "$LOSS_AGG" --advantage "$ADVANTAGE" --threads "$TRAINER_THREADS" \
    --publish-dtype "$PUBLISH_DTYPE" --publish-format "$PUBLISH_FORMAT" \
    ${TRAINABLE:+--trainable "$TRAINABLE"} --mismatch-every 2 $EXTRA_TRAIN_ARGS 2>&1 | tee "$WORK/trainer.log" | grep --line-buffered '^step\|^train_grpo'
wait $ENGINE || { echo "train_demo.sh: grpo rollout failed; see $WORK/rollout.log" >&2; exit 1; }
trap - EXIT
T_TRAIN_END=$(date +%s)

say "held-out accuracy after training (the trainer's final weights, same seed)"
evaluate "$WORK/trainer/final" eval_after

"$GRPO" stats --db "$WORK/train.db" --by step > "$WORK/stats_by_step.txt"
"$GRPO" stats --db "$WORK/train.db" --by step --format json > "$WORK/stats_by_step.json"
"$GRPO" stats --db "$WORK/train.db" --report "$WORK/report.html"
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$WORK" "$ROOT" "$T_START" "$T_TRAIN" "$T_TRAIN_END" "$LOAD_START" "$LOAD_END" <<'EOF'
import hashlib, json, os, sqlite3, sys, time
work, root = sys.argv[1], sys.argv[2]
t_start, t_train, t_train_end = (int(x) for x in sys.argv[3:6])
load_start, load_end = sys.argv[6], sys.argv[7]
out = []
def p(s=""):
    out.append(s)
    print(s)

def accuracy(db):
    con = sqlite3.connect(db)
    per = {}
    for sj, correct, reward in con.execute(
            "SELECT g.sampling_json, c.correct, c.reward FROM completions c "
            "JOIN groups g ON c.group_id = g.id"):
        pid = json.loads(sj)["prompt_id"]
        per.setdefault(pid, []).append((correct or 0, reward or 0.0))
    return per

before, after = accuracy(work + "/eval_before.db"), accuracy(work + "/eval_after.db")
def mean(v): return sum(v) / len(v) if v else float("nan")
p("## Held-out accuracy (data/demo_prompts.jsonl, grpo rollout, same seed before and after)")
p()
p("| prompt | before: correct | after: correct | before: reward | after: reward |")
p("|---|---|---|---|---|")
for pid in sorted(before):
    b, a = before[pid], after.get(pid, [])
    p("| %s | %.0f%% | %.0f%% | %.3f | %.3f |" % (pid, 100 * mean([x[0] for x in b]),
      100 * mean([x[0] for x in a]), mean([x[1] for x in b]), mean([x[1] for x in a])))
ab = mean([x[0] for v in before.values() for x in v])
aa = mean([x[0] for v in after.values() for x in v])
n_b = sum(len(v) for v in before.values())
p("| **all** | **%.1f%%** | **%.1f%%** | %.3f | %.3f |" % (
    100 * ab, 100 * aa, mean([x[1] for v in before.values() for x in v]),
    mean([x[1] for v in after.values() for x in v])))
se = ((ab * (1 - ab) + aa * (1 - aa)) / n_b) ** 0.5
p()
p("accuracy %.1f%% -> %.1f%% (%+.1f points; 2 sigma of the difference %.1f points, %d samples each)"
  % (100 * ab, 100 * aa, 100 * (aa - ab), 200 * se, n_b))

if os.path.exists(work + "/eval_before_set.db"):
    sb, sa = accuracy(work + "/eval_before_set.db"), accuracy(work + "/eval_after_set.db")
    p()
    p("## The demo's evaluation set (20 prompts per level, not trained on; same seed)")
    p()
    p("| level | before | after |")
    p("|---|---|---|")
    lv = lambda pid: pid.split("-")[1]
    for L in sorted({lv(k) for k in sb}):
        xb = [x[0] for k, v in sb.items() if lv(k) == L for x in v]
        xa = [x[0] for k, v in sa.items() if lv(k) == L for x in v]
        p("| %s | %.1f%% | %.1f%% |" % (L, 100 * mean(xb), 100 * mean(xa)))
    eb = mean([x[0] for v in sb.values() for x in v])
    ea = mean([x[0] for v in sa.values() for x in v])
    ne = sum(len(v) for v in sb.values())
    p("| **all** | **%.1f%%** | **%.1f%%** |" % (100 * eb, 100 * ea))
    p()
    p("evaluation set %.1f%% -> %.1f%% (%+.1f points; 2 sigma %.1f points, %d samples each)" % (
        100 * eb, 100 * ea, 100 * (ea - eb), 200 * ((eb * (1 - eb) + ea * (1 - ea)) / ne) ** 0.5, ne))

log = [json.loads(l) for l in open(work + "/trainer/train_log.jsonl")]
pub = [json.loads(l) for l in open(work + "/trainer/published.jsonl")]
mm = [r["mismatch_kl"] for r in log if r.get("mismatch_kl") is not None]
mx = [r["mismatch_max_abs"] for r in log if r.get("mismatch_max_abs") is not None]
p()
p("## Training")
p()
p("- steps: %d (%d groups, %d completions), policy versions published: %d" % (
    len(log), sum(r["groups"] for r in log), sum(r["completions"] for r in log), len(pub)))
p("- wall time: training loop %d s, whole script %d s" % (t_train_end - t_train, time.time() - t_start))
p("- load average (1/5/15 min) at start %s, at end %s, on %d CPUs" % (load_start, load_end, os.cpu_count()))
if mm:
    p("- mismatch_kl (KL(engine || trainer) per token, same weights): mean %.2e, max %.2e over %d steps;"
      " largest |logprob difference| %.2e" % (mean(mm), max(mm), len(mm), max(mx)))
first, last = log[: max(1, len(log) // 5)], log[-max(1, len(log) // 5):]
p("- training reward mean: first fifth of the steps %.3f, last fifth %.3f; frac_reward_zero_std %.2f -> %.2f"
  % (mean([r["reward_mean"] for r in first]), mean([r["reward_mean"] for r in last]),
     mean([r["frac_reward_zero_std"] for r in first]), mean([r["frac_reward_zero_std"] for r in last])))
p("- pg_clipfrac mean %.4f, staleness mean %.2f versions" % (
    mean([r["pg_clipfrac"] for r in log]), mean([r["staleness_mean"] for r in log])))
kinds = {}
for r in pub:
    kinds.setdefault(r.get("kind", "full"), []).append(r)
for k, rs in sorted(kinds.items()):
    p("- weight updates sent as %s: %d; bytes per update %.0f (full file %.0f); wall time per "
      "update %.3f s (publish_weights until the engine answered) + %.3f s export" % (
          k, len(rs), mean([r["bytes"] for r in rs]), mean([r["full_bytes"] for r in rs]),
          mean([r["seconds"] for r in rs]), mean([r["export_s"] for r in rs])))

# Every policy version the engine recorded must be exactly what the trainer published.
con = sqlite3.connect(work + "/train.db")
rows = con.execute("SELECT version, location, sha256 FROM policy_versions ORDER BY version").fetchall()
published = {r["version"]: r["sha256"] for r in pub}
model0 = hashlib.sha256(open(work + "/model0/model.safetensors", "rb").read()).hexdigest()
bad = []
for v, loc, sha in rows:
    want = model0 if v == 0 else published.get(v)
    f = os.path.join(loc, "model.safetensors")
    disk = hashlib.sha256(open(f, "rb").read()).hexdigest() if os.path.exists(f) else None
    if sha != want or disk != want:
        bad.append((v, sha, want, disk))
used = con.execute("SELECT policy_version, count(*) FROM groups GROUP BY policy_version").fetchall()
p("- policy versions in the store: %d (0..%d); every one's sha256 equals the trainer's published "
  "sha256 (version 0: the starting model) and the file it points to: %s" % (
      len(rows), rows[-1][0], "yes" if not bad else "NO: %s" % bad))
p("- groups per policy version: %d versions sampled groups; the engine skips a version when a "
  "newer one arrives before it could swap" % len(used))
p()
p("Files: %s/{summary.md, stats_by_step.txt, report.html, trainer/train_log.jsonl, train.db}" % work)
open(work + "/summary.md", "w").write("\n".join(out) + "\n")
if bad:
    sys.exit(1)
EOF
