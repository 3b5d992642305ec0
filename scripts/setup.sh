#!/usr/bin/env bash
# Installs what building and testing gannet needs on Debian 12, when it is missing:
# Debian packages (compiler, CMake, Ninja, libraries) and a project virtualenv (.venv)
# with the Python test requirements. Safe to run again; does nothing when all is present.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build pkg-config ccache libgtest-dev libbenchmark-dev
          libpcre2-dev libutf8proc-dev nlohmann-json3-dev libcpp-httplib-dev libssl-dev zlib1g-dev
          libbrotli-dev libxxhash-dev libzstd-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libopenmpi-dev openmpi-bin python3 python3-venv python3-dev)
# `setup.sh clang` adds the second compiler (make test-clang, make fuzz).
if [ "${1:-}" = clang ]; then packages+=(clang); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "setup: not root and no sudo; please run as root:" >&2
      echo "  apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
    sudo="sudo"
  fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python test requirements (pytest; nanobind and scikit-build-core for the Python package).
# torch/transformers are only in
# tools/requirements-golden.txt, for regenerating goldens; tests never need them.
stamp=.venv/.requirements-test.stamp
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "" 2>/dev/null || ! cmp -s requirements-test.txt "$stamp"; then
  echo "setup: creating .venv with requirements-test.txt"
  python3 -m venv --clear .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt
  cp requirements-test.txt "$stamp"
fi
