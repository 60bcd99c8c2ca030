#!/usr/bin/env bash
# Undoes setup.sh: restores /etc/resolv.conf exactly as it was (the same
# bytes, or the same symlink), then stops and removes meshdns-agent.service
# (skipped with --no-systemd), then removes the saved files. The agent keeps
# answering until the original resolver is back, so DNS never points at a
# stopped agent. Running it when nothing is set up does nothing.
#
# Usage: uninstall.sh [--no-systemd]
# Environment: RESOLV_CONF, STATE_DIR, SYSTEMD_DIR as for setup.sh.
set -euo pipefail

RESOLV_CONF=${RESOLV_CONF:-/etc/resolv.conf}
STATE_DIR=${STATE_DIR:-/var/lib/meshdns}
SYSTEMD_DIR=${SYSTEMD_DIR:-/etc/systemd/system}

systemd=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-systemd) systemd=0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "uninstall.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

die() { echo "uninstall.sh: $*" >&2; exit 1; }

orig="$STATE_DIR/resolv.conf.orig"
link="$STATE_DIR/resolv.conf.link"
mode="$STATE_DIR/resolv.conf.mode"

if [ -e "$link" ]; then
  target=$(cat "$link")
  rm -f "$RESOLV_CONF"
  ln -s "$target" "$RESOLV_CONF"
  [ "$(readlink "$RESOLV_CONF")" = "$target" ] || die "could not restore the symlink $RESOLV_CONF -> $target"
  echo "uninstall.sh: $RESOLV_CONF is the symlink to $target again"
elif [ -e "$orig" ]; then
  if ! head -n 1 "$RESOLV_CONF" 2>/dev/null | grep -q '^# Written by meshdns'; then
    echo "uninstall.sh: warning: $RESOLV_CONF was changed since setup.sh; restoring the original anyway" >&2
  fi
  if [ -L "$RESOLV_CONF" ]; then
    rm -f "$RESOLV_CONF"
  fi
  # In place, like setup.sh: a bind-mounted file cannot be renamed over.
  cat "$orig" >"$RESOLV_CONF"
  if [ -e "$mode" ]; then
    chmod "$(cat "$mode")" "$RESOLV_CONF"
  fi
  cmp -s "$orig" "$RESOLV_CONF" || die "$RESOLV_CONF differs from $orig after the restore"
  echo "uninstall.sh: restored $RESOLV_CONF"
else
  echo "uninstall.sh: nothing saved in $STATE_DIR; $RESOLV_CONF left as it is"
fi

if [ "$systemd" = 1 ] && [ -e "$SYSTEMD_DIR/meshdns-agent.service" ]; then
  [ "$(id -u)" = 0 ] || die "removing the systemd unit needs root (or use --no-systemd)"
  systemctl disable --now meshdns-agent.service || true
  rm -f "$SYSTEMD_DIR/meshdns-agent.service"
  systemctl daemon-reload
  echo "uninstall.sh: removed meshdns-agent.service"
fi

rm -f "$orig" "$link" "$mode" "$STATE_DIR/resolv.conf"
rmdir "$STATE_DIR" 2>/dev/null || true
