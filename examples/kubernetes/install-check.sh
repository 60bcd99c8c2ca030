#!/bin/sh
# install-check.sh: install meshdns with helm and check it end to end, as
# docs/install.md tells it: install, label a namespace, an injected pod
# resolves a Service and an outside name, a DNSPolicy denies a name and the
# pod's query log shows it, meshdns status and analyze report the install
# healthy, helm uninstall leaves the DNSPolicy and DNS working. Each step
# prints what it does; the first one that fails stops the script (exit 1)
# and leaves everything as it is, to look at; to start again: helm
# uninstall meshdns -n meshdns-system; kubectl delete namespace
# meshdns-check.
#
# Run it against a cluster you may install into (KUBECONFIG), with the
# image loaded where the nodes find it:
#
#   KUBECONFIG=~/.kube/config examples/kubernetes/install-check.sh
#
# Settings (environment): IMAGE_REPOSITORY, IMAGE_TAG (the chart's image);
# HELM_ARGS (more helm install arguments); CHECK_NAMESPACE (made and left
# behind: meshdns-check); CHECK_IMAGE, CHECK_COMMAND (the check pod, kept
# running), RESOLVE (a command in it that exits 0 only when it resolved
# its argument: nslookup); OUTSIDE_NAME, DENIED_NAME (two names outside
# the cluster, the second denied by the DNSPolicy); HELM, KUBECTL, MESHDNS
# (the binaries). e2e/node's TestHelmInstall runs this script on a real node.
set -euf # -f: HELM_ARGS and RESOLVE are split into words, never globbed

here=$(cd "$(dirname "$0")" && pwd)
: "${KUBECONFIG:?set KUBECONFIG to the cluster to install into}"
CHART=${CHART:-$here/../../charts/meshdns}
HELM=${HELM:-helm}
KUBECTL=${KUBECTL:-kubectl}
MESHDNS=${MESHDNS:-meshdns}
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-ghcr.io/meshdns/meshdns}
IMAGE_TAG=${IMAGE_TAG:-v0.1.0}
HELM_ARGS=${HELM_ARGS:-}
NS=${CHECK_NAMESPACE:-meshdns-check}
CHECK_IMAGE=${CHECK_IMAGE:-busybox:1.36}
CHECK_COMMAND=${CHECK_COMMAND:-sleep 86400}
RESOLVE=${RESOLVE:-nslookup}
OUTSIDE_NAME=${OUTSIDE_NAME:-example.com}
DENIED_NAME=${DENIED_NAME:-example.net}
export KUBECONFIG

step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
k() { "$KUBECTL" "$@"; }
# resolves POD NAME: the lookup in the pod's container (kubectl run names
# it after the pod) succeeds.
# shellcheck disable=SC2086 # RESOLVE may hold arguments
resolves() { k -n "$NS" exec "$1" -c "$1" -- $RESOLVE "$2" >/dev/null 2>&1; }
# eventually TRIES CMD...: CMD succeeds within TRIES seconds.
eventually() {
	n=$1
	shift
	while ! "$@"; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || return 1
		sleep 1
	done
}
# checkpod NAME: a pod that stays up, labelled for the DNSPolicy, its
# query log on (the annotation the agent reads while it runs).
checkpod() {
	k -n "$NS" run "$1" --image="$CHECK_IMAGE" --restart=Never --labels=app=meshdns-check \
		--annotations=meshdns.io/query-log=all --command -- $CHECK_COMMAND >/dev/null
	k -n "$NS" wait --for=condition=Ready "pod/$1" --timeout=3m >/dev/null && return
	k -n "$NS" logs "$1" -c meshdns-agent --tail=5 >&2 || true
	fail "pod $1 not ready within 3 minutes (an injected pod is ready once its agent has its first table from the control plane; its log above)"
}
injected() { k -n "$NS" get pod "$1" -o jsonpath='{.spec.initContainers[*].name}' | grep -qw meshdns-agent; }

step "helm install meshdns $CHART (image $IMAGE_REPOSITORY:$IMAGE_TAG)"
# shellcheck disable=SC2086 # HELM_ARGS is split into arguments
"$HELM" install meshdns "$CHART" -n meshdns-system --create-namespace \
	--set image.repository="$IMAGE_REPOSITORY" --set image.tag="$IMAGE_TAG" $HELM_ARGS >/dev/null
k -n meshdns-system rollout status deploy/meshdns-controlplane --timeout=3m

step "label namespace $NS meshdns.io/inject=enabled"
k create namespace "$NS" >/dev/null
k label namespace "$NS" meshdns.io/inject=enabled >/dev/null
# Pods need the namespace's default ServiceAccount, which the cluster makes.
eventually 30 k -n "$NS" get serviceaccount default >/dev/null 2>&1 || fail "no ServiceAccount default in $NS"
k -n "$NS" create service clusterip web --tcp=80:80 >/dev/null

step "an injected pod resolves the Service web and $OUTSIDE_NAME"
checkpod check
injected check || fail "pod check has no meshdns-agent: the webhook did not inject it"
eventually 60 resolves check "web.$NS.svc.cluster.local" || fail "pod check does not resolve web.$NS.svc.cluster.local"
resolves check "web" || fail "pod check does not resolve web (its namespace's search domain)"
resolves check "$OUTSIDE_NAME" || fail "pod check does not resolve $OUTSIDE_NAME (forwarded to the cluster DNS)"
resolves check "$DENIED_NAME" || fail "pod check does not resolve $DENIED_NAME before the DNSPolicy"

step "a DNSPolicy allows $OUTSIDE_NAME and denies $DENIED_NAME"
k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: meshdns.io/v1alpha1
kind: DNSPolicy
metadata: {name: check}
spec:
  podSelector: {matchLabels: {app: meshdns-check}}
  outsideDefault: Deny
  rules: [{pattern: "$OUTSIDE_NAME", action: Allow}]
EOF
k -n "$NS" wait --for=condition=Accepted dnspolicy/check --timeout=2m >/dev/null
denied() { ! resolves check "$DENIED_NAME"; }
eventually 60 denied || fail "pod check still resolves $DENIED_NAME under the DNSPolicy"
resolves check "$OUTSIDE_NAME" || fail "pod check does not resolve $OUTSIDE_NAME, which the DNSPolicy allows"

step "the query log of pod check shows the denial"
# One JSON line per answer on the agent's stderr; a denial names its action.
denials() { k -n "$NS" logs check -c meshdns-agent | grep "\"qname\":\"$DENIED_NAME.\"" | grep '"action":"deny"'; }
eventually 30 denials >/dev/null || fail "no denial of $DENIED_NAME in the query log of pod check"
denials | tail -1

step "meshdns status"
status=$("$MESHDNS" status --kubeconfig "$KUBECONFIG") || fail "meshdns status reports a problem: $status"
echo "$status"
echo "$status" | grep -Eq "^$NS +check +meshdns-controlplane-[^ ]+ +SYNCED " || fail "meshdns status does not list pod check in sync"
step "meshdns analyze"
"$MESHDNS" analyze --kubeconfig "$KUBECONFIG" || fail "meshdns analyze reports an error"

step "helm uninstall meshdns"
"$HELM" uninstall meshdns -n meshdns-system >/dev/null
k -n "$NS" get dnspolicy check >/dev/null || fail "helm uninstall removed the DNSPolicy"
k get mutatingwebhookconfiguration meshdns-sidecar-injector >/dev/null 2>&1 && fail "the webhook is still registered"
resolves check "web" || fail "pod check (its agent keeps its last table) does not resolve web after the uninstall"
checkpod after
injected after && fail "pod after was injected after the uninstall"
resolves after "$OUTSIDE_NAME" || fail "pod after does not resolve $OUTSIDE_NAME through the cluster DNS"
k delete namespace "$NS" --wait=false >/dev/null
step "ok"
