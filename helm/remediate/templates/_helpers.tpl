{{/*
Expand the name of the chart.
*/}}
{{- define "remediate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "remediate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The agent's objects: <fullname>-agent (kept within 63 characters). */}}
{{- define "remediate.agentFullname" -}}
{{- printf "%s-agent" (include "remediate.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "remediate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "remediate.labels" -}}
helm.sh/chart: {{ include "remediate.chart" . }}
{{ include "remediate.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "remediate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "remediate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "remediate.serverSelectorLabels" -}}
{{ include "remediate.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "remediate.agentSelectorLabels" -}}
{{ include "remediate.selectorLabels" . }}
app.kubernetes.io/component: agent
{{- end }}

{{/* The agent pods' label selector as one string: the server finds agents with it (agent_selector). */}}
{{- define "remediate.agentSelector" -}}
{{- $labels := include "remediate.agentSelectorLabels" . | fromYaml }}
{{- $parts := list }}
{{- range $key := keys $labels | sortAlpha }}
{{- $parts = append $parts (printf "%s=%s" $key (get $labels $key)) }}
{{- end }}
{{- join "," $parts }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "remediate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "remediate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "remediate.agentServiceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (include "remediate.agentFullname" .) .Values.agent.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* No public image is published: refuse to render a placeholder the kubelet could never pull. */}}
{{- define "remediate.image" -}}
{{- $repository := required "image.repository is not set: build the Dockerfile, push it and set image.repository (and image.tag) to it, e.g. --set image.repository=registry.example/remediate (docs/install.md)" .Values.image.repository }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding the tokens. */}}
{{- define "remediate.secretName" -}}
{{- default (printf "%s-tokens" (include "remediate.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "remediate.externalDatabase" -}}
{{- if or .Values.database.url .Values.database.existingSecret }}true{{ end }}
{{- end }}

{{/* The server's topologySpreadConstraints, a YAML list: the user's own (a missing labelSelector gets the
     server pods' labels), else with several replicas the default spread over topologySpread.topologyKey. */}}
{{- define "remediate.topologySpreadConstraints" -}}
{{- $selector := dict "matchLabels" (include "remediate.serverSelectorLabels" . | fromYaml) }}
{{- $constraints := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" $selector }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
{{- $spread := .Values.topologySpread }}
{{- if and (not $constraints) $spread.enabled (gt (int .Values.replicaCount) 1) }}
{{- $constraints = list (dict "maxSkew" $spread.maxSkew "topologyKey" $spread.topologyKey "whenUnsatisfiable" $spread.whenUnsatisfiable "labelSelector" $selector) }}
{{- end }}
{{- toYaml $constraints }}
{{- end }}

{{/* Shipped playbook files that are enabled: a dict of file name -> content. */}}
{{- define "remediate.shippedPlaybooks" -}}
{{- $result := dict }}
{{- if .Values.playbooks.shipped }}
{{- range $path, $_ := .Files.Glob "files/playbooks/*.yaml" }}
{{- $file := base $path }}
{{- if not (has (trimSuffix ".yaml" $file) $.Values.playbooks.exclude) }}
{{- $_ := set $result $file ($.Files.Get $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $result }}
{{- end }}

{{/* Every alertname the enabled playbooks match, sorted, "|"-joined (for AlertManager routes). */}}
{{- define "remediate.alertnames" -}}
{{- $names := list }}
{{- range $file, $text := include "remediate.shippedPlaybooks" . | fromYaml }}
{{- $match := (fromYaml $text).match | default dict }}
{{- $names = concat $names (kindIs "string" $match.alertname | ternary (list $match.alertname) ($match.alertname | default list)) }}
{{- end }}
{{- range $file, $playbook := .Values.playbooks.extra }}
{{- $data := kindIs "string" $playbook | ternary (fromYaml (toString $playbook)) $playbook }}
{{- $match := $data.match | default dict }}
{{- $names = concat $names (kindIs "string" $match.alertname | ternary (list $match.alertname) ($match.alertname | default list)) }}
{{- end }}
{{- $names | uniq | sortAlpha | join "|" }}
{{- end }}

{{/* The route that sends alerts to remediate: the shipped alertmanager/alertmanager.yml's remediate route
(its chart copy files/alertmanager/alertmanager.yml, written by scripts/sync-generated), each field
overridable through alertmanagerConfig.*. One source for that file, the AlertmanagerConfig and
NOTES.txt (tests/e2e/test_chart.py checks all three against the shipped ladders). */}}
{{- define "remediate.route" -}}
{{- $shipped := dict }}
{{- range ((.Files.Get "files/alertmanager/alertmanager.yml" | fromYaml).route.routes | default list) }}
{{- if eq .receiver "remediate" }}{{ $shipped = . }}{{ end }}
{{- end }}
{{- if not $shipped }}{{ fail "files/alertmanager/alertmanager.yml has no route to the remediate receiver: run scripts/sync-generated" }}{{ end }}
{{- $nvml := dict }}
{{- range ($shipped.routes | default list) }}
{{- if has "source=\"nvml\"" (.matchers | default list) }}{{ $nvml = . }}{{ end }}
{{- end }}
{{- if not $nvml }}{{ fail "files/alertmanager/alertmanager.yml has no source=\"nvml\" route (node agents' GPU faults): run scripts/sync-generated" }}{{ end }}
{{- $v := .Values.alertmanagerConfig }}
{{- toYaml (dict
  "group_by" ($v.groupBy | default $shipped.group_by)
  "group_wait" ($v.groupWait | default $shipped.group_wait)
  "group_interval" ($v.groupInterval | default $shipped.group_interval)
  "repeat_interval" ($v.repeatInterval | default $shipped.repeat_interval)
  "nvml_group_by" $nvml.group_by
  "nvml_group_wait" $nvml.group_wait) }}
{{- end }}

{{/*
The server's `sinks` setting from the `sinks` value: a Secret's key becomes url_file (headers_file) under
/etc/remediate/sinks/<name>/ (mounted by the Deployment, read when a notify step runs); a plain `url` is
written as it is (the server refuses one that carries a credential).
*/}}
{{- define "remediate.sinks" -}}
{{- $sinks := dict }}
{{- range $name, $sink := .Values.sinks }}
{{- $entry := dict "type" $sink.type }}
{{- if $sink.existingSecret }}
{{- $_ := set $entry "url_file" (printf "/etc/remediate/sinks/%s/%s" $name (default "url" $sink.key)) }}
{{- if $sink.headersKey }}
{{- if ne $sink.type "webhook" }}
{{- fail (printf "sinks.%s.headersKey: only a webhook sink sends headers of its own (type is %s)" $name $sink.type) }}
{{- end }}
{{- $_ := set $entry "headers_file" (printf "/etc/remediate/sinks/%s/%s" $name $sink.headersKey) }}
{{- end }}
{{- else }}
{{- $_ := set $entry "url" $sink.url }}
{{- end }}
{{- $_ := set $sinks $name $entry }}
{{- end }}
{{- toYaml $sinks }}
{{- end }}

{{/* Whether an object kube-prometheus-stack consumes (ServiceMonitor, PrometheusRule, dashboard) is rendered:
its own `enabled` when true or false, else on when kubePrometheusStack.release is set. Called with
(list <enabled> $); "true" or "". */}}
{{- define "remediate.withKubePrometheusStack" -}}
{{- $enabled := index . 0 }}
{{- if kindIs "bool" $enabled }}{{ if $enabled }}true{{ end }}
{{- else if (index . 1).Values.kubePrometheusStack.release }}true{{ end }}
{{- end }}

{{/* The labels of a ServiceMonitor or PrometheusRule, called with (list <additionalLabels> $): `release:
<kubePrometheusStack.release>`, which kube-prometheus-stack's Prometheus selects them by, under the object's
own additionalLabels (they win). YAML, or "" when there are none. */}}
{{- define "remediate.kubePrometheusStackLabels" -}}
{{- $labels := deepCopy (index . 0 | default dict) }}
{{- with (index . 1).Values.kubePrometheusStack.release }}
{{- if not (hasKey $labels "release") }}{{ $_ := set $labels "release" . }}{{ end }}
{{- end }}
{{- with $labels }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* The sha256 of ONE ConfigMap of templates/configmap.yaml, by name: (list $ "name"). The pod template of
each workload carries the checksums of the ConfigMaps it mounts, so a change to them rolls exactly those pods:
the server's settings and playbooks roll the server (which reads them at start), never the node agents. */}}
{{- define "remediate.configMapChecksum" -}}
{{- $root := index . 0 }}
{{- $marker := printf "\n  name: %s\n" (index . 1) }}
{{- $found := "" }}
{{- range (include (print $root.Template.BasePath "/configmap.yaml") $root | splitList "\n---\n") }}
{{- if contains $marker (printf "\n%s" .) }}{{ $found = . }}{{ end }}
{{- end }}
{{- if not $found }}{{ fail (printf "templates/configmap.yaml has no ConfigMap %s" (index . 1)) }}{{ end }}
{{- $found | sha256sum }}
{{- end }}

{{/*
The server's URL scheme: https with tls.enabled (the Secret and the CA's ConfigMap are then required).
*/}}
{{- define "remediate.scheme" -}}
{{- if .Values.tls.enabled }}
{{- if not .Values.tls.existingSecret }}{{ fail "tls.enabled needs tls.existingSecret: a kubernetes.io/tls Secret (tls.crt, tls.key) for the server's Service name" }}{{ end }}
{{- if not .Values.tls.caConfigMap }}{{ fail "tls.enabled needs tls.caConfigMap: a ConfigMap whose ca.crt is the CA that signed the server's certificate (the agents, the helm test, Prometheus and AlertManager verify with it; never a Secret: the agent DaemonSet references none)" }}{{ end }}
{{- "https" }}
{{- else }}
{{- "http" }}
{{- end }}
{{- end }}

{{/*
The server's Service URL as the cluster reaches it.
*/}}
{{- define "remediate.serviceUrl" -}}
{{- printf "%s://%s.%s.svc:%v" (include "remediate.scheme" .) (include "remediate.fullname" .) .Release.Namespace .Values.service.port }}
{{- end }}
