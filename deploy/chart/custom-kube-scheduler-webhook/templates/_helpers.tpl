{{/* Chart name. */}}
{{- define "cksw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name used for every object (<= 63 chars, DNS label). */}}
{{- define "cksw.fullname" -}}
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

{{- define "cksw.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cksw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cksw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cksw.labels" -}}
helm.sh/chart: {{ include "cksw.chart" . }}
{{ include "cksw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: admission-webhook
app.kubernetes.io/managed-by: {{ .Values.managedBy | default .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "cksw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cksw.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Secret with the serving certificate (all modes). */}}
{{/* The Secret holding the admission token (filled and rotated by the webhook). */}}
{{- define "cksw.admissionTokenSecretName" -}}
{{- printf "%s-admission-token" (include "cksw.fullname" .) }}
{{- end }}

{{- define "cksw.certSecretName" -}}
{{- if eq .Values.certMode "secret-provided" }}
{{- required "certs.existingSecret is required when certMode=secret-provided" .Values.certs.existingSecret }}
{{- else }}
{{- default (printf "%s-certs" (include "cksw.fullname" .)) .Values.certs.secretName }}
{{- end }}
{{- end }}

{{- define "cksw.priorityClassName" -}}
{{- if .Values.priorityClassName }}
{{- .Values.priorityClassName }}
{{- else if .Values.priorityClass.create }}
{{- include "cksw.fullname" . }}
{{- end }}
{{- end }}

{{- define "cksw.image" -}}
{{- $_ := required "image.repository is required: push the image with ./build_and_push.sh, then --set image.repository=<the repository it printed> (or install the chart it pushes with --chart)" .Values.image.repository }}
{{- /* A digest pins the image: repo@digest, or repo:tag@digest when a tag is set too
(the runtime pulls by digest; the tag is there for people reading the spec). */}}
{{- if and .Values.image.digest .Values.image.tag }}
{{- printf "%s:%s@%s" .Values.image.repository .Values.image.tag .Values.image.digest }}
{{- else if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Fail early on values that would render a broken install. */}}
{{- define "cksw.validate" -}}
{{- if not (has .Values.scope (list "opt-in" "all")) }}
{{- fail (printf "scope must be opt-in or all, not %q" .Values.scope) }}
{{- end }}
{{- if not (has .Values.certMode (list "self" "cert-manager" "secret-provided")) }}
{{- fail (printf "certMode must be self, cert-manager or secret-provided, not %q" .Values.certMode) }}
{{- end }}
{{- if and (eq .Values.certMode "secret-provided") (not .Values.certs.caBundle) }}
{{- fail "certs.caBundle (base64 PEM of the CA) is required when certMode=secret-provided" }}
{{- end }}
{{- if eq .Release.Namespace "kube-system" }}
{{- fail "do not install into kube-system: the webhook's namespaced Role (Leases, its Secret) would then reach Karpenter's and the control plane's Leases there; use a namespace of its own" }}
{{- end }}
{{- if eq .Values.failurePolicy "Fail" }}
{{- if not .Values.karpenterNamespace }}
{{- fail "failurePolicy=Fail needs karpenterNamespace (kube-system or karpenter, where Karpenter runs): a webhook that is down would otherwise block Karpenter's own pods, and with them the nodes the webhook needs" }}
{{- end }}
{{- if lt (int .Values.replicas) 2 }}
{{- fail "failurePolicy=Fail needs replicas >= 2: with one replica every restart, upgrade or node drain blocks pod creation in the cluster" }}
{{- end }}
{{- if not .Values.podDisruptionBudget.enabled }}
{{- fail "failurePolicy=Fail needs podDisruptionBudget.enabled: a drain could otherwise evict every replica at once and block pod creation" }}
{{- end }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled .minAvailable (not (kindIs "string" .minAvailable)) (ge (int .minAvailable) (int $.Values.replicas)) }}
{{- fail (printf "podDisruptionBudget.minAvailable=%v with replicas=%v blocks every voluntary eviction (a Karpenter drain would hang): lower it, or use maxUnavailable" .minAvailable $.Values.replicas) }}
{{- end }}
{{- end }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (add (int .Values.shutdownDrainSeconds) (int .Values.timeoutSeconds) 5) }}
{{- fail (printf "terminationGracePeriodSeconds=%v must cover shutdownDrainSeconds + timeoutSeconds + 5 = %v, or in-flight admissions are cut off" .Values.terminationGracePeriodSeconds (add (int .Values.shutdownDrainSeconds) (int .Values.timeoutSeconds) 5)) }}
{{- end }}
{{- if or (eq (int .Values.containerPort) (int .Values.metricsPort)) (eq (int .Values.containerPort) (int .Values.healthPort)) (eq (int .Values.metricsPort) (int .Values.healthPort)) }}
{{- fail (printf "containerPort (%v), metricsPort (%v) and healthPort (%v) must differ: each is a listener of its own" .Values.containerPort .Values.metricsPort .Values.healthPort) }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.apiServerCIDRs) }}
{{- fail "networkPolicy.enabled needs networkPolicy.apiServerCIDRs (on EKS: the CIDRs of the subnets the cluster's control-plane ENIs are in, or the VPC CIDR)" }}
{{- end }}
{{- end }}

{{/*
Scope of the webhook entries, one item per entry: (list <name prefix> <scope matchExpressions>).
A namespaceSelector ANDs its terms, so "either opt-in label" takes two entries with
disjoint selectors: custom-kube-scheduler-webhook.io/enabled=true, and the original
project's custom-kube-scheduler-webhook=enabled where the first label is not "true". A
namespace carrying both is sent once. With scope all, one entry without a scope term.
*/}}
{{- define "cksw.scopes" -}}
{{- if eq .Values.scope "opt-in" }}
- ["", [{key: custom-kube-scheduler-webhook.io/enabled, operator: In, values: ["true"]}]]
- ["original-label.", [{key: custom-kube-scheduler-webhook, operator: In, values: [enabled]}, {key: custom-kube-scheduler-webhook.io/enabled, operator: NotIn, values: ["true"]}]]
{{- else }}
- ["", []]
{{- end }}
{{- end }}

{{/*
namespaceSelector of a webhook entry, (list $ <scope matchExpressions>): never the
release namespace, kube-system, karpenterNamespace or the blocklist (the API server then
does not call at all), ANDed with the scope's terms and the user's selector.
*/}}
{{- define "cksw.namespaceSelector" -}}
{{- $ := index . 0 }}
{{- $scope := index . 1 }}
{{- $excluded := concat (list $.Release.Namespace "kube-system") (compact (list $.Values.karpenterNamespace)) $.Values.blocklistedNamespaces | uniq }}
{{- $user := $.Values.namespaceSelector | default dict }}
{{- with $user.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- toYaml $excluded | nindent 6 }}
  {{- with $scope }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with $user.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* Annotations of both webhook configurations: webhookAnnotations, and in cert-manager
mode the one that tells cainjector where the CA comes from. */}}
{{- define "cksw.webhookAnnotations" -}}
{{- $a := deepCopy (.Values.webhookAnnotations | default dict) }}
{{- if eq .Values.certMode "cert-manager" }}
{{- $_ := set $a "cert-manager.io/inject-ca-from" (printf "%s/%s" .Release.Namespace (include "cksw.fullname" .)) }}
{{- end }}
{{- with $a }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* clientConfig of a webhook. No path and, unless certMode is secret-provided, no
caBundle: the webhook writes the path (/<token>/mutate, named by the entry) and, in
self mode, the caBundle; cert-manager's cainjector writes it in cert-manager mode. What
the chart does not render, Argo CD's and Flux's diffs do not compare, and helm upgrade
does not reset (docs/fleet.md#gitops-argo-cd-and-flux). Until the path is written the
API server calls /, which answers 404: failurePolicy decides, as for a webhook down. */}}
{{- define "cksw.clientConfig" -}}
{{- $ := index . 0 }}
clientConfig:
  service:
    name: {{ include "cksw.fullname" $ }}
    namespace: {{ $.Release.Namespace }}
    port: {{ $.Values.service.port }}
  {{- if eq $.Values.certMode "secret-provided" }}
  caBundle: {{ $.Values.certs.caBundle }}
  {{- end }}
{{- end }}

{{/* The alert rules: files/alerts.yaml rendered with the values. */}}
{{- define "cksw.alertRules" -}}
{{- tpl (.Files.Get "files/alerts.yaml") . | trim }}
{{- end }}
