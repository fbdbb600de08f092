package clusterview

// Jobs and CronJobs: a Job is a counting unit of its own (its UID is the revision), a
// CronJob passes its strategy to the Jobs it creates.

import (
	"context"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// IsJob reports whether ref names a batch Job.
func IsJob(ref *metav1.OwnerReference) bool {
	return ref != nil && ref.Kind == "Job" && (ref.APIVersion == "batch/v1" || ref.APIVersion == "batch/v1beta1")
}

// JobFinished reports whether a Job has finished (its Complete or Failed condition is
// true): its pods hold no seat any more and the loop leaves it.
func JobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// JobIndexed reports whether a Job's pods carry completion indexes.
func JobIndexed(j *batchv1.Job) bool {
	return j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
}

// JobReplicas is how many pods a Job wants running: its parallelism, no more than the
// completions it still needs; 0 once finished or suspended; -1 when unknown.
func JobReplicas(j *batchv1.Job) int {
	if JobFinished(j) || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
		return 0
	}
	if j.Spec.Parallelism == nil {
		return -1
	}
	n := int(*j.Spec.Parallelism)
	if j.Spec.Completions != nil {
		n = min(n, max(0, int(*j.Spec.Completions)-int(j.Status.Succeeded)))
	}
	return n
}

// JobSeat returns the seat of an Indexed Job's pod: its completion index + 1, so that
// a retried index takes the seat, and the term, of the pod it replaces.
func JobSeat(j *batchv1.Job, pod *corev1.Pod) (int, error) {
	raw, ok := pod.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		if raw, ok = pod.Labels[batchv1.JobCompletionIndexAnnotation]; !ok {
			return 0, fmt.Errorf("pod %q of Indexed Job %s has no %s annotation", pod.Name, j.Name, batchv1.JobCompletionIndexAnnotation)
		}
	}
	index, err := strconv.Atoi(raw)
	if err != nil || index < 0 {
		return 0, fmt.Errorf("pod %q of Indexed Job %s: completion index %q is not a non-negative integer", pod.Name, j.Name, raw)
	}
	// Compared before adding 1, so a huge index cannot overflow into a negative seat.
	if index >= strategy.MaxSeat {
		return 0, fmt.Errorf("pod %q of Indexed Job %s: index %d gives a seat above %d, which is not placed", pod.Name, j.Name, index, strategy.MaxSeat)
	}
	return index + 1, nil
}

// jobWorkload resolves a Job: its own annotations, then its CronJob's (a CronJob's Job
// carries its job template's annotations already), then the policies, matched as the
// CronJob's (its kind and labels) for a CronJob's Job.
func (r *ListerResolver) jobWorkload(ctx context.Context, ns, name string, uid types.UID) (*Workload, error) {
	if r.Jobs == nil {
		return nil, fmt.Errorf("pods owned by a Job are not placed: Jobs are not watched")
	}
	job, err := cachedOrLive(ctx, r, "Job", ns, name, r.Jobs.Jobs(ns).Get, r.Client.BatchV1().Jobs(ns).Get)
	if err != nil {
		return nil, err
	}
	if job.UID != uid {
		return nil, fmt.Errorf("Job %s/%s has UID %s, the pod names %s", ns, name, job.UID, uid)
	}
	w := &Workload{Revision: job.UID, Job: job, Replicas: JobReplicas(job), Ref: batchRef("Job", job.ObjectMeta)}
	jobLink := strategy.AnnotatedObject{Name: w.Describe(), Annotations: job.Annotations}
	if ctrl := metav1.GetControllerOfNoCopy(job); ctrl != nil && ctrl.Kind == "CronJob" && r.CronJobs != nil {
		cj, err := cachedOrLive(ctx, r, "CronJob", ns, ctrl.Name, r.CronJobs.CronJobs(ns).Get, r.Client.BatchV1().CronJobs(ns).Get)
		if err == nil && cj.UID == ctrl.UID {
			cjLink := strategy.AnnotatedObject{Name: fmt.Sprintf("CronJob %s/%s", ns, cj.Name), Annotations: cj.Annotations}
			w.Chain = r.chain(ns, "CronJob", cj.Labels, jobLink, cjLink)
			return w, nil
		}
		// Its CronJob gone: the Job stands on its own.
	}
	w.Chain = r.chain(ns, "Job", job.Labels, jobLink)
	return w, nil
}

func batchRef(kind string, m metav1.ObjectMeta) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "batch/v1", Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID}
}

// trimJob keeps what the readers of a Job use: metadata, the counts that say how many
// pods it wants, whether it is indexed, its selector and its template's strategy
// annotations. A finished Job keeps only its name, UID, owner and the condition that
// says it finished: a CronJob every minute leaves many, and none of them is read
// for more.
func trimJob(o *batchv1.Job) *batchv1.Job {
	if JobFinished(o) {
		m := metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID, ResourceVersion: o.ResourceVersion, OwnerReferences: o.OwnerReferences}
		var done []batchv1.JobCondition
		for _, c := range o.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				done = append(done, batchv1.JobCondition{Type: c.Type, Status: c.Status})
			}
		}
		return &batchv1.Job{ObjectMeta: m, Status: batchv1.JobStatus{Conditions: done}}
	}
	return &batchv1.Job{ObjectMeta: trimMeta(o.ObjectMeta),
		Spec: batchv1.JobSpec{Parallelism: o.Spec.Parallelism, Completions: o.Spec.Completions, CompletionMode: o.Spec.CompletionMode,
			Suspend: o.Spec.Suspend, Selector: o.Spec.Selector, Template: templateAnnotations(o.Spec.Template)},
		Status: batchv1.JobStatus{Succeeded: o.Status.Succeeded, Active: o.Status.Active},
	}
}

// trimCronJob keeps a CronJob's metadata only: its Jobs carry its job template's
// annotations and pod template themselves.
func trimCronJob(o *batchv1.CronJob) *batchv1.CronJob {
	return &batchv1.CronJob{ObjectMeta: trimMeta(o.ObjectMeta)}
}
