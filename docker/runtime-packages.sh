#!/bin/sh
# Prints the Debian packages that hold the shared libraries the given binaries load (the build
# stage runs it so the runtime stage installs exactly those).
ldd "$@" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  dpkg -S "$(realpath "$lib")" 2>/dev/null | head -n 1 | cut -d: -f1
done | sort -u
