#!/usr/bin/env python3
"""Real processes on loopback: `grpo serve` and `grpo worker`.

  failover  a coordinator and four workers; worker A is SIGKILLed while it holds a lease and
            worker B is SIGSTOPped past its lease deadline. Every group is recorded exactly once,
            the lapsed leases were re-issued, and the completions (tokens, rewards, advantages)
            equal those of a single-process `grpo rollout` with the same seed.
  restart   the coordinator is SIGKILLed mid-run and started again with the same options: it
            resumes the run, the groups recorded before the kill are untouched and never leased
            again, and the final set of completions equals `grpo rollout`'s.
  load      16 workers (tiny model, CPU) against one coordinator for --seconds (default 20);
            then the coordinator is stopped. No group is lost (every lease the coordinator
            recorded as done has its group, and nothing is recorded twice), and the coordinator's
            peak RSS stays bounded. Prints groups/s and the coordinator's CPU share.
  pause     the coordinator is SIGSTOPped for 6 s mid-run: the workers reconnect, and every group
            is recorded once with grpo rollout's completions.
  tail      --backup-after: a slow worker's last group is backed up by a fast one at the run's
            tail; every group once, equal to grpo rollout's.
  repeats   a prompts file in which some records repeat an earlier record's content (with
            another id, and without an id): every record is served and its group recorded, as
            `grpo rollout` records them, and the completions equal grpo rollout's.
  delta     `grpo serve --model` registers the model's file as version 0; a trainer sends
            version 1 as a weight delta against it and later a corrupted delta: version 1 is
            built byte for byte equal to the full file, every worker loads it, and the groups
            of each version equal grpo rollout with that version's full weights; the corrupted
            delta is refused and both workers keep serving version 1.
  tampered  the file of an accepted version is replaced (by a valid safetensors file, the model's
            own) between the coordinator's check and the worker's load: the worker refuses to
            swap (its sha256 is not the one announced) and exits with the reason.

The reference for "equal" is an independent run of `grpo rollout` (one process, no workers).
Usage: workers_integration.py SCENARIO --grpo PATH [--seconds S] [--keep DIR]
"""
import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(SRC, "tests", "data", "tiny_models", "bf16")

GEN = ["--group", "4", "--max-new-tokens", "12", "--seed", "1234", "--temperature", "0.9"]


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def write_prompts(path, n):
    with open(path, "w") as f:
        for i in range(n):
            a, b = i, (i * 13) % 40  # content differs for every i
            if i % 5 == 4:  # a chat-style record, without an id (keyed by its line number)
                f.write('{"messages": [{"role": "user", "content": "Add %d and %d."}], '
                        '"task": "math", "answer": "%d"}\n' % (a, b, a + b))
            else:
                f.write('{"id": "q%d", "prompt": "What is %d + %d? Answer in \\\\boxed{}.", '
                        '"task": "math", "answer": "%d"}\n' % (i, a, b, a + b))


def db_rows(db, sql, args=()):
    last = None
    for _ in range(50):
        try:
            con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
            try:
                return con.execute(sql, args).fetchall()
            finally:
                con.close()
        except sqlite3.OperationalError as e:  # not created yet, or busy
            last = e
            time.sleep(0.1)
    fail("cannot read %s: %s" % (db, last))


def completions(db):
    """Every completion keyed by (prompt index, sample), with what must match."""
    return db_rows(db, "SELECT p.idx, c.sample_index, hex(c.token_ids), hex(c.token_logprobs), "
                       "hex(c.text), c.finish_reason, c.reward, c.advantage "
                       "FROM completions c JOIN groups g ON g.id = c.group_id "
                       "JOIN prompts p ON p.id = g.prompt_id ORDER BY p.idx, c.sample_index")


def stacks(pid):
    """Every thread's stack of a live process, for a hang report (gdb if installed, else the
    kernel's view from /proc)."""
    if shutil.which("gdb"):
        extra = []
        for cmd in os.environ.get("GRPO_HANG_GDB", "").split(";"):  # e.g. "frame function f;print *r"
            if cmd.strip():
                extra += ["-ex", cmd.strip()]
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"] + extra,
                           capture_output=True, text=True, timeout=120)
        return r.stdout[-20000:]
    out = []
    for t in sorted(os.listdir("/proc/%d/task" % pid)):
        for f in ("comm", "wchan", "syscall", "stack"):
            try:
                with open("/proc/%d/task/%s/%s" % (pid, t, f)) as fh:
                    out.append("%s %s: %s" % (t, f, fh.read().strip()))
            except OSError:
                pass
    return "\n".join(out)


class Procs:
    def __init__(self, grpo, tmp):
        self.grpo, self.tmp, self.all = grpo, tmp, []

    def start(self, name, args, extra_env=None):
        env = dict(os.environ)
        env.update(extra_env or {})
        out = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen([self.grpo] + args, stdout=out, stderr=subprocess.STDOUT, env=env,
                             cwd=self.tmp)
        p.name = name
        self.all.append(p)
        return p

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            return f.read()

    def wait(self, p, timeout):
        """p.wait(timeout); on a timeout, fails with p's log and every thread's stack (gdb)."""
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            fail("%s did not exit within %d s\n--- its log:\n%s\n--- its threads:\n%s"
                 % (p.name, timeout, self.log(p.name)[-6000:], stacks(p.pid)))

    def cleanup(self):
        for p in self.all:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
                p.wait()


def serve_args(prompts, db, url, *extra):
    return ["serve", "--prompts", prompts, "--db", db, "--listen", url, "--lease-timeout", "3",
            "--linger", "1"] + GEN + list(extra)


GIVE_UP = 10  # seconds a worker waits for an answer from the coordinator before it exits


def worker_args(url, wid, *extra):
    return ["worker", "--connect", url, "--model", MODEL, "--threads", "1", "--id", wid,
            "--give-up", str(GIVE_UP)] + list(extra)


def reference(grpo, tmp, prompts):
    ref = os.path.join(tmp, "ref.db")
    r = subprocess.run([grpo, "rollout", "--model", MODEL, "--prompts", prompts, "--db", ref,
                        "--threads", "1"] + GEN, capture_output=True, text=True, cwd=tmp)
    if r.returncode != 0:
        fail("grpo rollout: " + r.stderr)
    return completions(ref)


def wait_until(cond, timeout, what):
    t = time.time()
    while time.time() - t < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    fail("timed out waiting for " + what)


def held_leases(db, wid):
    return db_rows(db, "SELECT id FROM leases WHERE worker_id = ? AND state = 'issued'", (wid,))


def check_exactly_once(db, n):
    rows = db_rows(db, "SELECT prompt_id, count(*) FROM groups GROUP BY prompt_id")
    if len(rows) != n or any(c != 1 for _, c in rows):
        fail("expected %d prompts with one group each, got %r" % (n, rows))


def hostile_requests(url):
    """Malformed requests get an ERROR reply naming the problem; the coordinator carries on."""
    try:
        import pynng
    except ImportError:
        return
    import struct
    magic = struct.pack("<IHH", 0x57505247, 2, 1)
    cases = [b"", b"GET / HTTP/1.1\r\n\r\n", magic, magic + struct.pack("<I", 0x7FFFFFF0) + b"x",
             magic + struct.pack("<I", 2) + b"\xc3\x28", struct.pack("<IHH", 0x57505247, 2, 16),
             struct.pack("<IHH", 0x57505247, 1, 1)]  # the previous protocol version
    with pynng.Req0(dial=url, recv_timeout=10000, send_timeout=10000) as s:
        for c in cases:
            s.send(c)
            rep = s.recv()
            mg, ver, typ = struct.unpack("<IHH", rep[:8])
            if mg != 0x57505247 or typ != 20:
                fail("malformed request %r got reply type %d" % (c[:20], typ))


def small_run(grpo, tmp, n):
    """n prompts, the store's path, grpo rollout's completions for them, an IPC URL, Procs."""
    prompts, db = os.path.join(tmp, "p.jsonl"), os.path.join(tmp, "w.db")
    write_prompts(prompts, n)
    return prompts, db, reference(grpo, tmp, prompts), "ipc://" + os.path.join(tmp, "coord.ipc"), \
        Procs(grpo, tmp)


def scenario_failover(grpo, tmp):
    n = 24
    prompts, db, want, url, P = small_run(grpo, tmp, n)
    try:
        serve = P.start("serve", serve_args(prompts, db, url))
        hostile_requests(url)
        # A and B are slow (40 ms per step: a group takes ~0.5 s), so they are caught holding a lease
        a = P.start("A", worker_args(url, "A", "--step-delay", "40", "--inflight", "1"))
        b = P.start("B", worker_args(url, "B", "--step-delay", "40", "--inflight", "1"))
        wait_until(lambda: held_leases(db, "A") and held_leases(db, "B"), 60, "A and B to hold leases")
        a.kill()
        a.wait()
        b.send_signal(signal.SIGSTOP)
        killed = [r[0] for r in held_leases(db, "A")]
        stopped = [r[0] for r in held_leases(db, "B")]
        if not killed or not stopped:
            fail("A or B finished its lease before the signal (killed %r, stopped %r)" % (killed, stopped))
        for w in ("C", "D"):
            P.start(w, worker_args(url, w, "--inflight", "2"))
        # B stays stopped until its lease lapsed and was handed to another worker
        wait_until(lambda: db_rows(db, "SELECT count(*) FROM leases WHERE id IN (%s) AND state = 'expired'"
                                   % ",".join(map(str, stopped)))[0][0] == len(stopped), 60,
                   "B's lease to lapse")
        b.send_signal(signal.SIGCONT)  # its late result is a duplicate, or the first and kept
        rc = P.wait(serve, 120)
        if rc != 0:
            fail("serve exited %d:\n%s" % (rc, P.log("serve")))
        check_exactly_once(db, n)
        exp = db_rows(db, "SELECT worker_id, count(*) FROM leases WHERE state = 'expired' GROUP BY worker_id")
        exp = dict(exp)
        if exp.get("A", 0) < len(killed) or exp.get("B", 0) < len(stopped):
            fail("expected the leases of A and B to lapse, got %r" % exp)
        reissued = db_rows(db, "SELECT count(*) FROM groups WHERE lease_attempt > 0")[0][0]
        if reissued < 1:
            fail("no group was recorded from a re-issued lease")
        if db_rows(db, "SELECT count(*) FROM groups WHERE worker_id = 'A'")[0][0] != 0:
            pass  # A may have returned groups before its last lease: fine
        got = completions(db)
        if got != want:
            diff = [(x, y) for x, y in zip(got, want) if x != y][:2]
            fail("completions differ from grpo rollout's (%d vs %d rows), e.g. %r" % (len(got), len(want), diff))
        st = subprocess.run([grpo, "stats", "--db", db, "--by", "worker", "--format", "csv"],
                            capture_output=True, text=True)
        if st.returncode != 0:
            fail("grpo stats --by worker: %s %s" % (st.stdout, st.stderr))
        lines = [l.split(",") for l in st.stdout.strip().splitlines()]
        rows = {r[lines[0].index("worker")]: dict(zip(lines[0], r)) for r in lines[1:]}
        for w, lost in (("A", killed), ("B", stopped)):
            if w not in rows or int(rows[w]["leases_expired"]) < len(lost):
                fail("grpo stats --by worker does not show %s's lapsed leases:\n%s" % (w, st.stdout))
        if sum(int(r["reissued_groups"]) for r in rows.values()) != reissued or \
                sum(int(r["groups"]) for r in rows.values()) != n or \
                any(int(rows[w]["groups"]) > 0 and not float(rows[w]["tokens_per_s"] or 0) > 0 for w in rows):
            fail("grpo stats --by worker disagrees with the groups table:\n%s" % st.stdout)
        total_reissues = sum(int(r[0]) for r in db_rows(db, "SELECT lease_attempt FROM groups"))
        print(st.stdout)
        print("ok: %d groups once each; expired leases %r; %d groups from re-issued leases "
              "(sum of attempts %d); completions equal grpo rollout's" % (n, exp, reissued, total_reissues))
    finally:
        P.cleanup()


def start_batch_logger(P, tmp, pub, keep=None):
    """A trainer stand-in (batch_logger.py) pulling from pub; returns (process, its log's path).
    keep: a folder where it saves every batch's tensors."""
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "trainer_bridge", "python") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    tlog = os.path.join(tmp, "batches.log")
    t = subprocess.Popen([sys.executable, os.path.join(HERE, "batch_logger.py"), pub, tlog]
                         + ([keep] if keep else []), env=env,
                         stdout=open(os.path.join(tmp, "trainer.log"), "w"), stderr=subprocess.STDOUT)
    t.name = "trainer"
    P.all.append(t)
    return t, tlog


def scenario_restart(grpo, tmp):
    """The coordinator is killed (SIGKILL) mid-run and restarted: it resumes the run without
    redoing recorded groups, and its trainer gets every group's batch (stored with the group, so
    a kill loses none). The trainer connects only after the restart: at the kill the recorded
    groups' batches are all undelivered (queued in the window or held behind it)."""
    n = 30
    prompts, db, want, url, P = small_run(grpo, tmp, n)
    pub = "ipc://" + os.path.join(tmp, "trainer.ipc")
    try:
        s1 = P.start("serve1", serve_args(prompts, db, url, "--publish", pub))
        for w in ("A", "B"):
            P.start(w, worker_args(url, w, "--step-delay", "10", "--give-up", "60"))
        # No trainer yet: the window (4) fills and the coordinator holds what the in-flight leases
        # return, then makes the workers wait; 5 groups are recorded well before that stops.
        wait_until(lambda: db_rows(db, "SELECT count(*) FROM groups")[0][0] >= 5, 60,
                   "five groups")
        s1.kill()
        s1.wait()
        before = db_rows(db, "SELECT id, prompt_id, finished_at, worker_id FROM groups ORDER BY id")
        if len(before) >= n:
            fail("the run finished before the coordinator was killed")
        t_restart = time.time()
        time.sleep(0.5)
        undelivered = db_rows(db, "SELECT count(*) FROM batches WHERE published_at IS NULL")[0][0]
        if undelivered != len(before):
            fail("%d groups recorded before the kill but %d undelivered batches stored"
                 % (len(before), undelivered))
        s2 = P.start("serve2", serve_args(prompts, db, url, "--publish", pub))
        trainer, tlog = start_batch_logger(P, tmp, pub)
        rc = P.wait(s2, 120)
        log = P.log("serve2")
        if rc != 0:
            fail("restarted serve exited %d:\n%s" % (rc, log))
        if not re.search(r"resuming run 1", log) or "%d of %d groups already recorded" % (len(before), n) not in log:
            fail("the restarted coordinator did not resume run 1 with %d groups:\n%s" % (len(before), log))
        check_exactly_once(db, n)
        after = db_rows(db, "SELECT id, prompt_id, finished_at, worker_id FROM groups ORDER BY id")
        if after[:len(before)] != before:
            fail("groups recorded before the kill changed")
        redone = db_rows(db, "SELECT count(*) FROM leases WHERE issued_at > ? AND prompt_id IN (%s)"
                         % ",".join(str(r[1]) for r in before), (t_restart,))[0][0]
        if redone:
            fail("%d recorded groups were leased again after the restart" % redone)
        if db_rows(db, "SELECT count(*) FROM runs")[0][0] != 1:
            fail("the restart started a new run")
        if completions(db) != want:
            fail("completions differ from grpo rollout's")
        try:
            trainer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fail("the trainer did not hear the end of the run:\n" + open(os.path.join(tmp, "trainer.log")).read())
        items = [int(l.split()[0]) & 0xFFFFFFFF for l in open(tlog)]
        if sorted(set(items)) != list(range(n)):
            fail("the trainer got batches of items %r, expected each of 0..%d" % (sorted(set(items)), n - 1))
        unacked = db_rows(db, "SELECT count(*), count(acked_at) FROM batches")[0]
        if unacked != (n, n):
            fail("the store has %d batches, %d acknowledged; expected %d of each" % (unacked + (n,)))
        print("ok: killed after %d/%d groups (each with its undelivered batch stored); the restart "
              "resumed run 1, leased none of them again, recorded the other %d once each; completions "
              "equal grpo rollout's; the trainer, attached after the restart, got every group's "
              "batch (%d deliveries for %d batches)"
              % (len(before), n, n - len(before), len(items), n))
    finally:
        P.cleanup()


def scenario_pause(grpo, tmp):
    """The coordinator is frozen (SIGSTOP) for 6 s mid-run: the workers' calls time out, they
    reconnect on fresh connections, and once it runs again every group is recorded exactly once
    with the completions of grpo rollout."""
    n = 24
    prompts, db, want, url, P = small_run(grpo, tmp, n)
    try:
        serve = P.start("serve", serve_args(prompts, db, url))
        for w in ("A", "B"):
            P.start(w, worker_args(url, w, "--step-delay", "40", "--inflight", "1", "--give-up", "30"))
        wait_until(lambda: db_rows(db, "SELECT count(*) FROM groups")[0][0] >= 2, 60, "two groups")
        serve.send_signal(signal.SIGSTOP)
        time.sleep(6)
        serve.send_signal(signal.SIGCONT)
        rc = P.wait(serve, 120)
        if rc != 0:
            fail("serve exited %d:\n%s" % (rc, P.log("serve")))
        logs = P.log("A") + P.log("B")
        if "reconnecting" not in logs:
            fail("no worker reconnected while the coordinator was stopped:\n" + logs)
        check_exactly_once(db, n)
        if completions(db) != want:
            fail("completions differ from grpo rollout's")
        print("ok: the coordinator was stopped for 6 s; the workers reconnected (%d times) and every "
              "group was recorded once, equal to grpo rollout's" % logs.count("reconnecting"))
    finally:
        P.cleanup()


def scenario_tail(grpo, tmp):
    """--backup-after: at the run's tail the fast worker A gets a backup lease on the group the
    slow worker B is still generating; every group is recorded once, equal to grpo rollout's."""
    n = 8
    prompts, db, want, url, P = small_run(grpo, tmp, n)
    try:
        serve = P.start("serve", serve_args(prompts, db, url, "--backup-after", "0.3"))
        P.start("B", worker_args(url, "B", "--step-delay", "250", "--inflight", "1"))
        wait_until(lambda: held_leases(db, "B"), 60, "B to hold a lease")
        P.start("A", worker_args(url, "A", "--inflight", "2"))
        rc = P.wait(serve, 120)
        log = P.log("serve")
        if rc != 0:
            fail("serve exited %d:\n%s" % (rc, log))
        m = re.search(r"backups (\d+)", log)
        if not m or int(m.group(1)) < 1:
            fail("no backup lease was issued:\n" + log)
        check_exactly_once(db, n)
        if completions(db) != want:
            fail("completions differ from grpo rollout's")
        won = db_rows(db, "SELECT count(*) FROM groups g JOIN leases l ON l.prompt_id = g.prompt_id "
                          "AND l.worker_id = 'B' WHERE g.worker_id = 'A'")[0][0]
        if won < 1:
            fail("A never recorded a group that B had been leased")
        print("ok: %s backup lease(s); A recorded %d group(s) B had been leased; every group once, "
              "equal to grpo rollout's" % (m.group(1), won))
    finally:
        P.cleanup()


def scenario_load(grpo, tmp, seconds, workers):
    n = int(max(10000, 300 * seconds))  # more than can finish: the run is cut by time
    prompts, db = os.path.join(tmp, "p.jsonl"), os.path.join(tmp, "w.db")
    write_prompts(prompts, n)
    url = "tcp://127.0.0.1:%d" % (20000 + os.getpid() % 20000)
    P = Procs(grpo, tmp)
    try:
        serve = P.start("serve", serve_args(prompts, db, url, "--lease-timeout", "10"))
        wait_until(lambda: "listening on" in P.log("serve") or serve.poll() is not None, 120,
                   "the coordinator to listen")
        for i in range(workers):
            P.start("w%02d" % i, worker_args(url, "w%02d" % i, "--give-up", "5"))
        t0 = time.time()
        peak, samples = 0, []
        while time.time() - t0 < seconds and serve.poll() is None:
            time.sleep(0.5)
            try:
                with open("/proc/%d/status" % serve.pid) as f:
                    m = re.search(r"VmRSS:\s+(\d+)", f.read())
                    peak = max(peak, int(m.group(1)) if m else 0)
                    samples.append(int(m.group(1)) if m else 0)
            except OSError:
                pass
        if serve.poll() is not None and "prompts done" not in P.log("serve"):
            fail("the coordinator died:\n" + P.log("serve"))
        serve.send_signal(signal.SIGTERM)
        P.wait(serve, 60)
        for p in P.all:
            if p is not serve:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        log = P.log("serve")
        m = re.search(r"(\d+)/(\d+) prompts done; (\d+) groups recorded in ([\d.]+) s \(([\d.]+) groups/s\).*"
                      r"coordinator CPU ([\d.]+) s \(([\d.]+)%\), max RSS (\d+) KiB", log)
        if not m:
            fail("no summary from the coordinator:\n" + log)
        recorded, secs, rate, cpu_pct, maxrss = int(m.group(3)), float(m.group(4)), float(m.group(5)), \
            float(m.group(7)), int(m.group(8))
        groups = db_rows(db, "SELECT count(*), count(DISTINCT prompt_id) FROM groups")[0]
        lost = db_rows(db, "SELECT count(DISTINCT prompt_id) FROM leases WHERE state = 'done' AND "
                           "prompt_id NOT IN (SELECT prompt_id FROM groups)")[0][0]
        if groups[0] != groups[1]:
            fail("a group was recorded twice")
        if groups[0] != recorded or lost:
            fail("lost groups: coordinator counted %d, store holds %d, %d done leases without a group"
                 % (recorded, groups[0], lost))
        if recorded == 0:
            fail("no group recorded")
        # Bound: the prompt set and lease table are O(prompts); everything per request is freed.
        # Under AddressSanitizer freed memory sits in ASan's quarantine (256 MiB by default) before
        # it is reused, so the sanitized build (GRPO_SANITIZED=1, set by scripts/test.sh) gets
        # that much more headroom; the bound itself is checked by the normal build.
        limit_kib = 256 * 1024 + (256 * 1024 if os.environ.get("GRPO_SANITIZED") == "1" else 0)
        if maxrss > limit_kib:
            fail("coordinator peak RSS %d KiB (bound %d KiB)" % (maxrss, limit_kib))
        wk = db_rows(db, "SELECT count(DISTINCT worker_id) FROM groups")[0][0]
        span = db_rows(db, "SELECT max(finished_at) - min(started_at) FROM groups")[0][0] or 0
        quart = [samples[min(len(samples) - 1, len(samples) * q // 4)] for q in (1, 2, 3, 4)] if samples else []
        print("ok: %d workers (%d returned groups), %d groups in %.1f s = %.1f groups/s (%.1f groups/s "
              "while workers ran), coordinator CPU %.1f%%, peak RSS %d KiB, RSS at 1/4, 1/2, 3/4, end "
              "of the window %r KiB; none lost or doubled"
              % (workers, wk, recorded, secs, rate, recorded / span if span > 0 else 0, cpu_pct, maxrss,
                 quart))
    finally:
        P.cleanup()


def trainer_setup(tmp, n):
    """A scenario with a trainer on the bridge: n prompts written, the store's path, the shared
    weights folder (created), the coordinator's and the trainer's ipc URLs, and the environment
    that lets the trainer import grpo_bridge."""
    prompts, db = os.path.join(tmp, "p.jsonl"), os.path.join(tmp, "w.db")
    shared = os.path.join(tmp, "shared")
    os.makedirs(shared)
    write_prompts(prompts, n)
    url = "ipc://" + os.path.join(tmp, "coord.ipc")
    pub = "ipc://" + os.path.join(tmp, "trainer.ipc")
    env = {"PYTHONPATH": os.path.join(SRC, "trainer_bridge", "python") + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    return prompts, db, shared, url, pub, env


def scenario_weights(grpo, tmp, staleness=0):
    """A trainer on the bridge sends new weights (version 1) mid-run; --max-staleness 0 (workers
    drop their in-flight groups) or 1 (they finish them, and v0 groups are still recorded).
    The trainer connects only after the workers' --give-up: until then the publisher's window is
    full, and the coordinator must keep answering the workers (it holds the batches, and the
    workers wait) instead of blocking on the trainer."""
    try:
        import torch  # noqa: F401  (the trainer needs it)
        import safetensors  # noqa: F401
    except ImportError:
        print("torch/safetensors missing")
        sys.exit(77)
    n = 16
    prompts, db, shared, url, pub, env = trainer_setup(tmp, n)
    P = Procs(grpo, tmp)
    try:
        serve = P.start("serve", serve_args(prompts, db, url, "--publish", pub, "--max-staleness", str(staleness)))
        wait_until(lambda: "listening on" in P.log("serve") or serve.poll() is not None, 60,
                   "the coordinator to listen")
        tlog = os.path.join(tmp, "batches.log")
        trainer = subprocess.Popen([sys.executable, os.path.join(HERE, "workers_trainer.py"), pub, MODEL,
                                    shared, tlog, "3", str(GIVE_UP + 3)], env=dict(os.environ, **env),
                                   stdout=open(os.path.join(tmp, "trainer.log"), "w"), stderr=subprocess.STDOUT)
        trainer.name = "trainer"
        P.all.append(trainer)
        for w in ("A", "B"):
            P.start(w, worker_args(url, w, "--step-delay", "30", "--inflight", "1"))
        t0 = time.time()
        while serve.poll() is None and time.time() - t0 < 120:
            time.sleep(0.2)
        if serve.poll() is None or serve.returncode != 0:
            tails = "\n".join("--- %s:\n%s" % (k, P.log(k)[-3000:].replace("\r", "\n"))
                              for k in ("serve", "trainer", "A", "B"))
            fail("serve %s:\n%s%s" % ("hung" if serve.poll() is None else "exited %d" % serve.returncode,
                                       tails, "\n--- serve's threads:\n" + stacks(serve.pid)
                                       if serve.poll() is None else ""))
        trainer.wait(timeout=30)
        check_exactly_once(db, n)
        pv = db_rows(db, "SELECT version, location, sha256 FROM policy_versions ORDER BY version")
        if len(pv) != 2 or pv[1][0] != 1 or not pv[1][2]:
            fail("policy_versions: %r" % pv)
        by_v = dict(db_rows(db, "SELECT policy_version, count(*) FROM groups GROUP BY policy_version"))
        if by_v.get(0, 0) < 3 or by_v.get(1, 0) < 1:
            fail("expected groups of versions 0 and 1, got %r" % by_v)
        for w in ("A", "B"):
            if "policy version 1" not in P.log(w) and db_rows(db, "SELECT count(*) FROM groups WHERE "
                                                              "worker_id = ? AND policy_version = 1", (w,))[0][0]:
                fail("worker %s recorded v1 groups without loading v1" % w)
        batches = [tuple(map(int, l.split())) for l in open(tlog)]
        ids = [b[0] for b in batches]
        if len(ids) != n or len(set(ids)) != n:
            fail("the trainer got %d batches (%d distinct), expected %d" % (len(ids), len(set(ids)), n))
        bv = {b[0] & 0xFFFFFFFF: b[1] for b in batches}
        gv = dict(db_rows(db, "SELECT p.idx, g.policy_version FROM groups g JOIN prompts p ON p.id = g.prompt_id"))
        if bv != gv:
            fail("batch policy versions %r differ from the groups' %r" % (bv, gv))
        # Determinism across versions: each group equals grpo rollout with the weights it names.
        v1dir = os.path.join(tmp, "v1model")
        os.makedirs(v1dir)
        os.symlink(os.path.join(MODEL, "config.json"), os.path.join(v1dir, "config.json"))
        os.symlink(pv[1][1], os.path.join(v1dir, "model.safetensors"))
        got = {(r[0], r[1]): r for r in completions(db)}
        for v, mdir in ((0, MODEL), (1, v1dir)):
            ref = os.path.join(tmp, "ref%d.db" % v)
            r = subprocess.run([grpo, "rollout", "--model", mdir, "--prompts", prompts, "--db", ref,
                                "--threads", "1"] + GEN, capture_output=True, text=True, cwd=tmp)
            if r.returncode != 0:
                fail("grpo rollout v%d: %s" % (v, r.stderr))
            want = {(x[0], x[1]): x for x in completions(ref)}
            keys = [k for k in got if gv[k[0]] == v]
            bad = [k for k in keys if got[k][2:6] != want[k][2:6]]  # tokens, logprobs, text, finish
            if bad:
                fail("v%d completions differ from grpo rollout with those weights at %r" % (v, bad[:3]))
            if v == 1 and all(got[k][2] == dict(((x[0], x[1]), x[2]) for x in completions(
                    os.path.join(tmp, "ref0.db")))[k] for k in keys):
                fail("the v1 completions equal v0's: the new weights changed nothing")
        if "trainer backpressure: " not in P.log("serve"):
            fail("the trainer came up late, yet serve's summary reports no batch held for it:\n"
                 + P.log("serve")[-3000:])
        print("ok: groups by version %r; every group's completions equal grpo rollout with its "
              "version's weights; the trainer got each of the %d batches once with the right version"
              % (by_v, n))
    finally:
        P.cleanup()


def delta_check_versions(db, shared, trainer_log):
    """policy_versions: 0 is the model file (location and sha256), 1 the trainer's version 1,
    whose file (built by the coordinator from the delta) is byte for byte the full update."""
    import hashlib
    sha = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()  # noqa: E731
    pub = [l.split() for l in open(trainer_log) if l.startswith("published")]
    if len(pub) != 1 or pub[0][2] != "delta" or int(pub[0][3]) * 10 > int(pub[0][4]):
        fail("the trainer's version 1 was not a delta of at most a tenth of the file: %r" % pub)
    pv = db_rows(db, "SELECT version, location, sha256 FROM policy_versions ORDER BY version")
    want0 = (0, os.path.realpath(MODEL), sha(os.path.join(MODEL, "model.safetensors")))
    if len(pv) != 2 or tuple(pv[0]) != want0 or pv[1][0] != 1 or pv[1][2] != pub[0][5]:
        fail("policy_versions %r; expected %r and v1 with sha256 %s" % (pv, want0, pub[0][5]))
    full = os.path.join(shared, "full-v1.safetensors")
    if os.path.dirname(pv[1][1]) != shared or open(pv[1][1], "rb").read() != open(full, "rb").read():
        fail("v1 at %s is not the full v1 file %s, beside the delta" % (pv[1][1], full))
    return full


def delta_check_refused(db, trainer_log, P):
    """The corrupted delta was refused, and afterwards every worker still served version 1."""
    lines = open(trainer_log).read().splitlines()
    at = [i for i, l in enumerate(lines) if l.startswith(("refused 2", "accepted 2"))]
    if not at or not lines[at[0]].startswith("refused 2") or "sha256" not in lines[at[0]]:
        fail("the corrupted delta was not refused on its sha256: %r" % lines[at[0]:at[0] + 1])
    after = [int(l.split()[1]) & 0xFFFFFFFF for l in lines[at[0] + 1:] if l.startswith("batch")]
    rows = db_rows(db, "SELECT p.idx, g.worker_id, g.policy_version FROM groups g "
                       "JOIN prompts p ON p.id = g.prompt_id")
    later = [(w, v) for i, w, v in rows if i in after]
    if {w for w, _ in later} != {"A", "B"} or any(v != 1 for _, v in later):
        fail("groups after the refused delta (worker, version): %r; expected both workers, v1" % later)
    for w in ("A", "B"):
        if "policy version 2" in P.log(w) or "policy version 1" not in P.log(w):
            fail("worker %s did not stay on version 1:\n%s" % (w, P.log(w)[-2000:]))
    return len(later)


def scenario_delta(grpo, tmp):
    try:
        import torch  # noqa: F401  (the trainer needs it)
        import safetensors  # noqa: F401
        import numpy  # noqa: F401
    except ImportError:
        print("torch/safetensors/numpy missing")
        sys.exit(77)
    n = 24
    prompts, db, shared, url, pub, env = trainer_setup(tmp, n)
    P = Procs(grpo, tmp)
    try:
        serve = P.start("serve", serve_args(prompts, db, url, "--publish", pub, "--model", MODEL,
                                            "--max-staleness", "0", "--publish-window", "2"))
        wait_until(lambda: "listening on" in P.log("serve") or serve.poll() is not None, 60,
                   "the coordinator to listen")
        tlog = os.path.join(tmp, "trainer_events.log")
        trainer = subprocess.Popen([sys.executable, os.path.join(HERE, "workers_delta_trainer.py"),
                                    pub, MODEL, shared, tlog, "3", "8"], env=dict(os.environ, **env),
                                   stdout=open(os.path.join(tmp, "trainer.log"), "w"),
                                   stderr=subprocess.STDOUT)
        trainer.name = "trainer"
        P.all.append(trainer)
        for w in ("A", "B"):
            P.start(w, worker_args(url, w, "--step-delay", "30", "--inflight", "1"))
        if P.wait(serve, 120) != 0 or P.wait(trainer, 30) != 0:
            fail("serve exited %s, trainer %s:\n%s" % (serve.returncode, trainer.returncode, "\n".join(
                "--- %s:\n%s" % (k, P.log(k)[-3000:]) for k in ("serve", "trainer", "A", "B"))))
        check_exactly_once(db, n)
        full = delta_check_versions(db, shared, tlog)
        n_after = delta_check_refused(db, tlog, P)
        by_v = dict(db_rows(db, "SELECT policy_version, count(*) FROM groups GROUP BY policy_version"))
        if by_v.get(0, 0) < 2 or by_v.get(1, 0) < 4:
            fail("expected groups of versions 0 and 1, got %r" % by_v)
        v1dir = os.path.join(tmp, "v1model")
        os.makedirs(v1dir)
        os.symlink(os.path.join(MODEL, "config.json"), os.path.join(v1dir, "config.json"))
        os.symlink(full, os.path.join(v1dir, "model.safetensors"))
        gv = dict(db_rows(db, "SELECT p.idx, g.policy_version FROM groups g JOIN prompts p ON p.id = g.prompt_id"))
        got = {(r[0], r[1]): r for r in completions(db)}
        refs = {}
        for v, mdir in ((0, MODEL), (1, v1dir)):
            ref = os.path.join(tmp, "ref%d.db" % v)
            r = subprocess.run([grpo, "rollout", "--model", mdir, "--prompts", prompts, "--db", ref,
                                "--threads", "1"] + GEN, capture_output=True, text=True, cwd=tmp)
            if r.returncode != 0:
                fail("grpo rollout v%d: %s" % (v, r.stderr))
            refs[v] = {(x[0], x[1]): x for x in completions(ref)}
            bad = [k for k in got if gv[k[0]] == v and got[k][2:6] != refs[v][k][2:6]]
            if bad:
                fail("v%d completions differ from grpo rollout with the full v%d file at %r" % (v, v, bad[:3]))
        if all(refs[0][k][2] == refs[1][k][2] for k in refs[1]):
            fail("v1's completions equal v0's: the delta changed nothing that matters")
        print("ok: groups by version %r; v1 arrived as a delta, was built equal to the full file, "
              "and its groups equal grpo rollout with the full file; the corrupted delta was refused "
              "and the %d groups after it were v1 on both workers" % (by_v, n_after))
    finally:
        P.cleanup()


def scenario_tampered(grpo, tmp):
    try:
        import torch  # noqa: F401
        import safetensors.torch
        sys.path.insert(0, os.path.join(SRC, "trainer_bridge", "python"))
        from grpo_bridge import BatchClient
    except ImportError:
        print("torch/safetensors/pynng missing")
        sys.exit(77)
    prompts, db, shared, url, pub, _ = trainer_setup(tmp, 40)
    P = Procs(grpo, tmp)
    try:
        P.start("serve", serve_args(prompts, db, url, "--publish", pub, "--max-staleness", "0"))
        wait_until(lambda: "listening on" in P.log("serve"), 60, "the coordinator to listen")
        a = P.start("A", worker_args(url, "A", "--step-delay", "30", "--inflight", "1"))
        mf = os.path.join(MODEL, "model.safetensors")
        sd = safetensors.torch.load_file(mf)
        sd["lm_head.weight"] = (sd["lm_head.weight"].float() * 1.5).to(sd["lm_head.weight"].dtype)
        with BatchClient(pub, auto_ack=True) as client:
            client.ack(client.next(timeout=60))
            a.send_signal(signal.SIGSTOP)
            client.publish_weights(sd, 1, shared_dir=shared)  # checked by the coordinator
            wait_until(lambda: "serve: policy version 1" in P.log("serve"), 30, "v1 announced")
            v1 = os.path.join(shared, "policy-v1.safetensors")
            with open(mf, "rb") as f, open(v1 + ".tmp", "wb") as g:
                g.write(f.read())
            os.replace(v1 + ".tmp", v1)
            a.send_signal(signal.SIGCONT)
            for _ in range(200):  # keep the window open until the worker is gone
                if a.poll() is not None:
                    break
                try:
                    client.ack(client.next(timeout=0.2))
                except TimeoutError:
                    pass
        rc = P.wait(a, 60)
        log = P.log("A")
        if rc == 0 or "the coordinator announced" not in log or "policy version 1" in log:
            fail("worker A exited %d after loading tampered weights:\n%s" % (rc, log[-3000:]))
        v1_groups = db_rows(db, "SELECT count(*) FROM groups WHERE policy_version = 1")[0][0]
        if v1_groups:
            fail("%d groups recorded with the tampered version 1" % v1_groups)
        print("ok: the worker refused weights whose sha256 is not the one announced: %s"
              % [l for l in log.splitlines() if "announced" in l][0][:200])
    finally:
        P.cleanup()


def pool_equals_rollout(grpo, tmp, n, flags):
    """n prompts through `grpo serve` with two workers, GEN + flags on both sides: every group
    once, and the pool's completions equal grpo rollout's with the same flags. Returns the
    prompts' path, the pool's store and the completions."""
    global GEN
    GEN = GEN + flags
    prompts, db, want, url, P = small_run(grpo, tmp, n)
    try:
        serve = P.start("serve", serve_args(prompts, db, url))
        for w in ("A", "B"):
            P.start(w, worker_args(url, w))
        rc = P.wait(serve, 120)
        if rc != 0:
            fail("serve exited %d:\n%s" % (rc, P.log("serve")))
        check_exactly_once(db, n)
        got = completions(db)
        if got != want:
            fail("completions differ from grpo rollout %s's (%d vs %d rows)"
                 % (" ".join(flags), len(got), len(want)))
    finally:
        P.cleanup()
    return prompts, db, got


def scenario_speculative(grpo, tmp):
    """--speculative 2 on serve reaches the workers: their groups equal grpo rollout's with it."""
    n = 8
    _, db, _ = pool_equals_rollout(grpo, tmp, n, ["--speculative", "2"])
    rows = db_rows(db, "SELECT count(*) FROM groups WHERE sampling_json LIKE '%\"speculative\":2%'")
    if rows[0][0] != n:
        fail("expected speculative 2 in every group's sampling record, got %d of %d" % (rows[0][0], n))
    print("ok: %d groups with --speculative 2 equal grpo rollout's" % n)


def scenario_numerics(grpo, tmp):
    """--numerics q8 --kv-dtype bf16 on serve reach the workers: their groups equal grpo rollout's
    with the same flags (and differ from the exact run's), and every group's sampling record and
    the run's config name them, so grpo replay loads the model as the workers did."""
    global GEN
    exact_gen, n = GEN, 6
    prompts, db, got = pool_equals_rollout(grpo, tmp, n, ["--numerics", "q8", "--kv-dtype", "bf16"])
    GEN = exact_gen
    os.remove(os.path.join(tmp, "ref.db"))
    if reference(grpo, tmp, prompts) == got:
        fail("the q8/bf16 completions equal the exact run's: the flags changed nothing")
    rows = db_rows(db, "SELECT count(*) FROM groups WHERE sampling_json LIKE "
                   "'%\"numerics\":\"q8\"%' AND sampling_json LIKE '%\"kv_dtype\":\"bf16\"%'")
    if rows[0][0] != n:
        fail("expected numerics q8 and kv_dtype bf16 in every group's sampling record, got %d of %d"
             % (rows[0][0], n))
    cfg = db_rows(db, "SELECT config_json FROM runs")
    if len(cfg) != 1 or '"numerics":"q8"' not in cfg[0][0] or '"kv_dtype":"bf16"' not in cfg[0][0]:
        fail("the run's config does not name the numerics and KV dtype: %r" % (cfg,))
    print("ok: %d groups with --numerics q8 --kv-dtype bf16 equal grpo rollout's" % n)


def scenario_repeats(grpo, tmp):
    """Records with the same content at other lines are other prompts: each gets its group."""
    prompts, db = os.path.join(tmp, "p.jsonl"), os.path.join(tmp, "w.db")
    write_prompts(prompts, 6)
    with open(prompts) as f:
        lines = f.read().splitlines()
    rep = [lines[0].replace('"id": "q0"', '"id": "q0again"'),  # same content, another id
           lines[4],  # a record without an id, repeated verbatim (keyed by its line number)
           lines[1].replace('"id": "q1"', '"id": "q1again"')]
    with open(prompts, "w") as f:
        f.write("\n".join(lines + rep) + "\n")
    n = len(lines) + len(rep)
    want = reference(grpo, tmp, prompts)
    if len({r[0] for r in want}) != n:
        fail("the reference grpo rollout recorded %d prompts, expected %d"
             % (len({r[0] for r in want}), n))
    url = "ipc://" + os.path.join(tmp, "coord.ipc")
    P = Procs(grpo, tmp)
    try:
        serve = P.start("serve", serve_args(prompts, db, url))
        for w in ("A", "B"):
            P.start(w, worker_args(url, w))
        rc = P.wait(serve, 120)
        log = P.log("serve")
        if rc != 0:
            fail("serve exited %d:\n%s" % (rc, log))
        if "skipped" in log:
            fail("serve skipped a repeated prompt:\n%s" % log)
        check_exactly_once(db, n)
        texts = db_rows(db, "SELECT coalesce(p.text, p.messages_json), count(*) FROM groups g "
                            "JOIN prompts p ON p.id = g.prompt_id GROUP BY 1 "
                            "HAVING count(*) > 1")
        if len(texts) != len(rep):
            fail("expected %d prompt texts with two groups each, got %r" % (len(rep), texts))
        got = completions(db)
        if got != want:
            fail("completions differ from grpo rollout's (%d vs %d rows)" % (len(got), len(want)))
        print("ok: %d records (%d repeating an earlier one's content) -> %d groups, once each; "
              "completions equal grpo rollout's" % (n, len(rep), n))
    finally:
        P.cleanup()


def store_routes(db):
    """{(prompt index, sample or -1 for the prompt): (ids as an (n, layers, k) list, experts)} of
    a store's recorded routes (zlib blobs, 1-byte or int16 ids)."""
    import zlib
    out = {}
    rows = db_rows(db, "SELECT p.idx, r.experts, r.layers, r.k, r.prompt_routes FROM group_routes r "
                       "JOIN groups g ON g.id = r.group_id JOIN prompts p ON p.id = g.prompt_id")
    shape = {}
    for idx, e, l, k, blob in rows:
        shape[idx] = (e, l, k)
        out[(idx, -1)] = (ids_of(zlib.decompress(blob), e, l, k), e)
    for idx, s, blob in db_rows(db, "SELECT p.idx, r.sample_index, r.routes FROM completion_routes r "
                                    "JOIN groups g ON g.id = r.group_id "
                                    "JOIN prompts p ON p.id = g.prompt_id"):
        e, l, k = shape[idx]
        out[(idx, s)] = (ids_of(zlib.decompress(blob), e, l, k), e)
    return out


def ids_of(raw, e, l, k):
    import numpy as np
    a = np.frombuffer(raw, np.uint8 if e <= 256 else "<i2").astype(np.int64)
    return a.reshape(-1, l, k).tolist()


def scenario_routes(grpo, tmp):
    """serve --record-routes with two workers and a trainer: the store holds every group's routes
    equal to those `grpo rollout --record-routes` records (same seed), and the trainer's batches
    (version 2) carry them where the layout puts them."""
    import numpy as np
    n = 8
    prompts, db = os.path.join(tmp, "p.jsonl"), os.path.join(tmp, "w.db")
    write_prompts(prompts, n)
    ref = os.path.join(tmp, "ref.db")
    r = subprocess.run([grpo, "rollout", "--model", MODEL, "--prompts", prompts, "--db", ref,
                        "--threads", "1", "--record-routes"] + GEN, capture_output=True, text=True,
                       cwd=tmp)
    if r.returncode != 0:
        fail("grpo rollout --record-routes: " + r.stderr)
    want, want_routes = completions(ref), store_routes(ref)
    url, pub = "ipc://" + os.path.join(tmp, "coord.ipc"), "ipc://" + os.path.join(tmp, "pub.ipc")
    keep = os.path.join(tmp, "batches")
    os.makedirs(keep)
    P = Procs(grpo, tmp)
    try:
        serve = P.start("serve", serve_args(prompts, db, url, "--record-routes", "--publish", pub))
        t, tlog = start_batch_logger(P, tmp, pub, keep)
        for w in ("A", "B"):
            P.start(w, worker_args(url, w, "--inflight", "2"))
        rc = P.wait(serve, 120)
        if rc != 0:
            fail("serve exited %d:\n%s" % (rc, P.log("serve")))
        P.wait(t, 60)
        check_exactly_once(db, n)
        if completions(db) != want:
            fail("completions differ from grpo rollout's")
        got_routes = store_routes(db)
        if got_routes != want_routes or len(want_routes) != n * 5:
            bad = [k for k in want_routes if got_routes.get(k) != want_routes[k]][:3]
            fail("the store's routes differ from grpo rollout --record-routes's: %r (%d vs %d)"
                 % (bad, len(got_routes), len(want_routes)))
        files = sorted(os.listdir(keep))
        if len(files) != n:
            fail("the trainer got %d batches, expected %d" % (len(files), n))
        checked = 0
        for f in files:
            b = np.load(os.path.join(keep, f))
            off, pl, g, si = b["seq_offsets"], b["prompt_lens"], b["group_ids"], b["sample_idx"]
            rows = np.concatenate([[0], np.cumsum(np.maximum(np.diff(off) - pl - 1, 0))])
            for i in range(len(pl)):
                p0 = int(b["route_prompt_offsets"][i])
                pr = b["route_prompt"][p0:p0 + pl[i]].astype(np.int64).tolist()
                cr = b["route_completion"][rows[i]:rows[i + 1]].astype(np.int64).tolist()
                if pr != want_routes[(int(g[i]), -1)][0] or cr != want_routes[(int(g[i]), int(si[i]))][0]:
                    fail("batch %s sequence %d: routes differ from the rollout's" % (f, i))
                checked += 1
        print("ok: %d groups, every prompt's and completion's routes in the store equal grpo rollout "
              "--record-routes's, and %d sequences of the trainer's batches carry them" % (n, checked))
    finally:
        P.cleanup()


def scenario_tools(grpo, tmp):
    """serve --tools python with two workers: every completion, and every turn's action end,
    observation length and cut, equal what `grpo rollout --tools python` records (same seed), and
    the trainer's batches carry tool_mask 0 on the observation tokens. Needs the python tool:
    skipped (77) when grpo rollout says it is unsupported here."""
    import numpy as np
    n = 6
    prompts, db = os.path.join(tmp, "p.jsonl"), os.path.join(tmp, "w.db")
    # the demo policy answers these with a ```python block, which the tool runs
    fns = ["len(xs)", "max(xs)", "min(xs)", "sum(xs)", "sorted(xs)", "xs[0]"]
    with open(prompts, "w") as f:
        for i, body in enumerate(fns[:n]):
            f.write(json.dumps({"id": "t%d" % i, "task": "code", "language": "python",
                                "prompt": "Write a Python function g(xs) that returns %s." % body,
                                "tests": {"fn_name": "g", "inputs": [[[1, 2]]],
                                          "outputs": [eval(body, {"xs": [1, 2]})]}}) + "\n")
    ref = os.path.join(tmp, "ref.db")
    demo = os.path.join(SRC, "models", "demo")
    gen = ["--group", "4", "--max-new-tokens", "80", "--seed", "1234", "--temperature", "0.9"]
    tools = ["--tools", "python", "--max-tool-calls", "2", "--max-obs-tokens", "16"]
    r = subprocess.run([grpo, "rollout", "--model", demo, "--prompts", prompts, "--db", ref,
                        "--threads", "1"] + gen + tools, capture_output=True, text=True, cwd=tmp)
    if r.returncode != 0 and ("unsupported" in r.stderr.lower() or "stub" in r.stderr):
        print("the python tool is not available here: " + r.stderr.strip())
        sys.exit(77)
    if r.returncode != 0:
        fail("grpo rollout --tools python: " + r.stderr)
    turns_sql = ("SELECT p.idx, c.sample_index, t.idx, t.action_end, t.n_obs, t.n_obs_cut "
                 "FROM turns t JOIN completions c ON c.id = t.completion_id "
                 "JOIN groups g ON g.id = c.group_id JOIN prompts p ON p.id = g.prompt_id "
                 "ORDER BY 1, 2, 3")
    want, want_turns = completions(ref), db_rows(ref, turns_sql)
    url, pub = "ipc://" + os.path.join(tmp, "coord.ipc"), "ipc://" + os.path.join(tmp, "pub.ipc")
    keep = os.path.join(tmp, "batches")
    os.makedirs(keep)
    P = Procs(grpo, tmp)
    try:
        serve = P.start("serve", ["serve", "--prompts", prompts, "--db", db, "--listen", url,
                                  "--lease-timeout", "10", "--linger", "1", "--publish", pub]
                        + gen + tools)
        t, tlog = start_batch_logger(P, tmp, pub, keep)
        for w in ("A", "B"):
            P.start(w, ["worker", "--connect", url, "--model", demo, "--threads", "1", "--id", w,
                        "--give-up", str(GIVE_UP), "--inflight", "2", "--tool-threads", "2"])
        rc = P.wait(serve, 120)
        if rc != 0:
            fail("serve exited %d:\n%s" % (rc, P.log("serve")))
        P.wait(t, 60)
        check_exactly_once(db, n)
        if completions(db) != want:
            fail("completions differ from grpo rollout --tools python's")
        if db_rows(db, turns_sql) != want_turns:
            fail("the store's turns differ from grpo rollout --tools python's")
        obs = 0
        for f in sorted(os.listdir(keep)):
            b = np.load(os.path.join(keep, f))
            if "tool_mask" in b:  # 0 on prompt tokens too: count the completions' only
                off, pl = b["seq_offsets"], b["prompt_lens"]
                for i in range(len(pl)):
                    obs += int((b["tool_mask"][off[i] + pl[i]:off[i + 1]] == 0).sum())
        want_obs = sum(row[4] for row in want_turns)
        if not want_turns:
            fail("grpo rollout --tools python made no tool call: nothing was checked")
        if obs != want_obs:
            fail("the batches mark %d observation tokens, the turns %d" % (obs, want_obs))
        print("ok: %d groups with %d turns equal grpo rollout --tools python's; the batches mark "
              "their %d observation tokens" % (n, len(want_turns), obs))
    finally:
        P.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["failover", "restart", "load", "weights", "repeats", "pause", "tail",
                                         "routes", "tools", "delta", "tampered", "speculative",
                                         "numerics"])
    ap.add_argument("--grpo", required=True)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--staleness", type=int, default=0, help="weights: --max-staleness")
    ap.add_argument("--model", help="model directory (default: tests/data/tiny_models/bf16)")
    a = ap.parse_args()
    a.grpo = os.path.abspath(a.grpo)
    if a.model:
        global MODEL
        MODEL = os.path.abspath(a.model)
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        print("no tiny model at " + MODEL)
        sys.exit(77)
    tmp = a.keep or tempfile.mkdtemp(prefix="grpo-workers-")
    os.makedirs(tmp, exist_ok=True)
    try:
        if a.scenario == "failover":
            scenario_failover(a.grpo, tmp)
        elif a.scenario == "restart":
            scenario_restart(a.grpo, tmp)
        elif a.scenario == "tail":
            scenario_tail(a.grpo, tmp)
        elif a.scenario == "pause":
            scenario_pause(a.grpo, tmp)
        elif a.scenario == "repeats":
            scenario_repeats(a.grpo, tmp)
        elif a.scenario == "weights":
            scenario_weights(a.grpo, tmp, a.staleness)
        elif a.scenario == "routes":
            scenario_routes(a.grpo, tmp)
        elif a.scenario == "delta":
            scenario_delta(a.grpo, tmp)
        elif a.scenario == "tampered":
            scenario_tampered(a.grpo, tmp)
        elif a.scenario == "tools":
            scenario_tools(a.grpo, tmp)
        elif a.scenario == "speculative":
            scenario_speculative(a.grpo, tmp)
        elif a.scenario == "numerics":
            scenario_numerics(a.grpo, tmp)
        else:
            scenario_load(a.grpo, tmp, a.seconds, a.workers)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
