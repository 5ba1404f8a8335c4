{{/* Image of a sluice binary. */}}
{{- define "sluice.image" -}}
{{ .root.Values.image.repository }}/{{ .bin }}:{{ .root.Values.image.tag }}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "sluice.labels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
