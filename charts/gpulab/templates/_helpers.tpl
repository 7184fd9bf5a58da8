{{/*
The name prefix of every object: fullnameOverride, else the release name when
it already contains the chart name (nameOverride), else <release>-<name>.
With the release named gpulab, objects are named as the kustomize manifests.
*/}}
{{- define "gpulab.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpulab.operator.fullname" -}}{{ include "gpulab.fullname" . }}-operator{{- end -}}
{{- define "gpulab.agent.fullname" -}}{{ include "gpulab.fullname" . }}-agent{{- end -}}
{{- define "gpulab.conformance.fullname" -}}{{ include "gpulab.fullname" . }}-conformance{{- end -}}

{{/*
Labels of every object. app.kubernetes.io/name stays gpulab-operator or
gpulab-agent whatever the release is called: the monitors turn it into the
job label the alerts and dashboards expect.
*/}}
{{- define "gpulab.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: gpulab
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpulab.operator.selectorLabels" -}}
app.kubernetes.io/name: gpulab-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpulab.agent.selectorLabels" -}}
app.kubernetes.io/name: gpulab-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpulab.operator.labels" -}}
{{ include "gpulab.labels" . }}
app.kubernetes.io/name: gpulab-operator
app.kubernetes.io/component: operator
{{- end -}}

{{- define "gpulab.agent.labels" -}}
{{ include "gpulab.labels" . }}
app.kubernetes.io/name: gpulab-agent
app.kubernetes.io/component: agent
{{- end -}}

{{/* The conformance runner's objects: the name conformance/config gives them. */}}
{{- define "gpulab.conformance.labels" -}}
{{ include "gpulab.labels" . }}
app.kubernetes.io/name: gpulab-conformance
app.kubernetes.io/component: conformance-runner
{{- end -}}

{{/* An image reference; the tag defaults to the chart's appVersion. */}}
{{- define "gpulab.image" -}}
{{- $img := index . 0 -}}{{- $root := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* The ServiceAccount and token Secret the monitors scrape with. */}}
{{- define "gpulab.metricsReader.fullname" -}}{{ include "gpulab.fullname" . }}-metrics-reader{{- end -}}

{{- define "gpulab.monitoring.labels" -}}
{{ include "gpulab.labels" . }}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
