#!/usr/bin/env bash
# Installs the build into a prefix inside the build directory, then builds tests/install/consumer.c
# against that copy twice: with pkg-config (shared and --static) and with find_package(grpo)
# (grpo::grpo, grpo::grpo_static), and runs each. Usage: install_test.sh BUILD_DIR VERSION
set -euo pipefail
build=$1 version=$2
here=$(cd "$(dirname "$0")" && pwd)
prefix=$build/install-test/prefix
work=$build/install-test/work
rm -rf "$build/install-test"
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/grpo/grpo.h include/grpo/verify.h lib/libgrpo.a lib/pkgconfig/grpo.pc \
         lib/cmake/grpo/grpoConfig.cmake lib/cmake/grpo/grpoConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || { echo "install_test: $prefix/$f was not installed"; exit 1; }
done
ls "$prefix"/lib/libgrpo.so.* > /dev/null
expect="math correct pass 1.20
format no-think 0.00"
check() { # NAME OUTPUT
  if [ "$2" != "$expect" ]; then
    printf 'install_test: %s printed\n%s\nexpected\n%s\n' "$1" "$2" "$expect"
    exit 1
  fi
  echo "install_test: $1 ok"
}
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc=${CC:-cc}
flags=${GRPO_CONSUMER_CFLAGS:-} # -fsanitize=... when the library is a sanitizer build
# shellcheck disable=SC2046,SC2086
$cc $flags -o "$work/pc_shared" "$here/install/consumer.c" $(pkg-config --cflags --libs grpo)
check "pkg-config shared" "$(LD_LIBRARY_PATH=$prefix/lib "$work/pc_shared" "$version")"
# shellcheck disable=SC2046,SC2086
$cc $flags -o "$work/pc_static" "$here/install/consumer.c" $(pkg-config --cflags grpo) \
  "$prefix/lib/libgrpo.a" $(pkg-config --libs-only-L --libs-only-l --static grpo | sed 's/-lgrpo//')
if ldd "$work/pc_static" | grep -q libgrpo; then
  echo "install_test: the static build links libgrpo.so"; exit 1
fi
check "pkg-config static" "$("$work/pc_static" "$version")"
cmake -S "$here/install" -B "$work/cm" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" > "$work/cmake.log"
cmake --build "$work/cm" > "$work/cmake-build.log"
check "find_package grpo::grpo" "$("$work/cm/consumer_shared" "$version")"
check "find_package grpo::grpo_static" "$("$work/cm/consumer_static" "$version")"
