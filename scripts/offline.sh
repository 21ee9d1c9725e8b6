#!/usr/bin/env bash
# Run a command with the network off, as on a classroom machine without one:
#   bash scripts/offline.sh COMMAND [ARGS...]
# The command runs in a new network namespace (unshare --net, util-linux) whose only interface is the
# loopback, brought up: Jupyter talks to its kernels over it, and torchrun's processes to each other.
# As root that is all it takes (a container, CI); any other user gets --map-root-user, a user namespace
# in which they are root, which the kernel must allow (user.max_user_namespaces > 0; on Ubuntu 24.04
# also kernel.apparmor_restrict_unprivileged_userns = 0).
set -euo pipefail

if [ "${1:-}" != "--inside" ]; then
    flags=(--net)
    [ "$(id -u)" = 0 ] || flags+=(--map-root-user)
    exec unshare "${flags[@]}" bash "$0" --inside "$@"
fi
shift

ip link set lo up
# torchrun's gloo backend binds to the address the host name resolves to. On a machine whose network is
# unplugged that interface still exists; in this namespace it does not, so point gloo at the loopback.
export GLOO_SOCKET_IFNAME=lo
# Nothing beyond this machine may answer: a name cannot be looked up, an address cannot be reached.
python3 - <<'EOF'
import socket

for target in (("pypi.org", 443), ("1.1.1.1", 53)):
    try:
        socket.create_connection(target, timeout=3).close()
    except OSError:
        continue
    raise SystemExit(f"offline.sh: {target[0]} answered: the network is not off")
print("offline.sh: the network is off (loopback only)")
EOF
exec "$@"
