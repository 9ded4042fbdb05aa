#!/usr/bin/env bash
# Installs everything grpo needs on Debian 12, idempotently:
#   scripts/setup.sh            build + test dependencies (apt) and the Python packages the tests,
#                               the client and the example trainer use (pip, pinned)
#   scripts/setup.sh --oracles  also the oracle packages tools/ uses to regenerate fixtures
#                               (math-verify, trl, ...)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

apt_pkgs=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libsqlite3-dev sqlite3 libgit2-dev libseccomp-dev libnng-dev libcmocka-dev libcjson-dev
  libpcre2-dev libgmp-dev libmpfr-dev libopenblas-dev bubblewrap python3 python3-pip git
  gdb) # gdb: the worker tests print every thread's stack of a process that hangs

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
if [ "${1:-}" = "--oracles" ]; then
  want_req "$here/scripts/requirements-oracles.txt"
fi
echo "setup: ok"
