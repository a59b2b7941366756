#!/usr/bin/env bash
# Installs the named Debian packages that are missing (nothing when all are present).
# Usage: scripts/apt-install.sh WHY PACKAGE...   (WHY is printed: what the packages are for)
set -euo pipefail
why=$1
shift
need=()
for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
((${#need[@]})) || exit 0
echo "installing ${need[*]} ($why)" >&2
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
