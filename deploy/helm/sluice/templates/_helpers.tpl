{{/* Name of a component's objects: <release>-<component>, at most 63 characters. */}}
{{- define "sluice.name" -}}
{{ printf "%s-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* Image of a sluice binary: [registry/]repository/binary:tag (tag defaults to the chart's appVersion). */}}
{{- define "sluice.image" -}}
{{- $img := .root.Values.image -}}
{{- $repo := printf "%s/%s" $img.repository .bin -}}
{{- with $img.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{ $repo }}:{{ $img.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "sluice.labels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component. */}}
{{- define "sluice.selector" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Environment every sluice container gets: where NATS is and how many copies of each bucket. */}}
{{- define "sluice.natsEnv" -}}
- name: SLUICE_NATS_URL
  value: {{ .Values.nats.url | quote }}
- name: SLUICE_REPLICAS
  value: {{ .Values.nats.replicas | quote }}
{{- end -}}

{{/* Prometheus scrape annotations for a pod serving /metrics on port. */}}
{{- define "sluice.metricsAnnotations" -}}
{{- if .root.Values.metrics.annotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/* Liveness (/healthz) and readiness (/readyz) probes on the container port named http. */}}
{{- define "sluice.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{/* The agent's --config file: applier, validate and checks, with unset fields left out (the agent reads it strictly). */}}
{{- define "sluice.agentConfig" -}}
{{- $a := .Values.agent -}}
{{- $applier := dict "kind" $a.applier.kind -}}
{{- with $a.applier.path }}{{ $_ := set $applier "path" . }}{{ end -}}
{{- if eq $a.applier.kind "exec" }}
{{- $_ := set $applier "command" $a.applier.command -}}
{{- $_ := set $applier "mode" $a.applier.mode -}}
{{- end -}}
{{- $cfg := dict "applier" $applier -}}
{{- with $a.validate }}{{ $_ := set $cfg "validate" . }}{{ end -}}
{{- with $a.checkTimeout }}{{ $_ := set $cfg "checkTimeout" . }}{{ end -}}
{{- with $a.checkRetries }}{{ $_ := set $cfg "checkRetries" . }}{{ end -}}
{{- with $a.checkDeadline }}{{ $_ := set $cfg "checkDeadline" . }}{{ end -}}
{{- with $a.checks }}{{ $_ := set $cfg "checks" . }}{{ end -}}
{{ toYaml $cfg }}
{{- end -}}

{{/* The agent's ServiceAccount: the chart's, or one named in agent.serviceAccount.name. */}}
{{- define "sluice.agentServiceAccount" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{ .Values.agent.serviceAccount.name | default (include "sluice.name" (dict "root" . "component" "agent")) }}
{{- else -}}
{{ .Values.agent.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}
