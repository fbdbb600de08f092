#!/usr/bin/env bash
# Deploy checks that need no cluster:
#   ShellCheck on every shell script of the repo; helm lint and helm template of the chart
#   with default and non-default values (and what the rendered objects must say);
#   the alerts (promtool check rules, promtool test rules) and the dashboard the chart ships;
#   deploy/manifests drift; Dockerfile rules (plus hadolint when installed);
#   build_and_push.sh --dry-run output; the helper scripts' --help.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
cd "$REPO_ROOT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== shellcheck"
if ! command -v shellcheck >/dev/null 2>&1; then
	# shellcheck source=scripts/localcluster/lib.sh
	source scripts/localcluster/lib.sh
	lc_ensure_packages shellcheck:shellcheck
fi
mapfile -t scripts < <(find . \( -path ./.git -o -path ./.localcluster -o -path ./bin \) -prune -o -name '*.sh' -print | sort)
if [[ -f .ci/run ]]; then scripts+=(.ci/run); fi
if shellcheck -x "${scripts[@]}"; then
	pass "shellcheck: ${#scripts[@]} scripts"
else
	fail "shellcheck (see above)"
fi
# One indentation style (shfmt's: tabs), checked where shfmt is installed.
if command -v shfmt >/dev/null 2>&1; then
	if shfmt -d "${scripts[@]}" >"$tmp/shfmt.diff"; then
		pass "shfmt: ${#scripts[@]} scripts in one style"
	else
		cat "$tmp/shfmt.diff"
		fail "shfmt -d (see above)"
	fi
fi

echo "== one version"
v=$(<VERSION)
check "VERSION is a semantic version ($v)" matches "$v" '^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$'
check "Chart.yaml version is VERSION" matches "$(cat deploy/chart/custom-kube-scheduler-webhook/Chart.yaml)" "^version: $v$"
check "Chart.yaml appVersion is VERSION" matches "$(cat deploy/chart/custom-kube-scheduler-webhook/Chart.yaml)" "^appVersion: \"?$v\"?$"
check "CHANGELOG.md has an entry for $v" matches "$(cat CHANGELOG.md)" "^## \[$v\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$"
check "make build stamps VERSION into the binary" matches "$(make -s -n build)" "-X main.version=$v "

echo "== helm lint / template"
ensure_helm
NS=cksw-test
render() { # NAME [helm args...] -> $tmp/NAME.yaml
	local name=$1
	shift
	helm_template "$CHART_NAME" "$NS" "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err"
}
check "helm lint --strict (default values + image.repository)" helm_lint
check "helm template (default values + image.repository)" render default
# As Argo CD and CI render: no cluster, no --kube-version (the chart needs 1.28+; a
# released helm assumes its client-go's version, ensure_helm links it so).
check "helm template with no --kube-version" "$HELM" template "$CHART_NAME" "$CHART_DIR" --namespace "$NS" --set image.repository="$RENDER_IMAGE_REPOSITORY"
# No public image is published, so the chart names none: without image.repository it stops
# with a message that says how to get one.
if "$HELM" template "$CHART_NAME" "$CHART_DIR" --namespace "$NS" --kube-version "$RENDER_KUBE_VERSION" >/dev/null 2>"$tmp/noimage.err"; then
	fail "no image.repository: refused"
else
	pass "no image.repository: refused"
fi
check "no image.repository: the message points at build_and_push.sh" contains "$(cat "$tmp/noimage.err")" "image.repository is required: push the image with ./build_and_push.sh"
for values in deploy/test/values/*.yaml; do
	name=$(basename "$values" .yaml)
	check "helm lint --strict -f $values" helm_lint -f "$values"
	check "helm template -f $values" render "$name" -f "$values"
done
check "helm template with a ServiceMonitor" render servicemonitor --set metrics.serviceMonitor.enabled=true
sm=$(tr -d '\n' <<<"$(docs ServiceMonitor <"$tmp/servicemonitor.yaml")")
check "ServiceMonitor scrapes the metrics port over plain HTTP" matches "$sm" 'port: metrics +path: /metrics +scheme: http '
check_not "ServiceMonitor skips no TLS verification" contains "$sm" "insecureSkipVerify"
check_not "no ServiceMonitor by default" grep -q '^kind: ServiceMonitor' "$tmp/default.yaml"
check "helm template with a ServiceMonitor's scrapeTimeout, relabelings, metricRelabelings and tlsConfig" render sm-full \
	--set metrics.serviceMonitor.enabled=true --set metrics.serviceMonitor.scrapeTimeout=10s --set metrics.serviceMonitor.scheme=https \
	--set-json 'metrics.serviceMonitor.relabelings=[{"targetLabel":"cluster","replacement":"prod-eu-west-1"}]' \
	--set-json 'metrics.serviceMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":"go_.*","action":"drop"}]' \
	--set-json 'metrics.serviceMonitor.tlsConfig={"serverName":"cksw.metrics","ca":{"configMap":{"name":"metrics-ca","key":"ca.crt"}}}'
smf=$(tr -d '\n' <<<"$(docs ServiceMonitor <"$tmp/sm-full.yaml")")
check "ServiceMonitor: every endpoint setting rendered" matches "$smf" \
	'scheme: https +interval: 30s +scrapeTimeout: 10s +tlsConfig: +ca: +configMap: +key: ca.crt +name: metrics-ca +serverName: cksw.metrics +relabelings: +- replacement: prod-eu-west-1 +targetLabel: cluster +metricRelabelings: +- action: drop +regex: go_.. +sourceLabels: +- __name__'
check_not "ServiceMonitor: scheme ftp is refused" render sm-bad --set metrics.serviceMonitor.scheme=ftp

echo "-- alerts: promtool check and unit tests, and the chart's PrometheusRule"
if ! command -v promtool >/dev/null 2>&1; then
	# shellcheck source=scripts/localcluster/lib.sh
	source scripts/localcluster/lib.sh
	lc_ensure_packages promtool:prometheus
fi
# files/alerts.yaml is a template of the values; deploy/render.sh renders it with the
# defaults to deploy/manifests/alerts.yaml (checked for drift below), the file tested here.
rules=deploy/manifests/alerts.yaml
if promtool check rules "$rules" >"$tmp/promtool-check.out" 2>&1; then
	pass "promtool check rules $rules: $(grep -o '[0-9]* rules found' "$tmp/promtool-check.out")"
else
	cat "$tmp/promtool-check.out" >&2
	fail "promtool check rules $rules (see above)"
fi
if promtool test rules deploy/test/monitoring/alerts_test.yaml >"$tmp/promtool-test.out" 2>&1; then
	pass "promtool test rules deploy/test/monitoring/alerts_test.yaml"
else
	cat "$tmp/promtool-test.out" >&2
	fail "promtool test rules deploy/test/monitoring/alerts_test.yaml (see above)"
fi
# Every alert has a unit test where it fires and one where it does not.
mapfile -t alerts < <(sed -n 's/^ *- alert: //p' "$rules")
check "files/alerts.yaml has alerts" test "${#alerts[@]}" -gt 0
for alert in "${alerts[@]}"; do
	check "alert $alert: a test where it fires and one where it does not" test "$(grep -c "alertname: $alert$" deploy/test/monitoring/alerts_test.yaml)" -ge 2
	check "alert $alert: docs/runbooks/$alert.md exists and starts with a heading naming it" \
		test "$(head -n 1 "docs/runbooks/$alert.md" 2>/dev/null)" = "# $alert"
	check "alert $alert: its runbook_url ends in /docs/runbooks/$alert.md" grep -q "runbook_url: .*/docs/runbooks/$alert\.md$" "$rules"
done
# spec_of KIND FILE: the spec of the KIND document in FILE, indentation removed.
spec_of() { docs "$1" <"$2" | sed -n '/^spec:$/,$p' | tail -n +2 | sed 's/^  //'; }
check "helm template with a PrometheusRule" render prometheusrule --set prometheusRule.enabled=true --set prometheusRule.labels.release=prom
check "the PrometheusRule's spec is the rules promtool tested" diff <(spec_of PrometheusRule "$tmp/prometheusrule.yaml") <(grep -v '^#' "$rules")
check "PrometheusRule: extra labels" matches "$(docs PrometheusRule <"$tmp/prometheusrule.yaml")" '^    release: prom$'
check_not "no PrometheusRule by default" grep -q '^kind: PrometheusRule' "$tmp/default.yaml"
check_not "a typo under prometheusRule is refused" render badrule --set prometheusRule.enable=true
# Values of the alerts: aggregation labels, thresholds, durations, runbook base.
check "helm template with other alert values" render rule-values --set prometheusRule.enabled=true \
	--set 'prometheusRule.aggregateBy={region,cluster}' --set-json prometheusRule.alerts.admissionLatencyHigh.p99Seconds=2.5 \
	--set prometheusRule.alerts.admissionLatencyHigh.for=15m --set prometheusRule.runbookBaseURL=https://wiki.example.com/runbooks/cksw
rv=$(spec_of PrometheusRule "$tmp/rule-values.yaml")
check "alerts aggregate by aggregateBy" test "$(grep -c 'by (region, cluster)' <<<"$rv")" -ge 13
check_not "alerts aggregate by nothing else" grep -q 'by (cluster, namespace)' <<<"$rv"
check "alert threshold and for: from the values" matches "$(tr -d '\n' <<<"$rv")" 'le\) \(rate\(custom_kube_scheduler_webhook_admission_duration_seconds_bucket\{webhook="mutate"\}\[5m\]\)\)\) +> 2.5 +for: 15m'
check "runbook_url from runbookBaseURL" test "$(grep -c 'runbook_url: https://wiki.example.com/runbooks/cksw/CustomKubeSchedulerWebhook[A-Za-z]*.md$' <<<"$rv")" -eq "${#alerts[@]}"
check "default runbook_url: this release's docs/runbooks" grep -q "runbook_url: https://github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/blob/v$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$CHART_DIR/Chart.yaml")/docs/runbooks/CustomKubeSchedulerWebhookNoReadyReplica.md$" "$rules"
if promtool check rules <(printf '%s\n' "$rv") >"$tmp/promtool-values.out" 2>&1; then pass "promtool check rules: the alerts with other values"; else
	cat "$tmp/promtool-values.out" >&2
	fail "promtool check rules: the alerts with other values"
fi
# Bad values are refused with a message that names them.
refused() { # WHAT PATTERN [helm args...]
	local what=$1 pattern=$2
	shift 2
	if render refused "$@"; then
		fail "$what is refused"
	elif grep -qE -- "$pattern" "$tmp/refused.err"; then
		pass "$what is refused: $(grep -oE -- "$pattern" "$tmp/refused.err" | head -1)"
	else
		cat "$tmp/refused.err" >&2
		fail "$what is refused with a message naming it"
	fi
}
refused "a malformed runbookBaseURL" "runbookBaseURL" --set prometheusRule.runbookBaseURL=wiki.example.com/runbooks
refused "a runbookBaseURL with a trailing slash" "runbookBaseURL" --set prometheusRule.runbookBaseURL=https://wiki.example.com/
refused "a negative threshold" "p99Seconds" --set prometheusRule.alerts.admissionLatencyHigh.p99Seconds=-1
refused "a percentage over 100" "percent" --set prometheusRule.alerts.peerClaimsFailing.percent=150
refused "a for: that is not a duration" "for" --set prometheusRule.alerts.termInFallback.for=soon
refused "an unknown scope" "scope" --set scope=everywhere
refused "an aggregation label that is not a label name" "aggregateBy" --set 'prometheusRule.aggregateBy={cluster-name}'
refused "a cost refresh interval that is not a duration" "interval" --set costMetrics.interval=often

echo "-- the Grafana dashboard"
dashboard=$CHART_DIR/files/dashboard.json
check "files/dashboard.json is JSON with panels" jq -e '.panels | length > 0' "$dashboard"
check "dashboard: a cluster variable (All matches series without the label)" jq -e '.templating.list | any(.name == "cluster" and .includeAll and .allValue == ".*")' "$dashboard"
# shellcheck disable=SC2016 # $cluster is the dashboard variable, matched literally
check "dashboard: every query filters by the cluster variable" test "$(jq -r '.. | .expr? // empty' "$dashboard" | grep -vc 'cluster=~"\$cluster"' || true)" -eq 0
check "helm template with the dashboard" render dashboard --set dashboards.enabled=true --set dashboards.namespace=monitoring \
	--set dashboards.annotations.grafana_folder=Platform
dcm=$(docs ConfigMap "$CHART_NAME-dashboard" <"$tmp/dashboard.yaml")
check "dashboard ConfigMap: grafana_dashboard label" matches "$dcm" '^    grafana_dashboard: "1"$'
check "dashboard ConfigMap: in dashboards.namespace" matches "$dcm" '^  namespace: monitoring$'
check "dashboard ConfigMap: annotations" matches "$dcm" '^    grafana_folder: Platform$'
check "dashboard ConfigMap: its JSON is files/dashboard.json" diff <(sed -n '/^  custom-kube-scheduler-webhook.json: |-$/,$p' <<<"$dcm" | tail -n +2 | sed 's/^    //') "$dashboard"
check_not "no dashboard by default" grep -q 'grafana_dashboard' "$tmp/default.yaml"
check_not "a typo under dashboards is refused" render baddash --set dashboards.enable=true
check_not "certMode=bogus is refused" render bad1 --set certMode=bogus
check_not "secret-provided without caBundle is refused" render bad2 --set certMode=secret-provided --set certs.existingSecret=x
check_not "logLevel outside the schema is refused" render bad3 --set logLevel=loud
check_not "timeoutSeconds above 30 is refused" render bad4 --set timeoutSeconds=31

d=$(cat "$tmp/default.yaml")
dep=$(docs Deployment <<<"$d")
mwc=$(docs MutatingWebhookConfiguration <<<"$d")
vwc=$(docs ValidatingWebhookConfiguration <<<"$d")
echo "-- default values: Deployment"
check "2 replicas" matches "$dep" '^  replicas: 2$'
check "runAsNonRoot" contains "$dep" "runAsNonRoot: true"
check "runs as 65532" contains "$dep" "runAsUser: 65532"
check "readOnlyRootFilesystem" contains "$dep" "readOnlyRootFilesystem: true"
check "no privilege escalation" contains "$dep" "allowPrivilegeEscalation: false"
check "drops ALL capabilities" matches "$dep" '^ +- ALL$'
check "seccomp RuntimeDefault" contains "$dep" "type: RuntimeDefault"
check "requests and limits" matches "$(tr -d '\n' <<<"$dep")" 'limits: +memory: 256Mi +requests: +cpu: 100m'
check "startup on the health port's /healthz" matches "$(tr -d '\n' <<<"$dep")" 'startupProbe: +httpGet: +path: /healthz +port: health'
check "liveness on the health port's /healthz" matches "$(tr -d '\n' <<<"$dep")" 'livenessProbe: +httpGet: +path: /healthz +port: health'
check "readiness on the health port's /readyz" matches "$(tr -d '\n' <<<"$dep")" 'readinessProbe: +httpGet: +path: /readyz +port: health'
check "container ports 9443 (https), 8080 (metrics), 8081 (health)" matches "$(tr -d '\n' <<<"$dep")" 'name: https +containerPort: 9443 +protocol: TCP +- name: metrics +containerPort: 8080 +protocol: TCP +- name: health +containerPort: 8081'
check "METRICS_ADDRESS :8080, HEALTH_ADDRESS :8081" matches "$(tr -d '\n' <<<"$dep")" 'name: METRICS_ADDRESS +value: ":8080" +- name: HEALTH_ADDRESS +value: ":8081"'
check_not "metricsPort equal to containerPort is refused" render badports --set metricsPort=9443
check_not "a typo under metrics is refused" render badmetrics --set metrics.serviceMonitor.enable=true
for env in LOG_LEVEL BLOCKLISTED_NAMESPACE_LIST LISTEN_ADDRESS TLS_CERT_FILE TLS_KEY_FILE POD_NAMESPACE \
	RESERVATION_TTL VALIDATION_MODE EKS_CLUSTER_NAME CERT_MODE CERT_SECRET_NAME \
	SERVICE_NAME MUTATING_WEBHOOK_CONFIGURATION VALIDATING_WEBHOOK_CONFIGURATION; do
	check "env $env" contains "$dep" "- name: $env"
done
check "POD_IP from the downward API (the peer address)" matches "$(tr -d '\n' <<<"$dep")" 'name: POD_IP +valueFrom: +fieldRef: +fieldPath: status.podIP'
check "GOGC 400 by default (gcPercent)" matches "$(tr -d '\n' <<<"$dep")" 'name: GOGC +value: "400"'
check "GOMEMLIMIT 75% of the 256Mi limit" matches "$(tr -d '\n' <<<"$dep")" 'name: GOMEMLIMIT +value: "192MiB"'
check "helm template --set resources.limits.memory=1Gi" render mem1gi --set resources.limits.memory=1Gi
check "GOMEMLIMIT 75% of a 1Gi limit" matches "$(tr -d '\n' <"$tmp/mem1gi.yaml")" 'name: GOMEMLIMIT +value: "768MiB"'
check "ADMISSION_DEADLINE below timeoutSeconds" matches "$(tr -d '\n' <<<"$dep")" 'ADMISSION_DEADLINE +value: "4000ms"'
check "BLOCKLISTED_NAMESPACE_LIST default" matches "$(tr -d '\n' <<<"$dep")" 'BLOCKLISTED_NAMESPACE_LIST +value: "kube-system,kube-public"'
check "POD_NAMESPACE from the downward API" matches "$(tr -d '\n' <<<"$dep")" 'POD_NAMESPACE +valueFrom: +fieldRef: +fieldPath: metadata.namespace'
check "CERT_MODE self" matches "$(tr -d '\n' <<<"$dep")" 'CERT_MODE +value: "self"'
check "zone spread" contains "$dep" "topologyKey: topology.kubernetes.io/zone"
check "hostname spread" contains "$dep" "topologyKey: kubernetes.io/hostname"
check "priority class system-cluster-critical by default" contains "$dep" "priorityClassName: system-cluster-critical"
check "no PriorityClass object by default" test "$(docs PriorityClass <<<"$d" | count_docs)" -eq 0
check "helm template --set priorityClassName= --set priorityClass.create=true" render own-pc --set priorityClassName= --set priorityClass.create=true
check "PriorityClass of the chart, as an option" matches "$(docs PriorityClass <"$tmp/own-pc.yaml")" '^value: 1000000$'
check "its pods use it" contains "$(docs Deployment <"$tmp/own-pc.yaml")" "priorityClassName: $CHART_NAME"
check "revisionHistoryLimit 5 and maxUnavailable 0 by default" matches "$(tr -d '\n' <<<"$dep")" 'revisionHistoryLimit: 5 .*strategy: +type: RollingUpdate +rollingUpdate: +maxSurge: 1 +maxUnavailable: 0'
check "helm template with the chart conventions (item 5 of issue 44)" render conventions \
	--set revisionHistoryLimit=2 --set-json 'updateStrategy={"type":"Recreate"}' \
	--set-json 'envFrom=[{"configMapRef":{"name":"cksw-settings"}}]' \
	--set-json 'sidecars=[{"name":"proxy","image":"example/proxy:1"}]' \
	--set dnsPolicy=Default --set-json 'dnsConfig={"options":[{"name":"ndots","value":"2"}]}' \
	--set webhookAnnotations.team=platform \
	--set validatingWebhook.failurePolicy=Fail --set validatingWebhook.timeoutSeconds=10
cdep=$(tr -d '\n' <<<"$(docs Deployment <"$tmp/conventions.yaml")")
check "revisionHistoryLimit and strategy from the values" matches "$cdep" 'revisionHistoryLimit: 2 .*strategy: +type: Recreate +template:'
check "envFrom on the webhook container" matches "$cdep" 'envFrom: +- configMapRef: +name: cksw-settings'
check "sidecar after the webhook container" matches "$cdep" 'containers: +- name: webhook .*- image: example/proxy:1 +name: proxy +volumes:'
check "dnsPolicy and dnsConfig" matches "$cdep" 'dnsPolicy: Default +dnsConfig: +options: +- name: ndots +value: "2"'
check "cost metrics off by default" matches "$(tr -d '\n' <<<"$dep")" 'name: COST_METRICS +value: "off"'
check "no price file by default" test "$(grep -c 'COST_PRICES_FILE' <<<"$dep")" -eq 0
check "helm template with cost metrics from a price-file ConfigMap" render cost \
	--set costMetrics.enabled=true --set costMetrics.interval=10m --set costMetrics.pricesConfigMap=cksw-prices \
	--set imageArchitectures.tagTTL=1m --set imageArchitectures.cacheSize=10 --set nodegroupRefreshInterval=1m
costdep=$(tr -d '\n' <<<"$(docs Deployment <"$tmp/cost.yaml")")
check "cost metrics on" matches "$costdep" 'name: COST_METRICS +value: "on"'
# Retired settings: the values are still accepted (existing values files install), and
# no longer reach the container.
check "retired values render nothing" test "$(grep -Ec 'COST_METRICS_INTERVAL|IMAGE_TAG_TTL|IMAGE_CACHE_SIZE|NODEGROUP_REFRESH_INTERVAL' <<<"$costdep")" -eq 0
check "the price file mounted from the ConfigMap" matches "$costdep" 'name: COST_PRICES_FILE +value: /etc/webhook/prices/prices .*name: prices +mountPath: /etc/webhook/prices +readOnly: true .*name: prices +configMap: +name: cksw-prices +items: +- key: prices +path: prices'
check "interruption signals off by default" test "$(grep -c 'INTERRUPTION_' <<<"$dep")" -eq 0
check "helm template with an interruption queue" render interruption \
	--set interruption.queue=https://sqs.eu-west-1.amazonaws.com/123456789012/cksw-signals --set interruption.window=5m \
	--set interruption.riskShare=30% --set interruption.riskMinNodes=3 --set interruption.moveSignalledNodes=true
intdep=$(tr -d '\n' <<<"$(docs Deployment <"$tmp/interruption.yaml")")
check "interruption settings from the values" matches "$intdep" 'name: INTERRUPTION_QUEUE +value: "https://sqs.eu-west-1.amazonaws.com/123456789012/cksw-signals" +- name: INTERRUPTION_WINDOW +value: "5m" +- name: INTERRUPTION_RISK_SHARE +value: "30%" +- name: INTERRUPTION_RISK_MIN_NODES +value: "3" +- name: INTERRUPTION_MOVE_SIGNALLED_NODES +value: "on"'
check_not "a risk share that is no percentage is refused" render badshare --set interruption.queue=q --set interruption.riskShare=0.5
cmw=$(docs MutatingWebhookConfiguration <"$tmp/conventions.yaml")
cvw=$(docs ValidatingWebhookConfiguration <"$tmp/conventions.yaml")
check "webhookAnnotations on both configurations" test "$(grep -c '^    team: platform$' <<<"$cmw$cvw")" -eq 2
check "validating webhook: its own failurePolicy (workloads x2 and policies; not-enabled stays Ignore)" test "$(grep -c 'failurePolicy: Fail' <<<"$cvw")" -eq 3
check "validating webhook: its own timeoutSeconds (every entry)" test "$(grep -c 'timeoutSeconds: 10' <<<"$cvw")" -eq 4
check "pod webhook keeps failurePolicy and timeoutSeconds" matches "$(tr -d '\n' <<<"$cmw")" 'failurePolicy: Ignore .*timeoutSeconds: 5 '
check_not "validatingWebhook.timeoutSeconds=60 is refused" render vwt --set validatingWebhook.timeoutSeconds=60
check_not "dnsPolicy=Bogus is refused" render dnsbad --set dnsPolicy=Bogus
check "PDB maxUnavailable 1 (never blocks a drain)" contains "$(docs PodDisruptionBudget <<<"$d")" "maxUnavailable: 1"
check_not "PDB: no minAvailable by default" contains "$(docs PodDisruptionBudget <<<"$d")" "minAvailable"
check "Service 443 -> https" matches "$(tr -d '\n' <<<"$(docs Service <<<"$d")")" 'port: 443 +targetPort: https'
check "Service 8080 -> metrics" matches "$(tr -d '\n' <<<"$(docs Service <<<"$d")")" 'name: metrics +port: 8080 +targetPort: metrics'
check "self mode: empty Secret created" matches "$(docs Secret <<<"$d")" '^type: Opaque$'
check_not "self mode: Secret carries no data" matches "$(docs Secret <<<"$d")" '^data:'

echo "-- default values: webhook configurations"
# No path: the webhook writes /<token>/mutate (admissiontoken.Endpoint names it by the
# entry), so neither Argo CD's nor Flux's diff nor helm upgrade sees or resets it.
check_not "webhooks: no clientConfig path rendered (the webhook owns it)" matches "$mwc$vwc" '^ +path:'
check "pods webhook: failurePolicy Ignore" contains "$mwc" "failurePolicy: Ignore"
check "pods webhook: timeoutSeconds 5" contains "$mwc" "timeoutSeconds: 5"
check "pods webhook: sideEffects NoneOnDryRun" contains "$mwc" "sideEffects: NoneOnDryRun"
check "workloads webhook: sideEffects NoneOnDryRun" contains "$vwc" "sideEffects: NoneOnDryRun"
check_not "no webhook claims sideEffects None" matches "$d" 'sideEffects: None$'
check "Karpenter's namespace excluded by default" matches "$(tr -d '\n' <<<"$mwc")" "operator: NotIn +values: +- $NS +- kube-system +- karpenter"
check "pods webhook: CREATE only" contains "$mwc" 'operations: ["CREATE"]'
check "pods webhook: pods only" contains "$mwc" 'resources: ["pods"]'
check "pods webhook: admissionReviewVersions v1" contains "$mwc" 'admissionReviewVersions: ["v1"]'
check "pods webhook: reinvocationPolicy Never" contains "$mwc" "reinvocationPolicy: Never"
check "pods webhook: own namespace and kube-system excluded" matches "$(tr -d '\n' <<<"$mwc")" "key: kubernetes.io/metadata.name +operator: NotIn +values: +- $NS +- kube-system"
check "pods webhook: objectSelector" contains "$mwc" "objectSelector:"
check "pods webhook: skips seated pods" contains "$mwc" "'custom-kube-scheduler-webhook.io/seat' in object.metadata.annotations"
check "pods webhook: skips DaemonSet pods" contains "$mwc" "r.kind == 'DaemonSet'"
check "pods webhook: skips mirror pods" contains "$mwc" "kubernetes.io/config.mirror"
check "workloads webhook: failurePolicy Ignore" contains "$vwc" "failurePolicy: Ignore"
check "workloads webhook: CREATE and UPDATE" contains "$vwc" 'operations: ["CREATE", "UPDATE"]'
check "workloads webhook: deployments, statefulsets, replicasets" contains "$vwc" 'resources: ["deployments", "statefulsets", "replicasets"]'
check "workloads webhook: only objects with a strategy" contains "$vwc" "'custom-pod-schedule-strategy' in object.spec.template.metadata.annotations"
check "workloads webhook: Argo Rollouts" matches "$(tr -d '\n' <<<"$vwc")" 'apiGroups: \["argoproj.io"\] +apiVersions: \["v1alpha1"\] +operations: \["CREATE", "UPDATE"\] +resources: \["rollouts"\]'
check "workloads webhook: Jobs and CronJobs (an invalid strategy warned)" matches "$(tr -d '\n' <<<"$vwc")" 'apiGroups: \["batch"\] +apiVersions: \["v1"\] +operations: \["CREATE", "UPDATE"\] +resources: \["jobs", "cronjobs"\]'
check "workloads webhook: a CronJob's job and pod templates carry a strategy too" contains "$vwc" "'CustomPodScheduleStrategy' in object.spec.jobTemplate.spec.template.metadata.annotations"
check "workloads webhook: a CronJob's own Jobs are not sent" contains "$vwc" "name: not-a-cronjob-job"
check_not "self mode: no static caBundle" contains "$mwc$vwc" "caBundle"

# scope opt-in by default: either label; a namespaceSelector ANDs its terms, so two
# entries with disjoint selectors (a namespace with both labels is sent once).
sel_on='namespaceSelector: +matchExpressions: +- key: kubernetes.io/metadata.name +operator: NotIn +values: +- '"$NS"' +- kube-system.* +- key: custom-kube-scheduler-webhook.io/enabled +operator: In +values: +- "true"'
sel_orig='namespaceSelector: +matchExpressions: +- key: kubernetes.io/metadata.name +operator: NotIn +values: +- '"$NS"' +- kube-system.* +- key: custom-kube-scheduler-webhook +operator: In +values: +- enabled +- key: custom-kube-scheduler-webhook.io/enabled +operator: NotIn +values: +- "true"'
for kind in pods workloads; do
	doc=$mwc
	[[ $kind == workloads ]] && doc=$vwc
	flat=$(tr -d '\n' <<<"$doc")
	check "scope opt-in by default: $kind webhook sends namespaces labelled custom-kube-scheduler-webhook.io/enabled=true" matches "$flat" \
		"- name: $kind.custom-kube-scheduler-webhook.io .*$sel_on"
	check "scope opt-in by default: $kind webhook sends namespaces labelled custom-kube-scheduler-webhook=enabled (and not the other)" matches "$flat" \
		"- name: original-label.$kind.custom-kube-scheduler-webhook.io .*$sel_orig"
done
check "scope opt-in: two pod webhook entries" test "$(grep -c -- '- name: .*pods.custom-kube-scheduler-webhook.io' <<<"$mwc")" -eq 2
nev=$(tr -d '\n' <<<"$(awk '/- name: not-enabled.workloads/,0' <<<"$vwc")")
check "scope opt-in: annotated workloads of other namespaces are sent to the not-enabled entry (admissiontoken.NotEnabledPrefix: /<token>/not-enabled)" matches "$nev" \
	'failurePolicy: Ignore.*sideEffects: NoneOnDryRun.*key: custom-kube-scheduler-webhook.io/enabled +operator: NotIn +values: +- "true" +- key: custom-kube-scheduler-webhook +operator: NotIn +values: +- enabled.*- name: has-strategy'
check "helm template --set scope=all" render scope-all --set scope=all
for kind in MutatingWebhookConfiguration ValidatingWebhookConfiguration; do
	all=$(docs "$kind" <"$tmp/scope-all.yaml")
	check_not "scope all: $kind requires no namespace label" matches "$all" 'key: custom-kube-scheduler-webhook(\.io/enabled)?$'
	# The validating configuration also has the policies entry, whatever the scope.
	want=1
	[[ $kind == ValidatingWebhookConfiguration ]] && want=2
	check "scope all: $kind has $want entries, exclusions kept" test "$(grep -c '^  - name:' <<<"$all")" -eq "$want"
done
check "helm template --set scope=opt-in --set matchConditions=false" render optin-nomc --set scope=opt-in --set matchConditions=false
check_not "without matchConditions, no not-enabled entry (it would see every workload write)" contains "$(cat "$tmp/optin-nomc.yaml")" "not-enabled.workloads"
check_not "scope=everything is refused" render bad-scope --set scope=everything

echo "-- the fleet: deploy/examples/applicationset.yaml rendered for three clusters"
# deploy/test/applicationset_test.go renders the ApplicationSet's template as Argo CD's
# cluster generator does (goTemplate) and writes each cluster's Helm values; the chart
# must render with each, and the per-cluster values land in the Deployment.
mkdir -p "$tmp/appset"
check "the ApplicationSet renders an Application per cluster (go test -run TestApplicationSetRendersPerCluster)" \
	env APPSET_OUT="$tmp/appset" go test -count=1 -run TestApplicationSetRendersPerCluster ./deploy/test/
for f in "$tmp"/appset/*.yaml; do
	c=$(basename "$f" .yaml)
	if check "helm template with cluster $c's values" render "appset-$c" -f "$f"; then
		appdep=$(tr -d '\n' <<<"$(docs Deployment <"$tmp/appset-$c.yaml")")
		check "cluster $c: EKS_CLUSTER_NAME is $c" matches "$appdep" "name: EKS_CLUSTER_NAME +value: \"$c\""
		check "cluster $c: its IAM role on the ServiceAccount" matches "$(docs ServiceAccount <"$tmp/appset-$c.yaml")" "eks.amazonaws.com/role-arn: arn:aws:iam::[0-9]+:role/"
	fi
done
check "three clusters rendered" test "$(find "$tmp/appset" -name '*.yaml' | wc -l)" -eq 3

echo "-- node affinity, Service annotations, extra volumes"
check "default affinity: soft preference for managed node groups" matches "$(tr -d '\n' <<<"$dep")" \
	'preferredDuringSchedulingIgnoredDuringExecution: +- preference: +matchExpressions: +- key: eks.amazonaws.com/nodegroup +operator: Exists +weight: 100'
check "default affinity: soft preference for on-demand Karpenter nodes" matches "$(tr -d '\n' <<<"$dep")" \
	'- key: karpenter.sh/capacity-type +operator: In +values: +- on-demand +weight: 50'
check_not "default affinity: nothing required" contains "$dep" "requiredDuringScheduling"
check_not "default Service: no annotations" matches "$(docs Service <<<"$d")" '^  annotations:'
documented=$(cat "$tmp/documented.yaml")
ddep=$(docs Deployment <<<"$documented")
check "documented: hard affinity off Karpenter's nodes, soft terms dropped" matches "$(tr -d '\n' <<<"$ddep")" \
	'affinity: +nodeAffinity: +requiredDuringSchedulingIgnoredDuringExecution: +nodeSelectorTerms: +- matchExpressions: +- key: karpenter.sh/nodepool +operator: DoesNotExist'
check_not "documented: no soft affinity left" contains "$ddep" "preferredDuringScheduling"
check "documented: Service annotations" matches "$(docs Service <<<"$documented")" '^    prometheus.io/scrape: "true"$'
check "documented: CA bundle volume from its ConfigMap" matches "$(tr -d '\n' <<<"$ddep")" 'configMap: +name: corporate-ca-bundle +name: corporate-ca'
check "documented: CA bundle mounted read-only" matches "$(tr -d '\n' <<<"$ddep")" '- mountPath: /etc/corporate-ca +name: corporate-ca +readOnly: true'
check "documented: the chart's own volumes kept" matches "$(tr -d '\n' <<<"$ddep")" 'mountPath: /etc/webhook/certs.*mountPath: /tmp.*mountPath: /etc/corporate-ca'
check "documented: SSL_CERT_DIR names the CA bundle" contains "$ddep" 'value: /etc/ssl/certs:/etc/corporate-ca'
check_not "typo service.anotations is refused" render bad-svc --set service.anotations.x=y
check_not "typo extraVolume is refused" render bad-vol --set 'extraVolume[0].name=x'
check_not "extraVolumeMounts without mountPath is refused" render bad-mount --set 'extraVolumeMounts[0].name=x'

echo "-- default values: RBAC"
cr=$(docs ClusterRole <<<"$d")
role=$(docs Role <<<"$d")
check_not "no ClusterRole rule on secrets" contains "$cr" '"secrets"'
check_not "no wildcard in any rule" matches "$cr$role" '"\*"'
check "imageArchitectures.pullSecrets: get on secrets and serviceaccounts, nothing more" render pull-secrets --set imageArchitectures.pullSecrets=true
pcr=$(docs ClusterRole <"$tmp/pull-secrets.yaml")
check "imageArchitectures.pullSecrets: the rule" matches "$(tr -d '\n' <<<"$pcr")" 'resources: \["secrets", "serviceaccounts"\] +verbs: \["get"\]'
check "imageArchitectures.pullSecrets: IMAGE_PULL_SECRETS on" matches "$(tr -d '\n' <"$tmp/pull-secrets.yaml")" 'name: IMAGE_PULL_SECRETS +value: "on"'
check_not "no delete verb cluster-wide" contains "$cr" '"delete"'
check_not "never bound to cluster-admin" contains "$d" "name: cluster-admin"
check "pods/nodes list+watch" matches "$(tr -d '\n' <<<"$cr")" 'resources: \["pods", "nodes"\] +verbs: \["list", "watch"\]'
check "nodepools list+watch" matches "$(tr -d '\n' <<<"$cr")" 'apiGroups: \["karpenter.sh"\] +resources: \["nodepools"\] +verbs: \["list", "watch"\]'
check "Argo Rollouts get+list+watch" matches "$(tr -d '\n' <<<"$cr")" 'apiGroups: \["argoproj.io"\] +resources: \["rollouts"\] +verbs: \["get", "list", "watch"\]'
check_not "no LEDGER (one ledger remains)" contains "$dep" "LEDGER"
check "leases in its own namespace (Role, not ClusterRole)" matches "$(tr -d '\n' <<<"$role")" 'resources: \["leases"\] +verbs: \["get", "list", "watch", "create", "update", "delete"\]'
check_not "no ClusterRole rule on leases" contains "$cr" '"leases"'
check "own Secret by resourceNames" matches "$(tr -d '\n' <<<"$role")" "resources: \[\"secrets\"\] +resourceNames: \[\"$CHART_NAME-certs\"\]"
check "own webhook configurations by resourceNames" matches "$(tr -d '\n' <<<"$cr")" "webhookconfigurations\"\] +resourceNames: \[\"$CHART_NAME\"\]"
check "convergence loop on by default" matches "$(tr -d '\n' <<<"$dep")" 'CONVERGE +value: "on"'
check "loop watches NodeClaims (what Karpenter is launching)" matches "$(tr -d '\n' <<<"$cr")" 'apiGroups: \["karpenter.sh"\] +resources: \["nodeclaims"\] +verbs: \["list", "watch"\]'
check "loop evicts (pods/eviction create), never deletes pods" matches "$(tr -d '\n' <<<"$cr")" 'resources: \["pods/eviction"\] +verbs: \["create"\]'

echo "-- cert-manager"
cm=$(cat "$tmp/cert-manager.yaml")
check "self-signed Issuer and CA Issuer" test "$(docs Issuer <<<"$cm" | count_docs)" -eq 2
check "CA and serving Certificate" test "$(docs Certificate <<<"$cm" | count_docs)" -eq 2
check "CA Certificate isCA" contains "$(docs Certificate "$CHART_NAME-ca" <<<"$cm")" "isCA: true"
check "serving cert for the Service" contains "$(docs Certificate "$CHART_NAME" <<<"$cm")" "- $CHART_NAME.$NS.svc"
check "inject-ca-from on the mutating configuration" contains "$(docs MutatingWebhookConfiguration <<<"$cm")" "cert-manager.io/inject-ca-from: $NS/$CHART_NAME"
check "validating webhook can be turned off" test -z "$(docs ValidatingWebhookConfiguration <<<"$cm")"
check "matchConditions can be turned off" test -z "$(grep matchConditions <<<"$cm" || true)"
check "with cert-manager, secret RBAC for the admission token only" test "$(grep -A2 -F '"secrets"' <<<"$cm" | tr -d '\n' | tr -s ' ')" = ' resources: ["secrets"] resourceNames: ["'"$CHART_NAME"'-admission-token"] verbs: ["get", "update"]'
check "admission token Secret and setting" contains "$(tr -d '\n' <<<"$cm")" "ADMISSION_TOKEN_SECRET              value: \"$CHART_NAME-admission-token\""
check "with cert-manager, webhook-configuration RBAC for its own two by name only (the admission token's path)" test "$(grep -B1 -A1 -F 'webhookconfigurations' <<<"$cm" | grep -c 'resourceNames: \["'"$CHART_NAME"'"\]')" -ge 1
check "CERT_MODE file with cert-manager" matches "$(tr -d '\n' <<<"$cm")" 'CERT_MODE +value: "file"'
check "Namespace object when namespace.create" test "$(docs Namespace <<<"$cm" | count_docs)" -eq 1
ci=$(cat "$tmp/cert-manager-issuer.yaml")
check "existing ClusterIssuer: no chart Issuers" test "$(docs Issuer <<<"$ci" | count_docs)" -eq 0
check "existing ClusterIssuer referenced" matches "$(tr -d '\n' <<<"$(docs Certificate <<<"$ci")")" 'issuerRef: +group: cert-manager.io +kind: ClusterIssuer +name: internal-ca'
check "inject-ca-from on the validating configuration" contains "$(docs ValidatingWebhookConfiguration <<<"$ci")" "cert-manager.io/inject-ca-from: $NS/$CHART_NAME"
check "custom serving Secret mounted" contains "$(docs Deployment <<<"$ci")" "secretName: webhook-serving-cert"

echo "-- secret-provided"
sp=$(cat "$tmp/secret-provided.yaml")
check "caBundle on every webhook entry (6 with scope opt-in: pods x2, workloads x2, not-enabled, policies)" test "$(grep -c 'caBundle: LS0t' <<<"$sp")" -eq 6
check "existing Secret mounted" contains "$(docs Deployment <<<"$sp")" "secretName: my-webhook-tls"
check "no ServiceAccount when create=false" test "$(docs ServiceAccount <<<"$sp" | count_docs)" -eq 0
check "no PDB when disabled" test "$(docs PodDisruptionBudget <<<"$sp" | count_docs)" -eq 0

echo "-- non-default values"
nd=$(cat "$tmp/nondefault-self.yaml")
ndd=$(tr -d '\n' <<<"$(docs Deployment <<<"$nd")")
check "metricsPort and healthPort follow" matches "$ndd" 'name: METRICS_ADDRESS +value: ":9090" +- name: HEALTH_ADDRESS +value: ":9091"'
check "the Service's metrics port follows metricsPort" matches "$(tr -d '\n' <<<"$(docs Service <<<"$nd")")" 'name: metrics +port: 9090 +targetPort: metrics'
check "values file: the dashboard ConfigMap" matches "$(docs ConfigMap cksw-dashboard <<<"$nd")" '^    grafana_dashboard: "1"$'
check "fullnameOverride" contains "$nd" "name: cksw"
check "image by digest" contains "$nd" 'image: "123456789012.dkr.ecr.eu-west-1.amazonaws.com/custom-kube-scheduler-webhook@sha256:0000000000000000000000000000000000000000000000000000000000000001"'
pin=sha256:00000000000000000000000000000000000000000000000000000000000000ab
check "helm template with image.tag and image.digest" render tagdigest --set image.tag=1.2.3 --set image.digest=$pin
check "tag and digest: repo:tag@digest (the tag for people, the digest pins)" contains "$(cat "$tmp/tagdigest.yaml")" "image: \"$RENDER_IMAGE_REPOSITORY:1.2.3@$pin\""
check "every image of the chart is pinned when a digest is set" test "$(grep -cE '^ +image: ' "$tmp/tagdigest.yaml")" -eq "$(grep -cE "^ +image: \".*@$pin\"$" "$tmp/tagdigest.yaml")"
check "digest alone: repo@digest" render digestonly --set image.digest=$pin
check "digest alone renders repo@digest" contains "$(cat "$tmp/digestonly.yaml")" "image: \"$RENDER_IMAGE_REPOSITORY@$pin\""
check_not "a digest that is not sha256:<64 hex> is refused" render baddigest --set image.digest=latest
check "IRSA role annotation" contains "$(docs ServiceAccount <<<"$nd")" "eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/custom-kube-scheduler-webhook"
check "EKS cluster name" matches "$ndd" 'EKS_CLUSTER_NAME +value: "prod-eu-west-1"'
check "AWS region" matches "$ndd" 'AWS_REGION +value: "eu-west-1"'
check "log level" matches "$ndd" 'LOG_LEVEL +value: "debug"'
check "validation mode" matches "$ndd" 'VALIDATION_MODE +value: "warn"'
check "blocklist" matches "$ndd" 'BLOCKLISTED_NAMESPACE_LIST +value: "kube-system,kube-public,kube-node-lease,monitoring"'
check "blocklist left out of namespaceSelector" matches "$(tr -d '\n' <<<"$(docs MutatingWebhookConfiguration <<<"$nd")")" '- kube-node-lease +- monitoring'
check "user namespaceSelector kept" contains "$nd" "custom-kube-scheduler-webhook.io/enabled: \"true\""
check "timeoutSeconds 3 on the three webhooks" test "$(grep -c 'timeoutSeconds: 3' <<<"$nd")" -eq 3
check "objectSelector dropped with null" test -z "$(grep objectSelector <<<"$nd" || true)"
check "given priorityClassName, no PriorityClass" test "$(docs PriorityClass <<<"$nd" | count_docs)" -eq 0
check "priorityClassName" contains "$nd" "priorityClassName: system-cluster-critical"
check "3 replicas" matches "$ndd" 'replicas: 3'
check "PDB minAvailable 2 (below replicas)" contains "$(docs PodDisruptionBudget <<<"$nd")" "minAvailable: 2"
check "nodeSelector" contains "$nd" "karpenter.sh/capacity-type: on-demand"
check "hostNetwork" matches "$ndd" 'hostNetwork: true +dnsPolicy: ClusterFirstWithHostNet'
check "containerPort 10260 and listen address follow" matches "$ndd" 'LISTEN_ADDRESS +value: ":10260"'
check "extra Role rules" matches "$(tr -d '\n' <<<"$(docs Role <<<"$nd")")" 'resourceNames: +- cksw-extra'
check "seat records: lease rule with non-default values too" matches "$(tr -d '\n' <<<"$(docs Role <<<"$nd")")" 'resources: \["leases"\]'
check "loop off: no eviction rule" test -z "$(grep -F 'pods/eviction' <<<"$nd" || true)"
check "converge settings follow" matches "$ndd" 'CONVERGE +value: "off" +- name: FALLBACK_AFTER +value: "90s" +- name: FALLBACK_COOLDOWN +value: "10m" +- name: CONVERGE_MAX_UNAVAILABLE +value: "2"'

echo "-- risky combinations, drain, limits, NetworkPolicy"
check_not "installing into kube-system is refused" helm_template "$CHART_NAME" kube-system
check_not "failurePolicy=Fail without karpenterNamespace is refused" render bad5 --set failurePolicy=Fail --set karpenterNamespace=
check_not "failurePolicy=Fail with 1 replica is refused" render bad6 --set failurePolicy=Fail --set replicas=1
check_not "failurePolicy=Fail without the PDB is refused" render bad7 --set failurePolicy=Fail --set podDisruptionBudget.enabled=false
check "failurePolicy=Fail with the defaults renders" render fail --set failurePolicy=Fail
check "failurePolicy=Fail renders Fail" contains "$(cat "$tmp/fail.yaml")" "failurePolicy: Fail"
check_not "PDB minAvailable >= replicas is refused" render bad8 --set replicas=1 --set podDisruptionBudget.minAvailable=1
check "replicas 1: the PDB still allows one eviction" render one --set replicas=1
check "replicas 1: maxUnavailable 1" contains "$(docs PodDisruptionBudget <"$tmp/one.yaml")" "maxUnavailable: 1"
check "karpenterNamespace=kube-system renders" render ks --set karpenterNamespace=kube-system
check_not "grace period shorter than drain + timeout is refused" render bad9 --set terminationGracePeriodSeconds=15
check "SHUTDOWN_DRAIN from shutdownDrainSeconds" matches "$(tr -d '\n' <<<"$dep")" 'SHUTDOWN_DRAIN +value: "10s"'
check "terminationGracePeriodSeconds 30" contains "$dep" "terminationGracePeriodSeconds: 30"
check "MAX_INFLIGHT_ADMISSIONS" matches "$(tr -d '\n' <<<"$dep")" 'MAX_INFLIGHT_ADMISSIONS +value: "256"'
check "MAX_INFLIGHT_BODY_BYTES" matches "$(tr -d '\n' <<<"$dep")" 'MAX_INFLIGHT_BODY_BYTES +value: "24Mi"'
check_not "no NetworkPolicy by default" grep -q '^kind: NetworkPolicy' "$tmp/default.yaml"
check_not "NetworkPolicy without apiServerCIDRs is refused" render bad10 --set networkPolicy.enabled=true
check "NetworkPolicy renders" render netpol --set networkPolicy.enabled=true --set 'networkPolicy.apiServerCIDRs={10.0.0.0/16,10.1.0.0/16}' \
	--set-json 'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]'
np=$(tr -d '\n' <<<"$(docs NetworkPolicy <"$tmp/netpol.yaml")")
check "NetworkPolicy: ingress only" contains "$np" 'policyTypes: ["Ingress"]'
check "NetworkPolicy: the API server's CIDRs" matches "$np" 'ipBlock: +cidr: "10.0.0.0/16" +- ipBlock: +cidr: "10.1.0.0/16"'
check "NetworkPolicy: metrics peers, to the metrics port only" matches "$np" 'port: 9443 +- from: +- namespaceSelector: +matchLabels: +kubernetes.io/metadata.name: monitoring +ports: +- protocol: TCP +port: 8080$'
check "NetworkPolicy: the webhook's own replicas (forwarded seat claims)" matches "$np" 'podSelector: +matchLabels: +app.kubernetes.io/name: custom-kube-scheduler-webhook +app.kubernetes.io/instance: [a-z0-9-]+ +ports: +- protocol: TCP +port: 9443'

check "NetworkPolicy: the container port" matches "$np" 'ports: +- protocol: TCP +port: 9443'

nf=$(cat "$tmp/networkpolicy-fail.yaml")
check "values file: NetworkPolicy with the subnets" matches "$(tr -d '\n' <<<"$(docs NetworkPolicy <<<"$nf")")" 'cidr: "192.168.0.0/19" +- ipBlock: +cidr: "192.168.32.0/19"'
# Every entry but not-enabled.workloads, which only warns.
check "values file: failurePolicy Fail on every webhook entry but not-enabled" test "$(grep -c 'failurePolicy: Fail' <<<"$nf")" -eq 5
check "values file: PDB minAvailable 2 of 3" contains "$(docs PodDisruptionBudget <<<"$nf")" "minAvailable: 2"
check "values file: drain 15s" matches "$(tr -d '\n' <<<"$(docs Deployment <<<"$nf")")" 'SHUTDOWN_DRAIN +value: "15s"'

echo "== policy CRDs drift"
# The chart's CRDs are what controller-gen (pinned in scripts/tools/go.mod) makes of
# api/v1alpha1: `make generate` refreshes them.
crds_current() {
	go tool -modfile=scripts/tools/go.mod controller-gen crd:crdVersions=v1 paths=./api/... output:crd:dir="$tmp/crds" &&
		diff -r "$tmp/crds" "$CHART_DIR/files/crds"
}
check "files/crds matches api/v1alpha1 (make generate)" crds_current
check "the CRDs render as templates (helm upgrade updates them)" test "$(docs CustomResourceDefinition <"$tmp/default.yaml" | grep -c '^kind: CustomResourceDefinition$')" -eq 2
check "the CRDs are kept by default (helm uninstall leaves the policies)" test "$(grep -c 'helm.sh/resource-policy: keep' "$tmp/default.yaml")" -eq 2
check "helm template --set crds.keep=false" render crds-not-kept --set crds.keep=false
check_not "crds.keep=false: no keep annotation (helm uninstall leaves nothing)" contains "$(cat "$tmp/crds-not-kept.yaml")" 'helm.sh/resource-policy'
check "ClusterRole: policies list+watch" matches "$(tr -d '\n' <"$tmp/default.yaml")" 'resources: \["placementpolicies", "clusterplacementpolicies"\] +verbs: \["list", "watch"\]'
check "ClusterRole: namespaces list+watch" matches "$(tr -d '\n' <"$tmp/default.yaml")" 'resources: \["namespaces"\] +verbs: \["list", "watch"\]'

echo "== deploy/manifests drift"
check "deploy/manifests matches the chart (deploy/render.sh --check)" deploy/render.sh --check

echo "== Dockerfile"
df=$(cat Dockerfile)
gomod_go=$(awk '$1 == "go" {print $2}' go.mod)
check "builder: the golang image of go.mod's Go ($gomod_go), pinned" matches "$df" "^ARG BUILDER_IMAGE=docker\.io/library/golang:${gomod_go//./\\.}-bookworm$"
# shellcheck disable=SC2016 # literal Dockerfile text
check "builder on BUILDPLATFORM" matches "$df" '^FROM --platform=\$BUILDPLATFORM \$\{BUILDER_IMAGE\} AS build$'
check "runtime distroless static nonroot pinned by digest" matches "$df" '^ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:[0-9a-f]{64}$'
# shellcheck disable=SC2016 # literal Dockerfile text
check "runtime from RUNTIME_IMAGE" matches "$df" '^FROM \$\{RUNTIME_IMAGE\}$'
check "no unpinned FROM" test -z "$(grep -E '^FROM [^$ -]+:latest' Dockerfile || true)"
check "vendored modules: no network in the build" contains "$df" "GOFLAGS=-mod=vendor GOPROXY=off"
# shellcheck disable=SC2016 # literal Dockerfile text
check "version, revision and date into the binary" contains "$df" '-X main.version=${VERSION} -X main.revision=${REVISION} -X main.buildDate=${BUILD_DATE}'
# shellcheck disable=SC2016,SC1003 # literal Dockerfile text; tr deletes newlines and backslashes
check "labels carry version and revision" matches "$(tr -d '\n\\' <<<"$df")" 'org.opencontainers.image.version="\$\{VERSION\}" +org.opencontainers.image.revision="\$\{REVISION\}"'
check "CGO disabled" contains "$df" "CGO_ENABLED=0"
# shellcheck disable=SC2016 # literal Dockerfile text
check "cross-compiles with TARGETOS/TARGETARCH" contains "$df" 'GOOS=$TARGETOS GOARCH=$TARGETARCH'
check "go build -trimpath -ldflags \"-s -w ...\"" contains "$df" 'go build -trimpath -ldflags "-s -w '
check "builds ./cmd/custom-kube-scheduler-webhook" matches "$df" 'go build .* \./cmd/custom-kube-scheduler-webhook$'
check "USER 65532" matches "$df" '^USER 65532(:65532)?$'
check "ENTRYPOINT is the binary" matches "$df" '^ENTRYPOINT \["/usr/local/bin/custom-kube-scheduler-webhook"\]$'
check "serve by default" matches "$df" '^CMD \["serve"\]$'
check ".dockerignore keeps .git out" matches "$(cat .dockerignore)" '^\.git$'
# BuildKit's lint rules (those of `docker build --check`), from the small module in
# deploy/test/dockerfile-lint; hadolint too where it happens to be installed.
if (cd deploy/test/dockerfile-lint && go build -o "$tmp/dockerfile-lint" .); then
	check "BuildKit lint rules: Dockerfile" "$tmp/dockerfile-lint" Dockerfile
	printf 'FROM golang:1 as Build\nCMD echo hi\n' >"$tmp/Dockerfile.bad"
	check_not "BuildKit lint rules catch a bad Dockerfile" "$tmp/dockerfile-lint" "$tmp/Dockerfile.bad"
else
	fail "building deploy/test/dockerfile-lint"
fi
if command -v hadolint >/dev/null 2>&1; then
	check "hadolint Dockerfile" hadolint Dockerfile
fi

echo "== build_and_push.sh --dry-run"
# aws and docker on PATH only record that they were called: a dry run must call neither.
mkdir -p "$tmp/fakebin"
for tool in aws docker; do
	printf '#!/bin/sh\necho "%s $*" >>"%s/called"\nexit 1\n' "$tool" "$tmp" >"$tmp/fakebin/$tool"
	chmod +x "$tmp/fakebin/$tool"
done
sha=$(git rev-parse HEAD | cut -c1-12)
out=$(PATH="$tmp/fakebin:$PATH" AWS_ACCOUNT_ID=123456789012 AWS_REGION=eu-west-1 env -u AWS_ENDPOINT_URL_ECR ./build_and_push.sh --dry-run --version 1.2.3 2>&1) ||
	fail "build_and_push.sh --dry-run exited non-zero"
reg=123456789012.dkr.ecr.eu-west-1.amazonaws.com
img=$reg/custom-kube-scheduler-webhook
check "no aws/docker call in dry run" test ! -e "$tmp/called"
check "describes the ECR repository (its tag mutability), in the account given" matches "$out" "^\+ aws ecr describe-repositories --repository-names custom-kube-scheduler-webhook --registry-id 123456789012 .*--region eu-west-1$"
check "creates it with scan on push, immutable tags and AES256" matches "$out" "^\+ aws ecr create-repository --repository-name custom-kube-scheduler-webhook --registry-id 123456789012 --image-scanning-configuration scanOnPush=true --image-tag-mutability IMMUTABLE --encryption-configuration encryptionType=AES256 .*--region eu-west-1$"
check "looks for the tags to push before building (immutable tags)" matches "$out" "^\+ aws ecr batch-get-image --repository-name custom-kube-scheduler-webhook --registry-id 123456789012 --image-ids imageTag=$sha(-dirty)? imageTag=1\.2\.3 .*--region eu-west-1$"
check "gets the authorization token: host and password" matches "$out" "^\+ aws ecr get-authorization-token --registry-ids 123456789012 --query 'authorizationData\[0\]\.\[proxyEndpoint,authorizationToken\]' --output text --region eu-west-1$"
check "logs in with the token's password, through a pipe" contains "$out" "+ <the token's password> | docker login --username AWS --password-stdin $reg"
check "ECR calls, in order: describe, create, tags, token" test "$(sed -n 's/^+ aws ecr \([a-z-]*\) .*/\1/p' <<<"$out" | paste -sd' ')" = "describe-repositories create-repository batch-get-image get-authorization-token"
check_not "no --endpoint-url unless asked" contains "$out" "--endpoint-url"
check "vendors the modules into the context" contains "$out" "go mod vendor"
check "buildx multi-arch build" matches "$out" "^\+ docker buildx build .*--platform linux/amd64,linux/arm64 "
check "pushes both tags, the git SHA and the version" matches "$out" "name=$img:$sha(-dirty)?,$img:1\.2\.3.*push=true"
check "version and revision as build args" matches "$out" "--build-arg VERSION=1\.2\.3 --build-arg REVISION=[0-9a-f]{40} "
check "says it would push" matches "$out" "^Dry run: would push $img:$sha(-dirty)? and $img:1\.2\.3$"
check_not "never says Pushed in a dry run" contains "$out" "Pushed"
out=$(PATH="$tmp/fakebin:$PATH" env -u AWS_ACCOUNT_ID -u AWS_REGION -u AWS_DEFAULT_REGION ./build_and_push.sh --dry-run 2>&1) ||
	fail "build_and_push.sh --dry-run without account/region exited non-zero"
check_not "no sts call: the registry host comes from ECR's token" contains "$out" "aws sts"
check_not "no account given: ECR's default registry" contains "$out" "--registry-id"
check "no account given: the dry run's stand-in host" contains "$out" "--password-stdin <account-id>.dkr.ecr.<region>.amazonaws.com"
check "region from aws configure in dry run" contains "$out" "+ aws configure get region"
check "version from the VERSION file" contains "$out" ":$(<VERSION)"
out=$(PATH="$tmp/fakebin:$PATH" AWS_ENDPOINT_URL_ECR=http://127.0.0.1:1 ./build_and_push.sh --dry-run --region us-east-1 --version 1.2.3 2>&1) ||
	fail "build_and_push.sh --dry-run with AWS_ENDPOINT_URL_ECR exited non-zero"
check "AWS_ENDPOINT_URL_ECR: --endpoint-url on all 4 ECR calls" test "$(grep -c '^+ aws ecr .* --endpoint-url http://127\.0\.0\.1:1$' <<<"$out")" -eq 4
out=$(PATH="$tmp/fakebin:$PATH" AWS_ENDPOINT_URL_ECR=http://127.0.0.1:1 ./build_and_push.sh --dry-run --region us-east-1 --ecr-endpoint-url https://ecr.example --version 1.2.3 2>&1) ||
	fail "build_and_push.sh --dry-run --ecr-endpoint-url exited non-zero"
check "--ecr-endpoint-url wins over AWS_ENDPOINT_URL_ECR" test "$(grep -c '^+ aws ecr .* --endpoint-url https://ecr\.example$' <<<"$out")" -eq 4
out=$(PATH="$tmp/fakebin:$PATH" ./build_and_push.sh --dry-run --region us-east-1 --mutable-tags 2>&1) ||
	fail "build_and_push.sh --dry-run --mutable-tags exited non-zero"
check "--mutable-tags: the repository is created MUTABLE" contains "$out" "--image-tag-mutability MUTABLE "
check_not "--mutable-tags: no tag check before building" contains "$out" "batch-get-image"
check_not "a malformed region is refused" ./build_and_push.sh --dry-run --region us-east
check_not "an account that is not 12 digits is refused" ./build_and_push.sh --dry-run --region us-east-1 --account 1234
check_not "an endpoint that is not a URL is refused" ./build_and_push.sh --dry-run --region us-east-1 --ecr-endpoint-url 127.0.0.1:1
echo "-- --registry, buildah"
out=$(PATH="$tmp/fakebin:$PATH" ./build_and_push.sh --dry-run --engine buildah --registry 127.0.0.1:5000/team --tls-verify=false \
	--version 1.2.3 --builder-image B --runtime-image R --chart 2>&1) || fail "build_and_push.sh --dry-run --registry exited non-zero"
img=127.0.0.1:5000/team/custom-kube-scheduler-webhook
check_not "--registry: no AWS call shown" contains "$out" "aws "
check "buildah builds both platforms into one manifest list" matches "$out" "^\+ buildah build .*--platform linux/amd64,linux/arm64 .*--manifest "
check "bases passed through" contains "$out" "--build-arg BUILDER_IMAGE=B --build-arg RUNTIME_IMAGE=R"
check "plain HTTP to the local registry" contains "$out" "--tls-verify=false"
check "pushes the list under the version tag" matches "$out" "^\+ buildah manifest push --all .* docker://$img:1\.2\.3$"
check "pushes the list under the commit tag" matches "$out" "^\+ buildah manifest push --all .* docker://$img:$sha(-dirty)?$"
check "the packaged chart pins the pushed image by digest, the tag kept" contains "$out" "image.repository=$img image.tag=1.2.3 image.digest=<the pushed digest>"
check "packages the chart at the version" matches "$out" "helm package .* --version 1\.2\.3 --app-version 1\.2\.3 "
check "pushes the chart next to the image" matches "$out" "helm push .*custom-kube-scheduler-webhook-1\.2\.3\.tgz'? oci://127\.0\.0\.1:5000/team/charts --plain-http$"
check "says it would push image and chart" contains "$out" "Dry run: would push $img:"
check "still no aws/docker call" test ! -e "$tmp/called"
echo "-- signing (cosign)"
: >"$tmp/cosign.key"
out=$(PATH="$tmp/fakebin:$PATH" ./build_and_push.sh --dry-run --engine buildah --registry 127.0.0.1:5000/team --tls-verify=false \
	--version 1.2.3 --chart --sign-key "$tmp/cosign.key" --no-tlog 2>&1) || fail "build_and_push.sh --dry-run --sign-key exited non-zero"
cosign_flags="--yes --key $tmp/cosign.key --tlog-upload=false --allow-insecure-registry --allow-http-registry"
check "signs the pushed index by digest" matches "$out" "^\+ cosign sign $cosign_flags '$img@<digest>'$"
check "attests a CycloneDX SBOM of the binary's modules" matches "$out" "^\+ cosign attest $cosign_flags --type cyclonedx --predicate '?[^ ]+/sbom\.cdx\.json'? '$img@<digest>'$"
check "the SBOM from cyclonedx-gomod app" contains "$out" "cyclonedx-gomod app -json -main cmd/custom-kube-scheduler-webhook"
check "attests SLSA provenance" matches "$out" "^\+ cosign attest $cosign_flags --type slsaprovenance --predicate '?[^ ]+/provenance\.json'? '$img@<digest>'$"
check "signs the chart by digest" matches "$out" "^\+ cosign sign $cosign_flags '127\.0\.0\.1:5000/team/charts/custom-kube-scheduler-webhook@<chart digest>'$"
check "signs after pushing" test "$(grep -n '^+ buildah manifest push' <<<"$out" | tail -n 1 | cut -d: -f1)" -lt "$(grep -n '^+ cosign sign' <<<"$out" | head -n 1 | cut -d: -f1)"
out=$(PATH="$tmp/fakebin:$PATH" ./build_and_push.sh --dry-run --engine buildah --registry 127.0.0.1:5000/team --version 1.2.3 \
	--sign-key awskms:///alias/cksw-release 2>&1) || fail "build_and_push.sh --dry-run --sign-key awskms://... exited non-zero"
check "a KMS key URI is passed to cosign, Rekor on by default" matches "$out" "^\+ cosign sign --yes --key awskms:///alias/cksw-release '$img@<digest>'$"
out=$(PATH="$tmp/fakebin:$PATH" ./build_and_push.sh --dry-run --engine buildah --registry 127.0.0.1:5000/team --version 1.2.3 --sign-keyless 2>&1) ||
	fail "build_and_push.sh --dry-run --sign-keyless exited non-zero"
check "keyless: no key, Rekor on" matches "$out" "^\+ cosign sign --yes '$img@<digest>'$"
out=$(PATH="$tmp/fakebin:$PATH" ./build_and_push.sh --dry-run --engine buildah --registry 127.0.0.1:5000/team --version 1.2.3 2>&1)
check_not "no key: nothing signed" contains "$out" "cosign"
check_not "a key file that is not there is refused" ./build_and_push.sh --dry-run --registry 127.0.0.1:5000 --sign-key "$tmp/nokey"
check_not "--sign-key with --sign-keyless is refused" ./build_and_push.sh --dry-run --registry 127.0.0.1:5000 --sign-key "$tmp/cosign.key" --sign-keyless
check_not "--no-tlog with keyless is refused" ./build_and_push.sh --dry-run --registry 127.0.0.1:5000 --sign-keyless --no-tlog
check_not "a registry that is not HOST[:PORT][/PATH] is refused" ./build_and_push.sh --dry-run --registry 'http://x'
check_not "an unknown engine is refused" ./build_and_push.sh --dry-run --engine podman
check "--help" ./build_and_push.sh --help
check_not "unknown option refused" ./build_and_push.sh --bogus
check_not "bad version tag refused" ./build_and_push.sh --dry-run --version 'a b'

echo "== helper scripts"
check "scripts/check-spread.sh --help" scripts/check-spread.sh --help
check "scripts/webhook-logs.sh --help" scripts/webhook-logs.sh --help
logs=$(scripts/webhook-logs.sh --dry-run)
check "webhook logs follow every replica by label" matches "$logs" "^kubectl logs --namespace custom-kube-scheduler-webhook --selector app.kubernetes.io/name=custom-kube-scheduler-webhook .*--prefix.* --follow$"
check "deploy/render.sh --help" deploy/render.sh --help

finish
