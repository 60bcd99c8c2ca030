#!/usr/bin/env bash
# Points a VM's resolver at the meshdns agent.
#
#  1. Saves /etc/resolv.conf: its content to /var/lib/meshdns/resolv.conf (the
#     agent's upstreams: the VM's original resolver) and, for uninstall.sh, an
#     exact backup (resolv.conf.orig) or, when /etc/resolv.conf is a symlink
#     (systemd-resolved, resolvconf), the link target (resolv.conf.link).
#  2. Installs and starts meshdns-agent.service and waits until the agent
#     listens on 127.0.0.1:53 (skipped with --no-systemd).
#  3. Rewrites /etc/resolv.conf to "nameserver 127.0.0.1", keeping the search
#     list and the options. A regular file is rewritten in place (it may be a
#     bind mount, as in containers); a symlink is replaced by a regular file.
#
# Running it again keeps the first backup, so a second run never mistakes
# meshdns's own resolv.conf for the original. Undo everything with
# uninstall.sh.
#
# Usage: setup.sh [--no-systemd] [--control-plane HOST:PORT] [--namespace NS]
#                 [--binary PATH]
# Environment (for tests and unusual layouts): RESOLV_CONF (/etc/resolv.conf),
# STATE_DIR (/var/lib/meshdns), SYSTEMD_DIR (/etc/systemd/system),
# DEFAULTS_FILE (/etc/default/meshdns-agent), LISTEN_ADDR (127.0.0.1),
# AGENT_WAIT_SECONDS (10).
set -euo pipefail

RESOLV_CONF=${RESOLV_CONF:-/etc/resolv.conf}
STATE_DIR=${STATE_DIR:-/var/lib/meshdns}
SYSTEMD_DIR=${SYSTEMD_DIR:-/etc/systemd/system}
DEFAULTS_FILE=${DEFAULTS_FILE:-/etc/default/meshdns-agent}
LISTEN_ADDR=${LISTEN_ADDR:-127.0.0.1}
HERE=$(cd "$(dirname "$0")" && pwd)

systemd=1
control_plane=""
namespace=""
binary=/usr/local/bin/meshdns
while [ $# -gt 0 ]; do
  case "$1" in
    --no-systemd) systemd=0 ;;
    --control-plane) control_plane=${2:?--control-plane needs a value}; shift ;;
    --namespace) namespace=${2:?--namespace needs a value}; shift ;;
    --binary) binary=${2:?--binary needs a value}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

die() { echo "setup.sh: $*" >&2; exit 1; }

saved="$STATE_DIR/resolv.conf"
orig="$STATE_DIR/resolv.conf.orig"
link="$STATE_DIR/resolv.conf.link"

# 1. Save the original, once.
if [ -e "$orig" ] || [ -e "$link" ]; then
  echo "setup.sh: already set up; keeping the saved original in $STATE_DIR"
else
  [ -e "$RESOLV_CONF" ] || die "$RESOLV_CONF does not exist"
  # The agent listens on LISTEN_ADDR:53; a local resolver already there
  # (dnsmasq, unbound) would be both a port clash and a forwarding loop.
  if awk -v a="$LISTEN_ADDR" '$1 == "nameserver" && $2 == a { found = 1 } END { exit !found }' "$RESOLV_CONF"; then
    die "$RESOLV_CONF already uses $LISTEN_ADDR as nameserver: another local resolver owns it; move it or set LISTEN_ADDR"
  fi
  grep -q '^[[:space:]]*nameserver[[:space:]]' "$RESOLV_CONF" ||
    die "$RESOLV_CONF lists no nameserver: the agent would have no upstream"
  mkdir -p "$STATE_DIR"
  tmp=$(mktemp "$STATE_DIR/.setup.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  cat "$RESOLV_CONF" >"$tmp"
  chmod 0644 "$tmp"
  if [ -L "$RESOLV_CONF" ]; then
    readlink "$RESOLV_CONF" >"$link.tmp"
    mv "$link.tmp" "$link"
  else
    cp -p "$RESOLV_CONF" "$orig.tmp"
    stat -c '%a' "$RESOLV_CONF" >"$STATE_DIR/resolv.conf.mode"
    mv "$orig.tmp" "$orig"
  fi
  mv "$tmp" "$saved"
  trap - EXIT
  echo "setup.sh: saved $RESOLV_CONF to $STATE_DIR"
fi

# 2. Start the agent before DNS depends on it.
if [ "$systemd" = 1 ]; then
  [ "$(id -u)" = 0 ] || die "installing the systemd unit needs root (or use --no-systemd)"
  [ -x "$binary" ] || die "$binary is not an executable meshdns binary (see --binary)"
  install -m 0644 "$HERE/meshdns-agent.service" "$SYSTEMD_DIR/meshdns-agent.service"
  if [ "$binary" != /usr/local/bin/meshdns ]; then
    sed -i "s#/usr/local/bin/meshdns #$binary #" "$SYSTEMD_DIR/meshdns-agent.service"
  fi
  if [ ! -e "$DEFAULTS_FILE" ] || [ -n "$control_plane$namespace" ]; then
    {
      echo "# Environment of meshdns-agent.service: every agent flag --NAME reads MESHDNS_NAME."
      [ -n "$control_plane" ] && echo "MESHDNS_CONTROL_PLANE=$control_plane"
      [ -n "$namespace" ] && echo "MESHDNS_NAMESPACE=$namespace"
      echo "MESHDNS_POD_NAME=$(hostname)"
    } >"$DEFAULTS_FILE"
  fi
  systemctl daemon-reload
  systemctl enable --now meshdns-agent.service
  for _ in $(seq 1 $((${AGENT_WAIT_SECONDS:-10} * 5))); do
    if timeout 1 bash -c "exec 3<>/dev/tcp/$LISTEN_ADDR/53" 2>/dev/null; then
      up=1
      break
    fi
    sleep 0.2
  done
  [ "${up:-0}" = 1 ] || die "the agent does not listen on $LISTEN_ADDR:53 after ${AGENT_WAIT_SECONDS:-10}s; $RESOLV_CONF is unchanged (journalctl -u meshdns-agent)"
fi

# 3. Point the resolver at the agent, keeping the search list and options.
new=$({
  echo "# Written by meshdns (examples/vm/setup.sh). DNS goes to the meshdns agent on $LISTEN_ADDR:53,"
  echo "# which forwards what it does not know to the resolvers saved in $saved."
  echo "# uninstall.sh restores the original."
  echo "nameserver $LISTEN_ADDR"
  awk '$1 == "search" || $1 == "domain" || $1 == "options" || $1 == "sortlist"' "$saved"
})
if [ -L "$RESOLV_CONF" ]; then
  rm -f "$RESOLV_CONF"
fi
# In place: /etc/resolv.conf may be a bind mount, which a rename cannot replace.
printf '%s\n' "$new" >"$RESOLV_CONF"
echo "setup.sh: $RESOLV_CONF now points at $LISTEN_ADDR"
