{{/* Chart name, overridable. */}}
{{- define "gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name, 63 characters at most (DNS label). */}}
{{- define "gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Name of one service's objects. Argument: (dict "root" $ "component" "edge"). The release part is cut
to 44 characters: "-routing-headless" must still fit a Service name (63), and the routing
StatefulSet's name must stay within 52 (its pods' controller-revision-hash label adds 11).
*/}}
{{- define "gateway.componentName" -}}
{{- printf "%s-%s" (include "gateway.fullname" .root | trunc 44 | trimSuffix "-") .component -}}
{{- end -}}

{{/* Argument: (dict "root" $ "component" "edge"). */}}
{{- define "gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gateway.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Argument: (dict "root" $ "component" "edge"). */}}
{{- define "gateway.labels" -}}
helm.sh/chart: {{ include "gateway.chart" .root }}
{{ include "gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: {{ include "gateway.name" .root }}
{{- end -}}

{{/* Pod template labels: selector labels plus podLabels. Argument: (dict "root" $ "component" "edge"). */}}
{{- define "gateway.podLabels" -}}
{{ include "gateway.selectorLabels" . }}
{{- with .root.Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Image of one app: each app has its own (deploy/Dockerfile with APP=<app>), named
     <image.repository>-<app>:<tag>. Argument: (dict "root" $ "app" "edge"). */}}
{{- define "gateway.image" -}}
{{- printf "%s-%s:%s" .root.Values.image.repository .app (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{/* host:port a peer dials. Argument: (dict "root" $ "component" "auth" "port" 50051). */}}
{{- define "gateway.address" -}}
{{- printf "%s:%v" (include "gateway.componentName" .) .port -}}
{{- end -}}

{{/* The dev Secret's name (devSecrets.enabled). */}}
{{- define "gateway.devSecretName" -}}
{{- printf "%s-dev" (include "gateway.fullname" .) -}}
{{- end -}}

{{/* Env every service shares. */}}
{{- define "gateway.commonEnv" -}}
- name: NATS_URL
  value: {{ required "nats.url is required" .Values.nats.url | quote }}
{{- with .Values.nats.namespace }}
- name: NATS_NAMESPACE
  value: {{ . | quote }}
{{- end }}
- name: LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- with .Values.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if .Values.metrics.enabled }}
- name: METRICS_PORT
  value: {{ .Values.metrics.port | quote }}
- name: METRICS_HOST
  value: "0.0.0.0"
{{- end }}
{{- end -}}

{{/* The metrics port of a service container (metrics.enabled). */}}
{{- define "gateway.metricsContainerPort" -}}
{{- if .Values.metrics.enabled }}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}
{{- end -}}

{{/* prometheus.io/* pod annotations for annotation-driven scrape configs (metrics.annotations). */}}
{{- define "gateway.metricsAnnotations" -}}
{{- if and .Values.metrics.enabled .Values.metrics.annotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* DATABASE_URL from the external Secret, or from the dev Secret. */}}
{{- define "gateway.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.devSecrets.enabled }}
      name: {{ include "gateway.devSecretName" . }}
      key: postgres-url
      {{- else }}
      name: {{ required "postgres.urlSecret.name is required (or devSecrets.enabled)" .Values.postgres.urlSecret.name }}
      key: {{ required "postgres.urlSecret.key is required" .Values.postgres.urlSecret.key }}
      {{- end }}
{{- end -}}

{{- define "gateway.keyHashEnv" -}}
- name: KEY_HASH_SECRET
  valueFrom:
    secretKeyRef:
      {{- if .Values.devSecrets.enabled }}
      name: {{ include "gateway.devSecretName" . }}
      key: key-hash-secret
      {{- else }}
      name: {{ required "keyHash.secret.name is required (or devSecrets.enabled)" .Values.keyHash.secret.name }}
      key: {{ required "keyHash.secret.key is required" .Values.keyHash.secret.key }}
      {{- end }}
{{- end -}}

{{/* WEBHOOK_SECRET_KEY (the ledger's key for webhook secrets at rest) from the external Secret, or from the dev Secret. */}}
{{- define "gateway.webhookSecretKeyEnv" -}}
- name: WEBHOOK_SECRET_KEY
  valueFrom:
    secretKeyRef:
      {{- if .Values.devSecrets.enabled }}
      name: {{ include "gateway.devSecretName" . }}
      key: webhook-secret-key
      {{- else }}
      name: {{ required "webhookSecretKey.secret.name is required (or devSecrets.enabled)" .Values.webhookSecretKey.secret.name }}
      key: {{ required "webhookSecretKey.secret.key is required" .Values.webhookSecretKey.secret.key }}
      {{- end }}
{{- end -}}

{{/*
Internal gRPC credentials (docs/operations.md "Internal authentication"): every service presents the service
token; only auth, ledger and catalog (the services with admin RPCs) and the gatewayctl Job get the
admin token. Argument: (dict "root" $ "service" true "admin" true).
*/}}
{{- define "gateway.internalAuthEnv" -}}
{{- $root := .root -}}
{{- $secret := $root.Values.internalAuth.secret -}}
{{- range $entry := list (list .service "GATEWAY_INTERNAL_TOKEN" "internal-service-token" $secret.serviceTokenKey) (list .admin "GATEWAY_ADMIN_TOKEN" "internal-admin-token" $secret.adminTokenKey) }}
{{- if index $entry 0 }}
- name: {{ index $entry 1 }}
  valueFrom:
    secretKeyRef:
      {{- if $root.Values.devSecrets.enabled }}
      name: {{ include "gateway.devSecretName" $root }}
      key: {{ index $entry 2 }}
      {{- else }}
      name: {{ required "internalAuth.secret.name is required (or devSecrets.enabled)" $secret.name }}
      key: {{ index $entry 3 }}
      {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Provider API keys for routing: the providerSecrets refs, plus the dev Secret's entries. */}}
{{- define "gateway.providerEnv" -}}
{{- range .Values.providerSecrets }}
- name: {{ required "providerSecrets[].env is required" .env }}
  valueFrom:
    secretKeyRef:
      name: {{ required "providerSecrets[].secretName is required" .secretName }}
      key: {{ required "providerSecrets[].key is required" .key }}
{{- end }}
{{- range .Values.providerCredentialFiles }}
- name: {{ .env }}
  value: {{ printf "/var/run/gateway/provider-files/%s/%s" .env .key | quote }}
{{- end }}
{{- if .Values.devSecrets.enabled }}
{{- range $env, $_ := .Values.devSecrets.providers }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ include "gateway.devSecretName" $ }}
      key: {{ printf "provider-%s" $env }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Peer addresses for the edge and gatewayctl. */}}
{{- define "gateway.peerEnv" -}}
- name: AUTH_ADDR
  value: {{ include "gateway.address" (dict "root" . "component" "auth" "port" .Values.auth.port) | quote }}
- name: CATALOG_ADDR
  value: {{ include "gateway.address" (dict "root" . "component" "catalog" "port" .Values.catalog.port) | quote }}
- name: LEDGER_ADDR
  value: {{ include "gateway.address" (dict "root" . "component" "ledger" "port" .Values.ledger.port) | quote }}
{{- end -}}

{{/* Native gRPC probes (grpc.health.v1, service ""). Argument: (dict "root" $ "port" 50051). */}}
{{- define "gateway.grpcProbes" -}}
startupProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: {{ .root.Values.probes.startup.periodSeconds }}
  failureThreshold: {{ .root.Values.probes.startup.failureThreshold }}
readinessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: {{ .root.Values.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ .root.Values.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ .root.Values.probes.readiness.failureThreshold }}
livenessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: {{ .root.Values.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ .root.Values.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ .root.Values.probes.liveness.failureThreshold }}
{{- end -}}

{{/* Pod-level settings every workload shares (indent under the pod spec). Argument: (dict "root" $ "component" "edge"). */}}
{{- define "gateway.podSpecCommon" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "gateway.componentName" . }}
automountServiceAccountToken: false
{{- /* Service links would put one variable per Service of the namespace into every process's env. */}}
enableServiceLinks: false
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- /* Spreading is for the long-running services; the gatewayctl Job's one pod has nothing to spread from. */}}
{{- if and $root.Values.topologySpread.enabled $root.Values.topologySpread.topologyKeys (ne .component "gatewayctl") }}
topologySpreadConstraints:
  {{- range $root.Values.topologySpread.topologyKeys }}
  - topologyKey: {{ . }}
    maxSkew: {{ $root.Values.topologySpread.maxSkew }}
    whenUnsatisfiable: {{ $root.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "gateway.selectorLabels" $ | nindent 8 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The writable /tmp every container gets (the root filesystem is read-only). */}}
{{- define "gateway.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}

{{/* ConfigMap key of a catalogFiles path: keys allow only [-._a-zA-Z0-9], the path's '/' become '_'. */}}
{{- define "gateway.catalogFileKey" -}}
{{- printf "file.%s" (regexReplaceAll "[^-._a-zA-Z0-9]" . "_") -}}
{{- end -}}

{{/*
The catalog config and every catalogFiles entry as one volume, each file at its path relative to the
config (ConfigMap keys cannot hold '/', so `items` map each key back to its path). Mount it at the
config file's directory.
*/}}
{{- define "gateway.catalogConfigVolume" -}}
- name: catalog-config
  configMap:
    name: {{ include "gateway.componentName" (dict "root" . "component" "catalog-config") }}
    items:
      - key: {{ base .Values.catalog.configPath }}
        path: {{ base .Values.catalog.configPath }}
      {{- range $path, $_ := .Values.catalogFiles }}
      - key: {{ include "gateway.catalogFileKey" $path }}
        path: {{ clean $path }}
      {{- end }}
{{- end -}}

{{/* NetworkPolicy peer selecting one service's pods. Argument: (dict "root" $ "component" "edge"). */}}
{{- define "gateway.peer" -}}
- podSelector:
    matchLabels:
      {{- include "gateway.selectorLabels" . | nindent 6 }}
{{- end -}}

{{/* Egress rule to one service's gRPC port. Argument: (dict "root" $ "component" "auth" "port" 50051). */}}
{{- define "gateway.egressTo" -}}
- to:
    {{- include "gateway.peer" . | nindent 4 }}
  ports:
    - port: {{ .port }}
      protocol: TCP
{{- end -}}

{{/* Egress to a port, optionally narrowed to peers. Argument: (dict "port" 4222 "to" list "protocols" (list "TCP")). */}}
{{- define "gateway.egressPort" -}}
- ports:
    {{- range .protocols }}
    - port: {{ $.port }}
      protocol: {{ . }}
    {{- end }}
  {{- with .to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* Egress every pod of the release has: DNS, the OTLP collector's port when tracing is on, networkPolicy.extraEgress. */}}
{{- define "gateway.baseEgress" -}}
{{- include "gateway.egressPort" (dict "port" .Values.networkPolicy.dns.port "to" .Values.networkPolicy.dns.to "protocols" (list "UDP" "TCP")) }}
{{- with .Values.otel.endpoint }}
{{- $url := urlParse . }}
{{- $port := regexFind "[0-9]+$" (regexFind ":[0-9]+$" $url.host) | default (ternary "443" "80" (eq $url.scheme "https")) }}
{{ include "gateway.egressPort" (dict "port" (int $port) "to" list "protocols" (list "TCP")) }}
{{- end }}
{{- with .Values.networkPolicy.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gateway.natsEgress" -}}
{{- include "gateway.egressPort" (dict "port" .Values.networkPolicy.nats.port "to" .Values.networkPolicy.nats.to "protocols" (list "TCP")) }}
{{- end -}}

{{- define "gateway.postgresEgress" -}}
{{- include "gateway.egressPort" (dict "port" .Values.networkPolicy.postgres.port "to" .Values.networkPolicy.postgres.to "protocols" (list "TCP")) }}
{{- end -}}

{{/* Egress to the public internet (networkPolicy.internet), any port. */}}
{{- define "gateway.internetEgress" -}}
{{- with .Values.networkPolicy.internet -}}
- to:
    {{- toYaml . | nindent 4 }}
{{- end -}}
{{- end -}}

{{/* Routing's mounts of providerCredentialFiles: one read-only file per entry, at the path its env names. */}}
{{- define "gateway.providerFileMounts" -}}
{{- range .Values.providerCredentialFiles }}
- name: {{ printf "provider-file-%s" (.env | lower | replace "_" "-") | trunc 63 | trimSuffix "-" }}
  mountPath: {{ printf "/var/run/gateway/provider-files/%s" .env | quote }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "gateway.providerFileVolumes" -}}
{{- range .Values.providerCredentialFiles }}
- name: {{ printf "provider-file-%s" (.env | lower | replace "_" "-") | trunc 63 | trimSuffix "-" }}
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: {{ .key }}
{{- end }}
{{- end -}}

{{/*
PromQL label matchers (no braces) of this release's series: monitoring.selector, or by default its
namespace and release (the `release` label the ServiceMonitors add). Argument: the root context.
*/}}
{{- define "gateway.seriesSelector" -}}
{{- if .Values.monitoring.selector -}}
{{- .Values.monitoring.selector -}}
{{- else -}}
namespace="{{ .Release.Namespace }}",release="{{ .Release.Name }}"
{{- end -}}
{{- end -}}

{{/*
The per-replica load gauges of a load-scaled service, as exported by it (docs/operations.md "Metrics").
Argument: the component ("edge" or "routing"); output: "IN_FLIGHT_SERIES STREAMS_SERIES".
*/}}
{{- define "gateway.loadSeries" -}}
{{- if eq . "edge" -}}
gateway_http_requests_in_flight gateway_http_streams_active
{{- else if eq . "routing" -}}
gateway_routing_requests_in_flight gateway_routing_streams_active
{{- else -}}
{{- fail (printf "no load gauges for %s" .) -}}
{{- end -}}
{{- end -}}
