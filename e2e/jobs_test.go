//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// jobGate holds a Job's pods Pending (unscheduled) until the test has looked at them:
// kwok completes a Job's pod as soon as it runs, so without it a pod could finish, and
// give its seat to the next one, before the split is read.
const jobGate = "e2e.custom-kube-scheduler-webhook.io/hold"

// Jobs with the real Job and CronJob controllers (kube-controller-manager): a parallel
// Job, an Indexed Job whose failed index is retried, a CronJob's Job and an un-annotated
// Job governed by a policy of kind Job are each split exactly; once a Job completes, its
// seat record goes. The four run side by side, each in its own namespace.
func TestJobs(t *testing.T) {
	ctx := context.Background()
	t.Run("parallel Job", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(ctx, t, "e2e-job-parallel")
		job := batchJob(ns, "fanout", 8, 8, false, map[string]string{strategy.AnnotationStrategy: capacityStrategy})
		createJob(ctx, t, job)
		assertJobSplit(t, capacityStrategy, liveJobPods(ctx, t, job, 8))
		finishJob(ctx, t, job)
		waitNoSeatRecord(ctx, t, job.UID)
	})
	t.Run("Indexed Job, a failed index retried", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(ctx, t, "e2e-job-indexed")
		job := batchJob(ns, "shards", 5, 5, true, map[string]string{strategy.AnnotationStrategy: seedStrategy})
		createJob(ctx, t, job)
		pods := liveJobPods(ctx, t, job, 5)
		assertJobSplit(t, seedStrategy, pods)
		for _, p := range pods {
			if idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]; p.Annotations[strategy.AnnotationSeat] != strconv.Itoa(atoi(t, idx)+1) {
				t.Errorf("pod %s of index %s has seat %s, want index + 1", p.Name, idx, p.Annotations[strategy.AnnotationSeat])
			}
		}
		// Index 2's pod fails (the test acts as its kubelet); the Job controller creates
		// another pod for index 2, which must take seat 3 on the same term.
		failed := podOfIndex(t, pods, "2")
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := env.client.CoreV1().Pods(ns).Get(ctx, failed.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Status.Phase = corev1.PodFailed
			_, err = env.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("failing the pod of index 2: %v", err)
		}
		retried := liveJobPods(ctx, t, job, 5)
		again := podOfIndex(t, retried, "2")
		if again.UID == failed.UID {
			t.Fatalf("index 2 still has its failed pod %s", failed.Name)
		}
		if again.Annotations[strategy.AnnotationSeat] != "3" || !mapsEqual(again.Spec.NodeSelector, failed.Spec.NodeSelector) {
			t.Errorf("the retried pod of index 2 has seat %s and nodeSelector %v; the failed one had seat 3 and %v",
				again.Annotations[strategy.AnnotationSeat], again.Spec.NodeSelector, failed.Spec.NodeSelector)
		}
		assertJobSplit(t, seedStrategy, retried)
		finishJob(ctx, t, job)
	})
	t.Run("CronJob's Job", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(ctx, t, "e2e-job-cron")
		// The strategy stands on the CronJob only: its Jobs must take it from there.
		tmpl := batchJob(ns, "", 6, 6, false, nil)
		// Every minute, one Job at a time: the CronJob controller creates the Job, whose
		// pods wait behind jobGate until finishJob, so no second Job starts meanwhile.
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns, Annotations: map[string]string{strategy.AnnotationStrategy: capacityStrategy}},
			Spec: batchv1.CronJobSpec{Schedule: "* * * * *", ConcurrencyPolicy: batchv1.ForbidConcurrent,
				JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nightly"}}, Spec: tmpl.Spec}}}
		created, err := env.client.BatchV1().CronJobs(ns).Create(ctx, cj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating the CronJob: %v", err)
		}
		job := cronJobsJob(ctx, t, created)
		// Suspended now, so that no Job follows this one once it completes.
		suspend := []byte(`{"spec":{"suspend":true}}`)
		if _, err := env.client.BatchV1().CronJobs(ns).Patch(ctx, created.Name, types.MergePatchType, suspend, metav1.PatchOptions{}); err != nil {
			t.Fatalf("suspending the CronJob: %v", err)
		}
		assertJobSplit(t, capacityStrategy, liveJobPods(ctx, t, job, 6))
		finishJob(ctx, t, job)
		waitNoSeatRecord(ctx, t, job.UID)
	})
	t.Run("policy of kind Job", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(ctx, t, "e2e-job-policy")
		if err := createPolicy(ctx, t, dynamicClient(t), ns, "batch-split", map[string]any{
			"strategy": seedStrategy, "selector": map[string]any{"matchLabels": map[string]any{"app": "etl"}}, "kinds": []any{"Job"},
		}); err != nil {
			t.Fatalf("creating the PlacementPolicy: %v", err)
		}
		job := batchJob(ns, "etl", 7, 7, false, nil)
		waitPolicyGoverns(ctx, t, ns, job)
		assertJobSplit(t, seedStrategy, liveJobPods(ctx, t, job, 7))
		finishJob(ctx, t, job)
	})
}

// cronJobsJob waits for the first Job the CronJob controller creates for cj (its
// schedule every minute: at most a minute and the controller's resync).
func cronJobsJob(ctx context.Context, t *testing.T, cj *batchv1.CronJob) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs, err := env.client.BatchV1().Jobs(cj.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range jobs.Items {
			if ref := metav1.GetControllerOf(&jobs.Items[i]); ref != nil && ref.UID == cj.UID {
				job = &jobs.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the CronJob controller created no Job for CronJob %s/%s: %v", cj.Namespace, cj.Name, err)
	}
	t.Logf("the CronJob controller created Job %s after %s", job.Name, time.Since(start).Round(time.Second))
	return job
}

// batchJob is a Job labelled app=name whose pods wait behind jobGate; annotations go on
// the Job.
func batchJob(ns, name string, parallelism, completions int, indexed bool, annotations map[string]string) *batchv1.Job {
	tmpl := podTemplate(name, nil)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: jobGate}}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}, Annotations: annotations},
		Spec: batchv1.JobSpec{Parallelism: ptr(int32(parallelism)), Completions: ptr(int32(completions)), BackoffLimit: ptr(int32(3)), Template: tmpl}}
	if indexed {
		j.Spec.CompletionMode = ptr(batchv1.IndexedCompletion)
	}
	return j
}

// createJob creates job and records its UID on it.
func createJob(ctx context.Context, t *testing.T, job *batchv1.Job) {
	t.Helper()
	created, err := env.client.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Job %s/%s: %v", job.Namespace, job.Name, err)
	}
	job.UID = created.UID
}

// waitPolicyGoverns creates job once the webhook's policy cache shows the policy: a
// dry-run pod of a suspended probe Job (same labels) comes back placed.
func waitPolicyGoverns(ctx context.Context, t *testing.T, ns string, job *batchv1.Job) {
	t.Helper()
	probe := job.DeepCopy()
	probe.Name += "-probe"
	probe.Spec.Suspend = ptr(true)
	createJob(ctx, t, probe)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: probe.Spec.Template.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: probe.Name, UID: probe.UID, Controller: ptr(true)}}},
		Spec: probe.Spec.Template.Spec}
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := env.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, nil
		}
		_, seated := got.Annotations[strategy.AnnotationSeat]
		return seated, nil
	})
	if err != nil {
		t.Fatalf("the webhook never placed a dry-run pod of an un-annotated Job under the policy: %v", err)
	}
	createJob(ctx, t, job)
}

// jobPods lists the pods of job (by the controller-uid label the Job controller sets).
func jobPods(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	list, err := env.client.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(job.UID)})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// liveJobPods waits until job has n pods that hold a seat (not Failed, Succeeded or
// terminating) and returns them.
func liveJobPods(ctx context.Context, t *testing.T, job *batchv1.Job, n int) []corev1.Pod {
	t.Helper()
	var live []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := jobPods(ctx, job)
		if err != nil {
			return false, nil
		}
		live = live[:0]
		for _, p := range pods {
			if strategy.HoldsSeat(&p) {
				live = append(live, p)
			}
		}
		return len(live) == n, nil
	})
	if err != nil {
		t.Fatalf("Job %s/%s: %d live pods, want %d: %v", job.Namespace, job.Name, len(live), n, err)
	}
	return live
}

// assertJobSplit checks that a Job's live pods hold exactly the strategy's target for
// their number: per term by nodeSelector, seats 1..n each held once, each pod on its
// seat's term.
func assertJobSplit(t *testing.T, strat string, pods []corev1.Pod) {
	t.Helper()
	s, err := strategy.Parse(strat)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int, len(s.Terms))
	var seats []int
	for _, p := range pods {
		term := termOfSelector(s, strategy.PlacementSelector(&p))
		seat, err := strconv.Atoi(p.Annotations[strategy.AnnotationSeat])
		if term < 0 || err != nil {
			t.Errorf("pod %s not placed: nodeSelector %v, seat %q", p.Name, p.Spec.NodeSelector, p.Annotations[strategy.AnnotationSeat])
			continue
		}
		got[term]++
		seats = append(seats, seat)
		if ts := s.TermOfSeat(seat); ts != term {
			t.Errorf("pod %s: seat %d belongs to term %d, its nodeSelector selects term %d", p.Name, seat, ts+1, term+1)
		}
	}
	if want := s.Target(len(pods)); !slices.Equal(got, want) {
		t.Errorf("per-term pod counts %v, want the target for %d pods %v (strategy %s)", got, len(pods), want, strat)
	}
	if dup, missing := seatProblems(seats, len(pods)); len(dup) > 0 || len(missing) > 0 {
		t.Errorf("seats must be 1..%d, each held once: held more than once %s; free %s", len(pods), compactInts(dup), compactInts(missing))
	}
}

// finishJob lets the Job's pods be scheduled (kwok runs and completes them on the nodes
// Karpenter makes for their terms) and waits until the Job completes.
func finishJob(ctx context.Context, t *testing.T, job *batchv1.Job) {
	t.Helper()
	ungate := []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`)
	err := wait.PollUntilContextTimeout(ctx, time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
		j, err := env.client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, nil
			}
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("Job failed: %s", c.Message)
			}
		}
		// Pods the controller made since the last look are gated too.
		pods, _ := jobPods(ctx, job)
		for _, p := range pods {
			if len(p.Spec.SchedulingGates) > 0 && strategy.HoldsSeat(&p) {
				_, err := env.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.JSONPatchType, ungate, metav1.PatchOptions{})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
					return false, fmt.Errorf("ungating pod %s: %w", p.Name, err)
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Job %s/%s did not complete: %v", job.Namespace, job.Name, err)
	}
}

// waitNoSeatRecord waits until the seat record of a finished Job is gone (swept once
// idle for twice the reservation TTL).
func waitNoSeatRecord(ctx context.Context, t *testing.T, uid types.UID) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.client.CoordinationV1().Leases(webhookNamespace).Get(ctx, "seats-"+string(uid), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the seat record of finished Job %s is still there: %v", uid, err)
	}
}

func podOfIndex(t *testing.T, pods []corev1.Pod, index string) corev1.Pod {
	t.Helper()
	for _, p := range pods {
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] == index {
			return p
		}
	}
	t.Fatalf("no live pod of index %s", index)
	return corev1.Pod{}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not an integer", s)
	}
	return n
}
