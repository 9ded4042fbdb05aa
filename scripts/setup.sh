#!/usr/bin/env bash
# Installs what grpo needs on Debian 12, idempotently:
#   scripts/setup.sh            what building and running `grpo` needs (apt only: compilers, the
#                               C libraries, python3 for the code verifier's sandboxed programs)
#   scripts/setup.sh --tests    also what the tests need: cmocka, clang + libFuzzer, gdb, sqlite3,
#                               bubblewrap, chromium (the report test), and the pinned Python
#                               packages of the client, the example trainer and the loop test
#                               (scripts/requirements.txt: numpy, safetensors, pynng, torch, ...)
#   scripts/setup.sh --oracles  also the oracle packages tools/ uses to regenerate fixtures
#                               (math-verify, trl, ...); implies --tests
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
case "$mode" in
  "" | --tests | --oracles) ;;
  *) echo "setup: unknown option $mode (expected --tests or --oracles)" >&2; exit 2 ;;
esac

# Building and running grpo: build-essential also gives the C compiler the code verifier uses.
apt_pkgs=(build-essential cmake ninja-build pkg-config
  libsqlite3-dev libgit2-dev libseccomp-dev libnng-dev libcjson-dev zlib1g-dev
  libpcre2-dev libicu-dev libgmp-dev libmpfr-dev libopenblas-dev python3)
if [ -n "$mode" ]; then
  # gdb: the worker tests print every thread's stack of a process that hangs; bubblewrap: the
  # sandbox benchmark's peer; chromium: the report test renders `grpo stats --report` headless.
  apt_pkgs+=(libcmocka-dev clang libclang-rt-14-dev sqlite3 bubblewrap python3-pip git gdb
    chromium)
fi

missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ -z "$mode" ]; then
  echo "setup: ok"
  exit 0
fi

PIP="python3 -m pip"
pip_flags=(-q --disable-pip-version-check)
# Debian's system Python refuses global installs (PEP 668); a pyenv/venv Python does not.
if python3 -c 'import sys; sys.exit(0 if sys.prefix == sys.base_prefix else 1)' &&
   [ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
  pip_flags+=(--break-system-packages)
fi
want_req() { # installs a requirements file unless everything in it is already there
  python3 - "$1" <<'PY' && return 0
import sys, importlib.metadata as md
ok = True
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line: continue
    name, _, ver = line.partition("==")
    try:
        if ver and md.version(name) != ver: ok = False
    except md.PackageNotFoundError:
        ok = False
sys.exit(0 if ok else 1)
PY
  echo "setup: pip install -r $1"
  $PIP install "${pip_flags[@]}" -r "$1"
}
want_req "$here/scripts/requirements.txt"
if [ "$mode" = "--oracles" ]; then
  want_req "$here/scripts/requirements-oracles.txt"
fi
echo "setup: ok"
