#!/usr/bin/env bash
# Creates a private CA and a serving certificate for the sidecar injector,
# stores them in the Secret meshdns-system/meshdns-webhook-certs and writes
# the CA into the MutatingWebhookConfiguration's caBundle.
#
# Run it after applying 00-40, and again to rotate the certificate: the
# control plane picks the new files up without a restart. Clusters with
# cert-manager can use a Certificate and the cainjector instead.
#
# Usage: ./gen-certs.sh [days]   (default 365; needs openssl and kubectl)
set -euo pipefail
DAYS=${1:-365}
NS=${NAMESPACE:-meshdns-system}
SVC=${SERVICE:-meshdns-controlplane}
SECRET=${SECRET:-meshdns-webhook-certs}
MWC=${WEBHOOK_CONFIG:-meshdns-sidecar-injector}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout ca.key -out ca.crt -days "$DAYS" -subj "/CN=meshdns-webhook-ca" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout tls.key -out tls.csr -subj "/CN=$SVC.$NS.svc" 2>/dev/null
# The API server checks the name it dials: <service>.<namespace>.svc.
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
  "$SVC" "$SVC" "$NS" "$SVC" "$NS" "$SVC" "$NS" >ext.cnf
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out tls.crt -days "$DAYS" -extfile ext.cnf 2>/dev/null

kubectl -n "$NS" create secret tls "$SECRET" --cert=tls.crt --key=tls.key \
  --dry-run=client -o yaml | kubectl apply -f -

# Keep the previous CA in the bundle next to the new one: the kubelet takes
# up to a minute to update the Secret in the pods, and until then they
# serve the old certificate. Only the newest previous CA is kept.
kubectl get mutatingwebhookconfiguration "$MWC" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' |
  base64 -d 2>/dev/null | openssl x509 2>/dev/null >old-ca.crt || true
cat ca.crt old-ca.crt >bundle.crt
ca=$(base64 <bundle.crt | tr -d '\n')
n=$(kubectl get mutatingwebhookconfiguration "$MWC" -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' | wc -l)
patch="["
for ((i = 0; i < n; i++)); do
  [ "$i" -gt 0 ] && patch+=","
  patch+="{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$ca\"}"
done
patch+="]"
kubectl patch mutatingwebhookconfiguration "$MWC" --type=json -p "$patch"
echo "webhook certificate valid for $DAYS days; CA written to $MWC"
