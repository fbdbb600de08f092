package plan

import (
	"strings"
	"testing"
)

const deployYAML = `apiVersion: v1
kind: Service
metadata: {name: web}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 12
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        CustomPodScheduleStrategy: "karpenter.sh/capacity-type=on-demand,base=2:karpenter.sh/capacity-type=spot,weight=3"
    spec:
      initContainers:
        - {name: init, image: busybox, resources: {requests: {cpu: "2"}}}
      containers:
        - {name: a, image: busybox, resources: {requests: {cpu: 250m, memory: 256Mi}}}
        - {name: b, image: busybox, resources: {requests: {cpu: 250m, memory: 256Mi}}}
`

func TestReadManifest(t *testing.T) {
	w, err := ReadManifest([]byte(deployYAML))
	if err != nil {
		t.Fatal(err)
	}
	if w.Kind != "Deployment" || w.Namespace != "shop" || w.Name != "web" || w.Replicas != 12 || !strings.Contains(w.Strategy, "base=2") {
		t.Fatalf("workload %+v", w)
	}
	cpu, mem := w.Requests.Cpu(), w.Requests.Memory()
	if cpu.String() != "2" || mem.String() != "512Mi" {
		t.Fatalf("requests cpu %s memory %s, want 2 (the init container) and 512Mi", cpu, mem)
	}
}

func TestReadManifestErrors(t *testing.T) {
	cases := map[string]string{
		"kind: Service\nmetadata: {name: x}\n":  "no Deployment, StatefulSet, Rollout, Job or CronJob",
		"kind: Deployment\nspec: [":             "document 1",
		"kind: Deployment\nspec: {replicas: x}": "document 1 (Deployment)",
	}
	for in, want := range cases {
		if _, err := ReadManifest([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadManifest(%q) = %v, want %q", in, err, want)
		}
	}
}

func FuzzReadManifest(f *testing.F) {
	f.Add([]byte(deployYAML))
	f.Add([]byte("kind: StatefulSet\nspec: {replicas: -3}\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := ReadManifest(data)
		if err == nil && (w.Strategy == "" || w.Replicas < 0) {
			t.Fatalf("accepted %+v", w)
		}
	})
}

// A Job's manifest is planned for its parallelism (no more than its completions); a
// CronJob's for its job template's, its strategy found on the CronJob as its Jobs find it.
func TestReadManifestJobs(t *testing.T) {
	const job = `apiVersion: batch/v1
kind: Job
metadata: {name: fanout, namespace: batch}
spec:
  parallelism: 8
  completions: 5
  template:
    metadata:
      annotations: {CustomPodScheduleStrategy: "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot,weight=3"}
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox, resources: {requests: {cpu: "1"}}}]
`
	const cronJob = `apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  annotations: {CustomPodScheduleStrategy: "karpenter.sh/capacity-type=on-demand,base=2:karpenter.sh/capacity-type=spot,weight=1"}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      parallelism: 6
      template:
        spec:
          restartPolicy: Never
          containers: [{name: work, image: busybox}]
`
	w, err := ReadManifest([]byte(job))
	if err != nil {
		t.Fatal(err)
	}
	if w.Kind != "Job" || w.Name != "fanout" || w.Replicas != 5 || w.Source != "the pod template of Job fanout" || w.Requests.Cpu().String() != "1" {
		t.Errorf("Job: %+v", w)
	}
	w, err = ReadManifest([]byte(cronJob))
	if err != nil {
		t.Fatal(err)
	}
	if w.Kind != "CronJob" || w.Name != "nightly" || w.Replicas != 6 || w.Source != "CronJob nightly" || !strings.Contains(w.Strategy, "base=2") {
		t.Errorf("CronJob: %+v", w)
	}
}
