{{- define "memex.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "memex.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component (api, worker, migrate, otel-collector). */}}
{{- define "memex.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "memex.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "memex.secretName" -}}
{{ .Values.secret.existingSecret | default (include "memex.fullname" .) }}
{{- end -}}

{{- define "memex.otelEndpoint" -}}
{{- if .Values.otel.endpoint -}}
{{ .Values.otel.endpoint }}
{{- else if .Values.otel.collector.enabled -}}
http://{{ include "memex.fullname" . }}-otel-collector:4317
{{- end -}}
{{- end -}}

{{/* The environment every memex container gets: credentials, chart-owned keys, telemetry. */}}
{{- define "memex.env" -}}
- name: MEMEX_CONFIG
  value: /etc/memex/memex.toml
- name: MEMEX_DATABASE__URL
  valueFrom:
    secretKeyRef:
      name: {{ include "memex.secretName" . }}
      key: database-url
- name: MEMEX_EMBEDDING__API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "memex.secretName" . }}
      key: embedding-api-key
      optional: true
- name: MEMEX_DATABASE__MIGRATE_ON_START
  value: "false"
- name: MEMEX_SHUTDOWN_GRACE_SECS
  value: {{ .Values.shutdownGraceSeconds | quote }}
{{- with include "memex.otelEndpoint" . }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: OTEL_SERVICE_NAME
  value: {{ include "memex.fullname" . }}
{{- end -}}

{{/* gRPC health probes: "liveness" says the process serves; "" (the default) says it is ready. */}}
{{- define "memex.probes" -}}
startupProbe:
  grpc:
    port: 50051
    service: liveness
  periodSeconds: 5
  failureThreshold: 120
livenessProbe:
  grpc:
    port: 50051
    service: liveness
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  grpc:
    port: 50051
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end -}}

{{- define "memex.volumes" -}}
- name: config
  configMap:
    name: {{ include "memex.fullname" . }}
- name: data
{{- if eq .Values.index.volume "ephemeral" }}
  ephemeral:
    volumeClaimTemplate:
      spec:
        accessModes: [ReadWriteOnce]
        {{- with .Values.index.storageClass }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ .Values.index.size }}
{{- else if eq .Values.index.volume "emptyDir" }}
  emptyDir:
    sizeLimit: {{ .Values.index.sizeLimit }}
{{- else }}
{{- fail "index.volume must be emptyDir or ephemeral" }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "memex.volumeMounts" -}}
- name: config
  mountPath: /etc/memex
  readOnly: true
- name: data
  mountPath: /var/lib/memex
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "memex.terminationGrace" -}}
{{ add .Values.preStopSleepSeconds .Values.shutdownGraceSeconds 10 }}
{{- end -}}
