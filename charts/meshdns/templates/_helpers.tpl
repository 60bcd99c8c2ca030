{{/* The control plane's namespace: the release's unless namespace is set. */}}
{{- define "meshdns.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/* The CNI installer's namespace: the control plane's unless cni.namespace is set. */}}
{{- define "meshdns.cniNamespace" -}}
{{- default (include "meshdns.namespace" .) .Values.cni.namespace -}}
{{- end -}}

{{- define "meshdns.image" -}}
{{- .Values.image.repository }}:{{ .Values.image.tag -}}
{{- end -}}

{{/*
What a namespace the chart renders carries: helm uninstall leaves it (and
the DNSPolicy objects and other things users keep in it) in place.
*/}}
{{- define "meshdns.keep" -}}
annotations:
  helm.sh/resource-policy: keep
{{- end -}}

{{/*
Where the control plane's pods run (both Deployments): the scheduling
values every chart has. The context is the root.
*/}}
{{- define "meshdns.podPlacement" -}}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The PodDisruptionBudget's limit: never one that blocks a drain. */}}
{{- define "meshdns.pdbLimit" -}}
{{- if gt (int .) 1 }}
minAvailable: 1
{{- else }}
maxUnavailable: 1
{{- end }}
{{- end -}}
