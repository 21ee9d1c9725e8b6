#!/usr/bin/env bash
# Install what the browser tests (tests/browser) need, once: Debian's Chromium, the
# Playwright Python package and axe-playwright-python. Playwright's own browser download is not used (nor needed):
# the tests launch /usr/bin/chromium. Safe to run again: it installs only what is missing.
#
#   bash scripts/browser_setup.sh [path/to/python]     (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."

PLAYWRIGHT_VERSION=1.65.2
AXE_VERSION=0.1.8  # axe-playwright-python: axe-core's accessibility rules, bundled (no download at test time)
PYTHON="${1:-.venv/bin/python}"

if ! command -v chromium >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "browser_setup: no chromium and no apt-get; install Chromium yourself and set CHROMIUM=/path/to/it" >&2
        exit 1
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "browser_setup: installing chromium with apt-get"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if ! "$PYTHON" -c "import importlib.metadata as m, sys; sys.exit(m.version('playwright') != '$PLAYWRIGHT_VERSION')" 2>/dev/null; then
    echo "browser_setup: installing playwright==$PLAYWRIGHT_VERSION"
    "$PYTHON" -m pip install --quiet "playwright==$PLAYWRIGHT_VERSION"
fi

if ! "$PYTHON" -c "import importlib.metadata as m, sys; sys.exit(m.version('axe-playwright-python') != '$AXE_VERSION')" 2>/dev/null; then
    echo "browser_setup: installing axe-playwright-python==$AXE_VERSION"
    "$PYTHON" -m pip install --quiet --no-deps "axe-playwright-python==$AXE_VERSION"
fi

echo "browser_setup: $(chromium --version 2>/dev/null | head -1); playwright $("$PYTHON" -c 'import importlib.metadata as m; print(m.version("playwright"))')"
