#!/usr/bin/env bash
# The two virtual environments bench/accuracy.py runs its children in, and warmprof installed into them
# NON-editable from a source tree (so a tree being edited under a running harness changes nothing).
#
#   bench/acc_venvs.sh make [TREE [REV]]        make /work/venv-acc213 and /work/venv-acc214 (if missing)
#                                               and install warmprof from TREE (default: this checkout)
#   bench/acc_venvs.sh install VENV TREE [REV]  (re)install warmprof from TREE into VENV: run it after
#                                               code changes
# Without REV the tree's working files are installed, uncommitted changes included; with REV (a commit,
# branch or HEAD) exactly that commit's files (git archive), whatever the working tree holds.
#
# venv-acc213: torch 2.13.0 (CPU) + transformers 4.57.6 + diffusers 0.36.0.
# venv-acc214: torch 2.14.1 + torchvision 0.29.1 + transformers 4.57.6 + diffusers 0.36.0 (the torchvision
# models need it). transformers and diffusers as pinned in pyproject.toml's `bench` extra (BENCH_PINS).
# Both wheels lie on this disk (pip's find-links); nothing is downloaded but the registry's small packages.
# warmprof is installed with --no-deps (its [torch] extra caps torch below 2.14) and --no-build-isolation
# (scikit-build-core and pybind11 are installed into the venv first).
#
# The tree is copied first (tracked and untracked-but-not-ignored files, so no build/ folder comes along) to
# a temporary folder and built there: the source tree itself gets no build/ folder, and the venv records
# which tree and commit it holds in VENV/warmprof-source.txt (bench/accuracy.py prints it).
set -euo pipefail

ACC213=${ACC213:-/work/venv-acc213}
ACC214=${ACC214:-/work/venv-acc214}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BENCH_PINS=(transformers==4.57.6 diffusers==0.36.0)  # = pyproject.toml's [project.optional-dependencies] bench

install_tree() {
  local venv=$1 tree rev=${3:-}
  tree=$(cd "$2" && pwd)
  local tmp commit dirty
  tmp=$(mktemp -d /tmp/warmprof-src.XXXXXX)
  if [ -n "$rev" ]; then
    commit=$(git -C "$tree" rev-parse --verify "$rev^{commit}")
    git -C "$tree" archive "$commit" | tar -xf - -C "$tmp"
    dirty="0 (git archive of the commit)"
  else
    (cd "$tree" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$tmp"
    commit=$(git -C "$tree" rev-parse HEAD 2>/dev/null || echo unknown)
    dirty=$(git -C "$tree" status --porcelain 2>/dev/null | grep -c . || true)
  fi
  echo "installing warmprof from $tree ($commit, $dirty changed files) into $venv" >&2
  "$venv/bin/pip" install --no-build-isolation --no-deps --force-reinstall "$tmp" >"$tmp.log" 2>&1 || {
    tail -30 "$tmp.log" >&2; echo "install failed: full log $tmp.log" >&2; exit 1; }
  printf 'tree %s\ncommit %s\nchanged_files %s\ninstalled %s\n' "$tree" "$commit" "$dirty" "$(date -u +%FT%TZ)" \
    >"$venv/warmprof-source.txt"
  rm -rf "$tmp"
  "$venv/bin/python" -c "import warmprof, torch; print('  ok: warmprof', warmprof.__version__, 'torch', torch.__version__)" >&2
}

make_venv() {
  local venv=$1; shift
  if [ ! -x "$venv/bin/python" ]; then
    echo "making $venv" >&2
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q "$@"
  "$venv/bin/pip" install -q --no-build-isolation scikit-build-core pybind11
}

case "${1:-}" in
  make)
    tree=${2:-$HERE}
    make_venv "$ACC213" torch==2.13.0 "${BENCH_PINS[@]}"
    make_venv "$ACC214" torch==2.14.1 torchvision==0.29.1 "${BENCH_PINS[@]}"
    install_tree "$ACC213" "$tree" "${3:-}"
    install_tree "$ACC214" "$tree" "${3:-}"
    ;;
  install)
    [ $# -ge 3 ] && [ $# -le 4 ] || { echo "usage: $0 install VENV TREE [REV]" >&2; exit 2; }
    install_tree "$2" "$3" "${4:-}"
    ;;
  *)
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
