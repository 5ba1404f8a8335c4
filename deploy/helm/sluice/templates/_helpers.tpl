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
- name: SLUICE_NODE_LEASE
  value: {{ .Values.rolloutCoordinator.nodeLease | quote }}
{{- end -}}

{{/*
NATS credentials and TLS (docs/deploy.md, "Credentials and TLS"). Where the
files are in every container: credentials under /etc/sluice/creds, the CA
and the client certificate under /etc/sluice/tls.
*/}}
{{- define "sluice.credsDir" -}}/etc/sluice/creds{{- end -}}
{{- define "sluice.tlsDir" -}}/etc/sluice/tls{{- end -}}

{{/* "true" when the pods mount a TLS Secret (nats.tls.caSecret or clientSecret), else "". */}}
{{- define "sluice.tlsSecrets" -}}
{{- if or .Values.nats.tls.caSecret .Values.nats.tls.clientSecret }}true{{ end -}}
{{- end -}}

{{/* Environment pointing a container at its credentials file (.creds, "" for none) and at the TLS files. */}}
{{- define "sluice.natsSecurityEnv" -}}
{{- $tls := .root.Values.nats.tls -}}
{{- $dir := include "sluice.tlsDir" .root -}}
{{- with .creds }}
- name: SLUICE_NATS_CREDS
  value: {{ . | quote }}
{{- end }}
{{- if $tls.caSecret }}
- name: SLUICE_NATS_TLS_CA
  value: {{ printf "%s/ca.pem" $dir | quote }}
{{- end }}
{{- if $tls.clientSecret }}
- name: SLUICE_NATS_TLS_CERT
  value: {{ printf "%s/client.pem" $dir | quote }}
- name: SLUICE_NATS_TLS_KEY
  value: {{ printf "%s/client.key" $dir | quote }}
{{- end }}
{{- with $tls.serverName }}
- name: SLUICE_NATS_TLS_SERVER
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The mount of the TLS volume, when there is one. */}}
{{- define "sluice.tlsVolumeMount" -}}
{{- if include "sluice.tlsSecrets" . }}
- name: nats-tls
  mountPath: {{ include "sluice.tlsDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The TLS volume: the CA (ca.pem) and the client certificate (client.pem,
client.key) from their Secrets. 0440 with the pod's fsGroup 65532: readable
by the sluice user, not by others.
*/}}
{{- define "sluice.tlsVolume" -}}
{{- $tls := .Values.nats.tls -}}
{{- if include "sluice.tlsSecrets" . }}
- name: nats-tls
  projected:
    defaultMode: 0440
    sources:
      {{- with $tls.caSecret }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $tls.caKey }}
              path: ca.pem
      {{- end }}
      {{- with $tls.clientSecret }}
      - secret:
          name: {{ . }}
          items:
            - key: tls.crt
              path: client.pem
            - key: tls.key
              path: client.key
      {{- end }}
{{- end }}
{{- end -}}

{{/*
Refuses values that contradict each other, with what to do. Included by
services.yaml, so it runs once per render.
*/}}
{{- define "sluice.validate" -}}
{{- $auth := .Values.nats.auth -}}
{{- if and $auth.enabled (not $auth.servicesSecret) -}}
{{- $names := list -}}
{{- $keys := list -}}
{{- range $s := list (list "configurator" .Values.configurator "configurator") (list "rollout-coordinator" .Values.rolloutCoordinator "coordinator") (list "reaper" .Values.reaper "reaper") -}}
{{- if (index $s 1).enabled -}}
{{- $names = append $names (index $s 0) -}}
{{- $keys = append $keys (printf "%s.creds" (index $s 2)) -}}
{{- end -}}
{{- end -}}
{{- with $names -}}
{{- fail (printf "nats.auth.enabled is true but nats.auth.servicesSecret is empty: it names the Secret with the NATS credentials of the %s (keys %s, from `sluice creds issue ROLE`; docs/deploy.md, Credentials and TLS). Create it and set nats.auth.servicesSecret, or disable those services." (join ", " $names) (join ", " $keys)) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.dashboard.enabled (not .Values.dashboard.tokenSecret) -}}
{{- fail "dashboard.enabled is true but dashboard.tokenSecret is empty: the dashboard listens on the pod's address and requires a token. Create a Secret with the key \"token\" (kubectl create secret generic sluice-dashboard --from-literal=token=$(head -c 24 /dev/urandom | base64)) and set dashboard.tokenSecret to its name." -}}
{{- end -}}
{{- if and .Values.dashboard.enabled $auth.enabled (not $auth.servicesSecret) -}}
{{- fail (printf "dashboard.enabled and nats.auth.enabled are true but nats.auth.servicesSecret is empty: the dashboard's credentials are its key %s (from `sluice creds issue readonly`)." .Values.dashboard.credsKey) -}}
{{- end -}}
{{- $gc := .Values.configurator.gitCache -}}
{{- if and .Values.configurator.enabled $gc.enabled (eq ($gc.volume | default "emptyDir") "pvc") (gt (int .Values.configurator.replicas) 1) -}}
{{- fail (printf "configurator.gitCache.volume is pvc but configurator.replicas is %d: the chart's claim is ReadWriteOnce, one pod's, and two configurators must not write the same clones. Set configurator.replicas to 1, or configurator.gitCache.volume to emptyDir (a cache per pod)." (int .Values.configurator.replicas)) -}}
{{- end -}}
{{- if and .Values.agent.enabled (include "sluice.agentNetlink" .) -}}
{{- include "sluice.validateNetlink" . -}}
{{- end -}}
{{- if and .Values.agent.enabled (include "sluice.agentFRR" .) -}}
{{- include "sluice.validateFRR" . -}}
{{- end -}}
{{- end -}}

{{/*
The netlink applier changes the node's own network. Without the node's
network namespace it would configure the pod's own; without root, NET_ADMIN
and NET_RAW every apply and every ping fails; without an uplink or a VTEP
address no agent starts. Refused here, at install, naming the values to
set, rather than by every node at its first rollout.
*/}}
{{- define "sluice.validateNetlink" -}}
{{- $a := .Values.agent -}}
{{- $missing := list -}}
{{- if not $a.hostNetwork }}{{ $missing = append $missing "agent.hostNetwork is false (the pod would change its own network namespace, not the node's)" }}{{ end -}}
{{- if not $a.runAsRoot }}{{ $missing = append $missing "agent.runAsRoot is false (Kubernetes gives a non-root container no capabilities)" }}{{ end -}}
{{- $caps := list -}}
{{- range list "NET_ADMIN" "NET_RAW" }}{{ if not (has . $a.capabilities) }}{{ $caps = append $caps . }}{{ end }}{{ end -}}
{{- with $caps }}{{ $missing = append $missing (printf "agent.capabilities lacks %s (NET_ADMIN: links and addresses; NET_RAW: the ping of the gateway and peer checks)" (join " and " .)) }}{{ end -}}
{{- with $missing -}}
{{- fail (printf "agent.applier.kind is %s, which configures the node's own network, but %s. Set agent.hostNetwork: true, agent.runAsRoot: true and agent.capabilities: [NET_ADMIN, NET_RAW] (docs/deploy.md, The netlink applier), or use another applier." $a.applier.kind (join "; " .)) -}}
{{- end -}}
{{- $nl := $a.netlink | default dict -}}
{{- $hostFlags := false -}}
{{- range $a.extraArgs }}{{ if regexMatch "^--?(uplink|vtep-address|netlink-file)([= ]|$)" . }}{{ $hostFlags = true }}{{ end }}{{ end -}}
{{- if not (or $nl.uplink $nl.vtepAddress $a.netlinkHostPath $hostFlags) -}}
{{- fail "agent.applier.kind is netlink but nothing gives the VXLAN devices their source: set agent.netlink.uplink (the interface they send from, the same name on every node) or agent.netlinkHostPath (a file on each node with its vtepAddress; docs/deploy.md, The netlink applier)." -}}
{{- end -}}
{{- with $nl.routingDaemonFile -}}
{{- $dir := dir . -}}
{{- range list "/var/lib/sluice-agent" "/etc/sluice-agent" "/etc/sluice" "/tmp" -}}
{{- if or (eq $dir .) (hasPrefix (printf "%s/" .) $dir) (hasPrefix (printf "%s/" $dir) .) -}}
{{- fail (printf "agent.netlink.routingDaemonFile %s: its directory %s is mounted from the node at the same path, and would overlap the agent's own %s. Pick a directory of its own, e.g. /run/sluice/routing.json." $nl.routingDaemonFile $dir .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the agent runs the netlink applier (kind netlink or netlink,frr), else "". */}}
{{- define "sluice.agentNetlink" -}}
{{- if has "netlink" (splitList "," .Values.agent.applier.kind) }}true{{ end -}}
{{- end -}}

{{/* "true" when the agent runs the FRR applier (kind frr or netlink,frr), else "". */}}
{{- define "sluice.agentFRR" -}}
{{- if has "frr" (splitList "," .Values.agent.applier.kind) }}true{{ end -}}
{{- end -}}

{{/*
The FRR applier runs FRR's vtysh and frr-reload.py (python3) against the
node's FRR: through its sockets in /var/run/frr and its config in /etc/frr
(mounted from the node), in the node's network namespace (its route checks
read the node's kernel tables), as root (FRR's sockets and files belong to
frr). sluice's agent image has neither vtysh nor python, so an image that
has them must be named. Refused here, at install, naming the values to set.
*/}}
{{- define "sluice.validateFRR" -}}
{{- $a := .Values.agent -}}
{{- $missing := list -}}
{{- if not $a.hostNetwork }}{{ $missing = append $missing "agent.hostNetwork is false (the route checks would read the pod's kernel tables, not the node's)" }}{{ end -}}
{{- if not $a.runAsRoot }}{{ $missing = append $missing "agent.runAsRoot is false (FRR's sockets in /var/run/frr and its files in /etc/frr belong to frr; vtysh runs as root)" }}{{ end -}}
{{- if not $a.image }}{{ $missing = append $missing "agent.image is empty (sluice's agent image has no vtysh and no python3 for frr-reload.py: name an image that has FRR's tools and sluice-agent)" }}{{ end -}}
{{- with $missing -}}
{{- fail (printf "agent.applier.kind is %s, which runs FRR's vtysh and frr-reload.py against the node's FRR, but %s. Set agent.hostNetwork: true, agent.runAsRoot: true and agent.image (docs/deploy.md, The FRR applier)." $a.applier.kind (join "; " .)) -}}
{{- end -}}
{{- if and $a.frrRouterIdFromHostIP ($a.frr | default dict).routerId -}}
{{- fail "agent.frrRouterIdFromHostIP is true and agent.frr.routerId is set: the router id would be the same on every node. Keep one (docs/deploy.md, The FRR applier)." -}}
{{- end -}}
{{- end -}}

{{/* Where the agent finds its node's own netlink settings (agent.netlinkHostPath). */}}
{{- define "sluice.netlinkFile" -}}/etc/sluice/netlink.yaml{{- end -}}

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

{{/* The agent's --config file: applier (with the netlink section for the netlink applier, the frr section for the FRR applier), validate and checks, with unset fields left out (the agent reads it strictly). */}}
{{- define "sluice.agentConfig" -}}
{{- $a := .Values.agent -}}
{{- $applier := dict "kind" $a.applier.kind -}}
{{- if has $a.applier.kind (list "file" "exec") }}
{{- with $a.applier.path }}{{ $_ := set $applier "path" . }}{{ end -}}
{{- end -}}
{{- if eq $a.applier.kind "exec" }}
{{- $_ := set $applier "command" $a.applier.command -}}
{{- $_ := set $applier "mode" $a.applier.mode -}}
{{- end -}}
{{- $cfg := dict "applier" $applier -}}
{{- if include "sluice.agentNetlink" . }}
{{- with $a.netlink }}{{ $_ := set $cfg "netlink" . }}{{ end -}}
{{- end -}}
{{- if include "sluice.agentFRR" . }}
{{- with $a.frr }}{{ $_ := set $cfg "frr" . }}{{ end -}}
{{- end -}}
{{- with $a.validate }}{{ $_ := set $cfg "validate" . }}{{ end -}}
{{- with $a.validateTimeout }}{{ $_ := set $cfg "validateTimeout" . }}{{ end -}}
{{- with $a.applierTimeout }}{{ $_ := set $cfg "applierTimeout" . }}{{ end -}}
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

{{- /* The configurator's rules on sluice's own kinds (sluice.dev): read them, write their status. */ -}}
{{- define "sluice.configuratorSluiceRules" -}}
- apiGroups: ["sluice.dev"]
  resources: ["layer2networks", "vrfroutes", "routingtables"]
  verbs: ["list", "watch"]
- apiGroups: ["sluice.dev"]
  resources: ["layer2networks/status", "vrfroutes/status", "routingtables/status"]
  verbs: ["patch"]
{{- end -}}
