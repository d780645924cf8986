#!/usr/bin/env bash
# Builds pipeline.cpp with the flags the installed multipack.pc gives, and runs it.
# Usage: pkg_config.sh PKG_CONFIG CXX PREFIX SOURCE WORKDIR DATA VERSION
set -euo pipefail
pkg_config=$1 cxx=$2 prefix=$3 source=$4 work=$5 data=$6 version=$7
mkdir -p "$work"
export PKG_CONFIG_PATH="$prefix/share/pkgconfig"
"$pkg_config" --exists multipack || { echo "pkg-config does not find multipack in $PKG_CONFIG_PATH"; exit 1; }
[[ $("$pkg_config" --modversion multipack) == "$version" ]] || { echo "wrong version: $("$pkg_config" --modversion multipack)"; exit 1; }
# pkg-config escapes a space in a path with a backslash, as a shell word: read them as words.
eval "cflags=($("$pkg_config" --cflags multipack))"
eval "libs=($("$pkg_config" --libs multipack))"
"$cxx" -std=c++20 -O1 "${cflags[@]}" "$source" -o "$work/consumer" "${libs[@]}"
"$work/consumer" "$data"
