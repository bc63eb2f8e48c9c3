#!/usr/bin/env bash
# The docs site (docs/, mkdocs.yml): the pinned mkdocs and mkdocs-material installed into the active
# virtual environment, then a strict build into a temporary folder. Any warning fails it: a broken
# link or anchor, a page left out of the nav, a link to a file outside docs/.
#   bash .ci/docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  echo "docs: activate a virtual environment first (this script installs mkdocs into it)" >&2
  exit 2
fi
python -m pip install --quiet "mkdocs==1.6.1" "mkdocs-material==9.8.2"
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
# NO_MKDOCS_2_WARNING: mkdocs-material's end-of-life banner, printed on every build (not a build warning)
NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict --site-dir "$site"
echo "docs: built with mkdocs --strict, no warnings"
