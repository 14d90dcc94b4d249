#!/usr/bin/env bash
# Installs what tests/jobs/test_slurm.py needs: Slurm's controller and node daemons, and munge, from Debian.
# Root only; elsewhere (or without apt-get) it does nothing and the Slurm tests skip, or fail under CI=true.
set -euo pipefail
have() { dpkg -s slurm-wlm munge >/dev/null 2>&1; }
if have; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "tests/support/slurm_setup.sh: not root or no apt-get: the Slurm tests will not run" >&2
  exit 0
fi
echo "== installing slurm-wlm and munge"
export DEBIAN_FRONTEND=noninteractive
(apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge) >/dev/null
# Debian's packages start the daemons where systemd runs; the tests start their own, under their own config.
