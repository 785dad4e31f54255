{{/* Names and labels shared by every object of a release. */}}
{{- define "aorta.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "aorta.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "aorta.labels" -}}
{{ include "aorta.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: inference-server
{{- end -}}

{{- define "aorta.apiKeySecret" -}}
{{- .Values.apiKey.existingSecret | default (printf "%s-api-key" (include "aorta.fullname" .)) -}}
{{- end -}}

{{- define "aorta.modelClaim" -}}
{{- .Values.model.existingClaim | default (printf "%s-models" (include "aorta.fullname" .)) -}}
{{- end -}}
