#!/usr/bin/env bash
# The agent's RSS at 1,000 names with the query log and dnstap off and on,
# under sustained load: dnsperf asks the 1,000 names (half of them
# NXDOMAIN, so "nxdomain" selects half) at a fixed rate for a while, and
# VmRSS/VmHWM are read at the end. Configurations: off; the query log on
# stderr (all); dnstap (all) to golang-dnstap's reader; dnstap (all) with
# no collector listening (the queue full, frames dropped).
# Usage: hack/telemetryrss.sh [agent binary] (default bin/meshdns-agent).
# Needs dnsperf and the dnstap command (hack/deps.sh).
set -euo pipefail
AGENT=${1:-bin/meshdns-agent}
DNSTAP=${DNSTAP_DIR:-$HOME/.cache/meshdns/dnstap}/dnstap
QPS=${QPS:-5000}
SECS=${SECS:-10}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

{
  echo '{"table": {'
  for i in $(seq 0 999); do
    sep=,; [ "$i" = 999 ] && sep=
    echo "\"svc-$i.ns-$((i % 100)).svc.cluster.local\": {\"ips\": [\"10.96.$((i / 256)).$((i % 256))\"]}$sep"
  done
  echo '}}'
} > "$dir/table.json"
for i in $(seq 0 999); do
  echo "svc-$i.ns-$((i % 100)).svc.cluster.local A"
  echo "missing-$i.ns-$((i % 100)).svc.cluster.local A"
done > "$dir/queries"
printf 'nameserver 127.0.0.1\nsearch ns-0.svc.cluster.local svc.cluster.local cluster.local\n' > "$dir/resolv.conf"

# status prints VmRSS and VmHWM of pid in MB.
status() { awk '/^VmRSS|^VmHWM/ {printf "%s %.1f MB  ", $1, $2/1024}' "/proc/$1/status"; }

run() {
  local name=$1; shift
  "$AGENT" agent --nametable-file "$dir/table.json" --resolv-conf "$dir/resolv.conf" --namespace ns-0 \
    --upstream 127.0.0.1:9 --dns-addr 127.0.0.1:15353 --admin-addr 127.0.0.1:15320 "$@" 2>/dev/null &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 100); do curl -sf 127.0.0.1:15320/healthz/ready >/dev/null && break; sleep 0.1; done
  dnsperf -s 127.0.0.1 -p 15353 -d "$dir/queries" -Q "$QPS" -l "$SECS" -c 4 >/dev/null
  sleep 2
  printf '%-42s %s' "$name" "$(status "$pid")"
  curl -s 127.0.0.1:15320/metrics | awk '/^meshdns_agent_dnstap_frames_(sent|dropped)_total/ {printf " %s=%s", $1, $2}'
  echo
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

"$DNSTAP" -u "$dir/dnstap.sock" -w /dev/null 2>/dev/null &
pids+=($!)
sleep 0.5
echo "# $AGENT, 1,000 names, dnsperf $QPS q/s for ${SECS}s (half NXDOMAIN)"
run "off"
run "query log all, stderr (to /dev/null)" --query-log all --query-log-rate 0
run "query log nxdomain, stderr" --query-log nxdomain --query-log-rate 0
run "dnstap all, collector reading" --query-log all --query-log-rate 0 --query-log-stderr=false --dnstap "unix://$dir/dnstap.sock"
run "dnstap all, no collector (queue full)" --query-log all --query-log-rate 0 --query-log-stderr=false --dnstap "unix://$dir/absent.sock"
