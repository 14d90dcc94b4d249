#!/usr/bin/env bash
# tests/support/other_pythons.sh build | test LOGDIR: ./test's passes on the oldest and the newest CPython that
# pyenv keeps here (3.9 and 3.13).
#   build: dist/py3.9 and dist/py3.13, the default one file built with each as the build Python (./test runs
#          tests/cli/test_cli.py and tests/house/test_binary.py against each, with the main .venv, which has the S3
#          server those tests use).
#   test:  the tests that need no server, on each, in a light virtual environment of its own (.venv-py3.9,
#          .venv-py3.13: tests/support/requirements-other-pythons.txt, no torch, no servers), the two side by
#          side, their JUnit XML into LOGDIR.
# A missing Python is skipped with a note, or fails under CI=true.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-}
case $what in
build) ;;
test) logdir=${2:?usage: other_pythons.sh test LOGDIR} ;;
*)
  echo "usage: tests/support/other_pythons.sh build | test LOGDIR" >&2
  exit 2
  ;;
esac

say() { printf 'test: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
# The newest patch release of 3.X that pyenv has (3.9.18, ...), without hard-coding it.
find_python() {
  local dir
  dir=$(find "$root/versions" -mindepth 1 -maxdepth 1 -name "$1.*" 2>/dev/null | grep -E "/$1\.[0-9]+$" | sort -V | tail -1)
  [ -n "$dir" ] && [ -x "$dir/bin/python3" ] && echo "$dir/bin/python3"
}

pythons=()
for ver in 3.9 3.13; do
  py=$(find_python "$ver") || {
    [ "${CI:-}" != true ] || die "no CPython $ver under $root/versions: CI runs the tests on 3.9 and 3.13 (pyenv install $ver)"
    say "no CPython $ver under $root/versions: its run is skipped (pyenv install $ver)"
    continue
  }
  pythons+=("$ver=$py")
done

if [ "$what" = build ]; then
  for pair in "${pythons[@]}"; do
    echo "== building dist/py${pair%%=*}/publish with ${pair#*=}"
    PUBLISH_BUILD_PYTHON=${pair#*=} ./build python "dist/py${pair%%=*}"
  done
  exit 0
fi

# The tests that need a server, a tool or torch are left out by marker; the modules that import torch at the top
# cannot even be collected without it. The unprivileged-user tests run the interpreter as nobody, who cannot
# read pyenv's under /root. The others left out are the longest (30 s to 3 min each on 3.9, two cores), and
# exercise no behaviour that differs between Pythons; the main suite runs them all.
markers="not s3 and not vault and not slurm and not binary and not install and not torch and not slow"
ignore=()
for f in $(grep -rlE --include='test_*.py' '^(import|from) torch' tests); do ignore+=("--ignore=$f"); done
deselect=()
for t in verbs/test_resolve_exists.py::test_an_unreadable_attempt_as_an_unprivileged_user \
  verbs/test_capacity.py::test_a_save_the_user_cannot_read_is_shown_with_its_size_not_known \
  verbs/test_prune_crash.py::test_a_prune_cut_at_every_step_is_finished_by_the_next \
  test_layout_bulk.py::test_all_canonical_is_every_name_parsing \
  http/test_http1.py::test_a_mebibyte_of_one_byte_chunks \
  s3/test_sigv4.py::test_matches_botocore \
  "promise/test_linear.py::test_handled_in_linear_time[a duration of many components]"; do
  deselect+=(--deselect "tests/$t")
done

# The two venvs first, then the two runs side by side (each is one process on one core; the machine has two),
# each into a log of its own printed once both are done.
runs=()
for pair in "${pythons[@]}"; do
  ver=${pair%%=*} py=${pair#*=}
  venv=$PWD/.venv-py$ver
  stamp=$( (cat tests/support/requirements-other-pythons.txt; "$py" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$venv/.publish-stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "== installing the test tools for $py into $venv"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check -r tests/support/requirements-other-pythons.txt
    echo "$stamp" >"$venv/.publish-stamp"
  fi
  runs+=("$ver")
done

logs=$(mktemp -d)
pids=()
for ver in "${runs[@]}"; do
  echo "== the tests that need no server, on $("$PWD/.venv-py$ver/bin/python" --version) (log: $logs/$ver.log)"
  "$PWD/.venv-py$ver/bin/python" -m pytest -p no:cacheprovider -q -m "$markers" "${ignore[@]}" "${deselect[@]}" \
    --junitxml="$logdir/py$ver.xml" >"$logs/$ver.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "== the tests that need no server, on CPython ${runs[$i]}: exit $status"
  cat "$logs/${runs[$i]}.log"
  [ "$status" = 0 ] || failed=1
done
rm -rf "$logs"
[ "$failed" = 0 ] || die "the tests that need no server failed on another Python (above)"
