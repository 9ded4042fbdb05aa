"""Shared fixtures of the Python package tests. ctest runs them with GRPO_LIBRARY (the built
libgrpo.so), PYTHONPATH (python/ and trainer_bridge/python) and GRPO_BIN (the grpo command)."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def grpo_bin():
    b = os.environ.get("GRPO_BIN")
    assert b and os.path.exists(b), "GRPO_BIN must name the built grpo command (ctest sets it)"
    return b


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def run_cli_verify(grpo_bin, tmp_path_factory):
    """grpo verify over rows (dicts) with a reward config; returns its output rows in order."""
    def run(rows, config=None, jobs=2):
        d = tmp_path_factory.mktemp("cli")
        inp = d / "in.jsonl"
        inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        cmd = [grpo_bin, "verify", "--input", str(inp), "--jobs", str(jobs)]
        if config is not None:
            (d / "rewards.json").write_text(json.dumps(config))
            cmd += ["--config", str(d / "rewards.json")]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert out.returncode in (0, 1), out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]
    return run
