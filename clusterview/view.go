package clusterview

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// WorkloadView is one workload as every reader that judges it sees it (the
// convergence loop, spread and plan through report, the policy status): its current
// revision, replicas, rolling state and own strategy links. The current revision is
// decided here and nowhere else.
type WorkloadView struct {
	// Kind is Deployment, Rollout, StatefulSet, ReplicaSet (a bare one) or Job (a
	// running one).
	Kind string
	Meta metav1.ObjectMeta
	// Template holds the pod template's annotations; a Rollout's are its current
	// ReplicaSet's (its metadata alone is watched).
	Template map[string]string
	// Replicas is spec.replicas (nil: unset); a Rollout's is its current ReplicaSet's.
	Replicas *int32
	// Revision is the ReplicaSet or StatefulSet whose pods are counted ("": none yet)
	// and RevisionName its name.
	Revision     types.UID
	RevisionName string
	// Current is a Deployment's or Rollout's current ReplicaSet (nil: none yet, or
	// another kind) and Older its other ReplicaSets.
	Current *appsv1.ReplicaSet
	Older   []*appsv1.ReplicaSet
	// Rolling: the workload's controller is moving pods to a new revision.
	Rolling bool
	// CronJob is the metadata of the CronJob that created a Job (nil: none): its
	// annotations follow the Job's, and policies select the Job as the CronJob.
	CronJob *metav1.ObjectMeta
}

// Name names the view for messages and strategy links, e.g. "Deployment shop/web".
func (v *WorkloadView) Name() string { return v.Kind + " " + v.Meta.Namespace + "/" + v.Meta.Name }

// Links are the workload's own strategy links in the webhook's order: its pod
// template, itself, and a Rollout's current ReplicaSet or a Job's CronJob.
func (v *WorkloadView) Links() []strategy.AnnotatedObject {
	links := []strategy.AnnotatedObject{
		{Name: "the pod template of " + v.Name(), Annotations: v.Template},
		{Name: v.Name(), Annotations: v.Meta.Annotations},
	}
	if v.Kind == kindRollout && v.Current != nil {
		links = append(links, strategy.AnnotatedObject{Name: "ReplicaSet " + v.Current.Namespace + "/" + v.Current.Name, Annotations: v.Current.Annotations})
	}
	if v.CronJob != nil {
		links = append(links, strategy.AnnotatedObject{Name: "CronJob " + v.CronJob.Namespace + "/" + v.CronJob.Name, Annotations: v.CronJob.Annotations})
	}
	return links
}

// Policy is what policies select the workload by: a CronJob's Job as its CronJob.
func (v *WorkloadView) Policy() policy.Workload {
	if v.CronJob != nil {
		return policy.Workload{Namespace: v.Meta.Namespace, Kind: "CronJob", Labels: v.CronJob.Labels}
	}
	return policy.Workload{Namespace: v.Meta.Namespace, Kind: v.Kind, Labels: v.Meta.Labels}
}

// Objects are the workload objects views are built of: the caches' (Caches.Objects)
// or lists from the API server (report).
type Objects struct {
	Deployments  []*appsv1.Deployment
	StatefulSets []*appsv1.StatefulSet
	ReplicaSets  []*appsv1.ReplicaSet
	// Rollouts holds Argo Rollouts' metadata (none: not served; their ReplicaSets are
	// then bare ones, as the webhook places them).
	Rollouts []*metav1.ObjectMeta
	// Jobs and CronJobs (none when batch workloads are not watched); a finished Job is
	// no workload (its pods hold no seat; a CronJob every minute leaves many).
	Jobs     []*batchv1.Job
	CronJobs []*batchv1.CronJob
}

// Views lists the workloads of o. A ReplicaSet a Deployment controls is never a
// workload of its own; one a Rollout of o controls is its Rollout's. A running Job is
// its own revision, for its JobReplicas.
func Views(o Objects) []WorkloadView {
	byOwner := map[types.UID][]*appsv1.ReplicaSet{}
	rollouts := map[types.UID]bool{}
	for _, ro := range o.Rollouts {
		rollouts[ro.UID] = true
	}
	out := make([]WorkloadView, 0, len(o.Deployments)+len(o.StatefulSets)+len(o.Rollouts))
	for _, rs := range o.ReplicaSets {
		ref := metav1.GetControllerOfNoCopy(rs)
		if ref != nil && (ref.Kind == "Deployment" || IsRollout(ref) && rollouts[ref.UID]) {
			byOwner[ref.UID] = append(byOwner[ref.UID], rs)
			continue
		}
		out = append(out, WorkloadView{Kind: "ReplicaSet", Meta: rs.ObjectMeta, Template: rs.Spec.Template.Annotations, Replicas: rs.Spec.Replicas, Revision: rs.UID, RevisionName: rs.Name})
	}
	for _, d := range o.Deployments {
		v := WorkloadView{Kind: "Deployment", Meta: d.ObjectMeta, Template: d.Spec.Template.Annotations, Replicas: d.Spec.Replicas}
		v.revisions(byOwner[d.UID])
		out = append(out, v)
	}
	for _, ro := range o.Rollouts {
		v := WorkloadView{Kind: kindRollout, Meta: *ro}
		v.revisions(byOwner[ro.UID])
		if v.Current != nil {
			v.Template, v.Replicas = v.Current.Spec.Template.Annotations, v.Current.Spec.Replicas
		}
		out = append(out, v)
	}
	for _, s := range o.StatefulSets {
		out = append(out, WorkloadView{Kind: "StatefulSet", Meta: s.ObjectMeta, Template: s.Spec.Template.Annotations, Replicas: s.Spec.Replicas,
			Revision: s.UID, RevisionName: s.Name, Rolling: StatefulSetRolling(s)})
	}
	cronJobs := make(map[types.UID]*metav1.ObjectMeta, len(o.CronJobs))
	for _, cj := range o.CronJobs {
		cronJobs[cj.UID] = &cj.ObjectMeta
	}
	for _, j := range o.Jobs {
		if JobFinished(j) {
			continue
		}
		replicas := int32(max(0, JobReplicas(j)))
		v := WorkloadView{Kind: "Job", Meta: j.ObjectMeta, Template: j.Spec.Template.Annotations, Replicas: &replicas, Revision: j.UID, RevisionName: j.Name}
		if ref := metav1.GetControllerOfNoCopy(j); ref != nil && ref.Kind == "CronJob" {
			v.CronJob = cronJobs[ref.UID]
		}
		out = append(out, v)
	}
	return out
}

// revisions sets v's current revision from the ReplicaSets of v's namespace in sets.
func (v *WorkloadView) revisions(sets []*appsv1.ReplicaSet) {
	r := RevisionsOf(v.Kind, v.Meta.Namespace, sets)
	v.Current, v.Older, v.Rolling = r.Current, r.Older, r.Rolling
	if r.Current != nil {
		v.Revision, v.RevisionName = r.Current.UID, r.Current.Name
	}
}

// Revisions is how a Deployment's or Rollout's ReplicaSets stand.
type Revisions struct {
	// Current is the newest ReplicaSet by its controller's revision annotation (nil:
	// none yet); Older are the others.
	Current *appsv1.ReplicaSet
	Older   []*appsv1.ReplicaSet
	// Rolling: more than one has replicas, the controller is moving pods between them
	// (a Deployment's rollout, a Rollout's canary or blue-green preview).
	Rolling bool
}

// The controllers' revision annotations: each ReplicaSet's number, higher is newer.
const (
	deploymentRevision = "deployment.kubernetes.io/revision"
	rolloutRevision    = "rollout.argoproj.io/revision"
)

// RevisionsOf is the one rule for a workload's current revision: of the ReplicaSets
// of namespace ns in sets that a workload of kind (Deployment or Rollout) controls,
// the one its controller numbered last. Ties (no number) go to the newest by creation,
// then by name, so every reader picks the same one.
func RevisionsOf(kind, ns string, sets []*appsv1.ReplicaSet) Revisions {
	key := deploymentRevision
	if kind == kindRollout {
		key = rolloutRevision
	}
	number := func(rs *appsv1.ReplicaSet) int { n, _ := strconv.Atoi(rs.Annotations[key]); return n }
	var r Revisions
	active := 0
	for _, rs := range sets {
		if rs.Namespace != ns {
			continue // a forged owner reference across namespaces
		}
		if rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0 {
			active++
		}
		r.Older = append(r.Older, rs)
	}
	if len(r.Older) == 0 {
		return Revisions{}
	}
	newest := slices.MaxFunc(r.Older, func(a, b *appsv1.ReplicaSet) int {
		return cmp.Or(cmp.Compare(number(a), number(b)), a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	r.Current, r.Rolling = newest, active > 1
	r.Older = slices.DeleteFunc(r.Older, func(rs *appsv1.ReplicaSet) bool { return rs == newest })
	return r
}

// StatefulSetRolling reports whether the StatefulSet controller is rolling pods to a
// new revision (RollingUpdate, the default). With OnDelete the user replaces pods when
// they choose, which is no rollout to wait for.
func StatefulSetRolling(s *appsv1.StatefulSet) bool {
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return false
	}
	return s.Status.ObservedGeneration < s.Generation ||
		(s.Status.UpdateRevision != "" && s.Status.UpdateRevision != s.Status.CurrentRevision)
}

// Objects lists the cached workload objects outside the namespaces skip leaves alone
// (nil: none).
func (c *Caches) Objects(skip func(ns string) bool) (Objects, error) {
	r := c.Resolver
	var o Objects
	var err error
	if o.Deployments, err = r.Deployments.List(labels.Everything()); err != nil {
		return o, fmt.Errorf("read the Deployments' cache: %w", err)
	}
	if o.StatefulSets, err = r.StatefulSets.List(labels.Everything()); err != nil {
		return o, fmt.Errorf("read the StatefulSets' cache: %w", err)
	}
	if o.ReplicaSets, err = r.ReplicaSets.List(labels.Everything()); err != nil {
		return o, fmt.Errorf("read the ReplicaSets' cache: %w", err)
	}
	for _, ro := range c.Rollouts() {
		o.Rollouts = append(o.Rollouts, &ro.ObjectMeta)
	}
	if r.Jobs != nil && r.CronJobs != nil {
		if o.Jobs, err = r.Jobs.List(labels.Everything()); err != nil {
			return o, fmt.Errorf("read the Jobs' cache: %w", err)
		}
		if o.CronJobs, err = r.CronJobs.List(labels.Everything()); err != nil {
			return o, fmt.Errorf("read the CronJobs' cache: %w", err)
		}
	}
	if skip != nil {
		o.Deployments = slices.DeleteFunc(o.Deployments, func(d *appsv1.Deployment) bool { return skip(d.Namespace) })
		o.StatefulSets = slices.DeleteFunc(o.StatefulSets, func(s *appsv1.StatefulSet) bool { return skip(s.Namespace) })
		o.ReplicaSets = slices.DeleteFunc(o.ReplicaSets, func(rs *appsv1.ReplicaSet) bool { return skip(rs.Namespace) })
		o.Rollouts = slices.DeleteFunc(o.Rollouts, func(ro *metav1.ObjectMeta) bool { return skip(ro.Namespace) })
		o.Jobs = slices.DeleteFunc(o.Jobs, func(j *batchv1.Job) bool { return skip(j.Namespace) })
		o.CronJobs = slices.DeleteFunc(o.CronJobs, func(cj *batchv1.CronJob) bool { return skip(cj.Namespace) })
	}
	return o, nil
}
