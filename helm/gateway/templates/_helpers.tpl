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

{{/* Name of one service's objects. Argument: (dict "root" $ "component" "edge"). */}}
{{- define "gateway.componentName" -}}
{{- printf "%s-%s" (include "gateway.fullname" .root | trunc 52 | trimSuffix "-") .component -}}
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

{{- define "gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
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

{{/* Provider API keys for routing: the providerSecrets refs, plus the dev Secret's entries. */}}
{{- define "gateway.providerEnv" -}}
{{- range .Values.providerSecrets }}
- name: {{ required "providerSecrets[].env is required" .env }}
  valueFrom:
    secretKeyRef:
      name: {{ required "providerSecrets[].secretName is required" .secretName }}
      key: {{ required "providerSecrets[].key is required" .key }}
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

{{/* Pod-level settings every Deployment shares (indent under the pod spec). */}}
{{- define "gateway.podSpecCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
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

{{/* The writable /tmp every container gets (the root filesystem is read-only). */}}
{{- define "gateway.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}
