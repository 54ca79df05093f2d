#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine: Debian packages (when missing) and the project venv.
# Re-running it is cheap: apt is skipped when every package is present, pip when the stamp is newer
# than pyproject.toml and was made for these extras or more. DLCP_EXTRAS names the optional extras
# (none by default: what the demo needs), e.g. DLCP_EXTRAS=dev,bmv2,sim for the tests (`make test`;
# the sim extra, backend = "ns3", is the ns3 wheel: about 4 minutes and 500 MB the first time).
# Run it as yourself: only apt runs as root (directly when you are root, else through sudo); the
# venv is yours. Under sudo (`sudo make ...`) the venv still goes to the user who ran sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-venv, python3-dev and gcc: the venv, the switch's C fast path and the transport's C receive path (built by pip)
APT_PACKAGES=(mininet bridge-utils ethtool iputils-ping iperf3 iproute2 tcpdump procps psmisc
              python3-venv python3-dev gcc)
VENV=${DLCP_VENV:-.venv}
PYTHON=${PYTHON:-python3}
EXTRAS=${DLCP_EXTRAS:-}
# the test set-up (the dev extra) adds a single-node Slurm for tests/root/test_slurm.py (9 packages,
# 3.7 MB; about 22 s of apt-get install) and clang-format for `make lint` (the C and C++ style)
if [[ ,$EXTRAS, == *,dev,* ]]; then
    APT_PACKAGES+=(slurm-wlm clang-format)
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing Debian packages (as root): ${missing[*]}"
    # --no-install-recommends keeps Open vSwitch out: our switches are our own processes.
    scripts/apt-install "${missing[@]}"
fi

# Root through sudo: the rest (the venv) belongs to the user who ran sudo.
if [[ $(id -u) -eq 0 && -n ${SUDO_UID:-} && ${SUDO_UID} != 0 ]]; then
    exec sudo -u "#${SUDO_UID}" -g "#${SUDO_GID}" env DLCP_VENV="$VENV" PYTHON="$PYTHON" DLCP_EXTRAS="${DLCP_EXTRAS:-}" "$0" "$@"
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "setup: $PYTHON is older than 3.10" >&2; exit 1; }

stamp="$VENV/.dlcp-setup-stamp"
if [[ -f "$stamp" && "$stamp" -nt pyproject.toml && "$stamp" -nt scripts/setup.sh \
      && "$stamp" -nt setup.py && "$stamp" -nt emulation/builtin_switch/_fastpath.c \
      && "$stamp" -nt dlcp/switch/c/dlcp_wire.h && "$stamp" -nt dlcp/switch/c/switch_core.h \
      && "$stamp" -nt dlcp/transport/_rxpath.c && "$stamp" -nt dlcp/transport/c/rx_core.h \
      && -z "$(comm -23 <(tr , '\n' <<<"$EXTRAS" | sort -u) <(tr , '\n' <"$stamp" | sort -u) | grep .)" ]]; then
    exit 0
fi
# extras installed before stay installed: the stamp records their union
if [[ -f "$stamp" ]]; then
    EXTRAS=$(tr , '\n' <<<"$EXTRAS,$(cat "$stamp")" | grep . | sort -u | paste -sd, -)
fi
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The constraint pins the CPU build of torch that is on disk; without it a dependency could pull
# the newest CUDA build (several GB).
export PIP_CONSTRAINT="$PWD/scripts/constraints.txt"
# --no-compile: pip would byte-compile every module it installs (torch alone is about a minute of a
# fresh set-up); Python compiles the modules a run imports, once, when it first imports them.
pip_install() {
    if ! "$VENV/bin/pip" install -q --no-compile "$@" >"$VENV/pip-install.log" 2>&1; then
        grep -v '^WARNING: Location' "$VENV/pip-install.log" >&2
        echo "setup: pip install $* failed (log: $VENV/pip-install.log)" >&2
        exit 1
    fi
}
# The CPU build by name where one is reachable (a local wheel directory or index pip is configured
# with): torch==2.13.0 alone lets pip take the CUDA build from PyPI, 5 GB of venv a CPU machine
# never uses.
if ! "$VENV/bin/pip" install -q --no-compile torch==2.13.0+cpu >"$VENV/pip-install.log" 2>&1; then
    pip_install torch==2.13.0
fi
pip_install -e ".${EXTRAS:+[$EXTRAS]}"
# The check imports what a run imports and writes their bytecode, even under PYTHONDONTWRITEBYTECODE:
# pip compiled nothing (--no-compile), and a process that may not write bytecode would compile
# torch's modules again at every start (about 3 s instead of 0.2 s here).
env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" -c 'import torch, numpy, scipy.stats, sklearn.datasets, scapy.all, mininet.net, dlcp
assert torch.__version__.startswith("2.13.0"), torch.__version__'
echo "$EXTRAS" > "$stamp"
echo "setup: ready ($VENV, torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
