package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the policy API.
const (
	Group   = "custom-kube-scheduler-webhook.io"
	Version = "v1alpha1"
)

// Resource names (plural, lower case) of the policy kinds, as RBAC and the dynamic
// client name them.
const (
	ResourcePlacementPolicies        = "placementpolicies"
	ResourceClusterPlacementPolicies = "clusterplacementpolicies"
)

// Kind names.
const (
	KindPlacementPolicy        = "PlacementPolicy"
	KindClusterPlacementPolicy = "ClusterPlacementPolicy"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Resources of the policy kinds.
var (
	PlacementPolicies        = GroupVersion.WithResource(ResourcePlacementPolicies)
	ClusterPlacementPolicies = GroupVersion.WithResource(ResourceClusterPlacementPolicies)
)

// AddToScheme registers the policy kinds with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PlacementPolicy{}, &PlacementPolicyList{}, &ClusterPlacementPolicy{}, &ClusterPlacementPolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// WorkloadKind names a kind of workload a policy may select.
// +kubebuilder:validation:Enum=Deployment;StatefulSet;ReplicaSet;Rollout;Job;CronJob
type WorkloadKind string

// The workload kinds a policy may select. A ReplicaSet owned by a Deployment (or a
// Rollout) is that Deployment's: "ReplicaSet" selects only bare ReplicaSets. A CronJob's
// Jobs are the CronJob's: "CronJob" selects them by the CronJob's labels, and "Job"
// selects every Job, a CronJob's included.
const (
	KindDeployment  WorkloadKind = "Deployment"
	KindStatefulSet WorkloadKind = "StatefulSet"
	KindReplicaSet  WorkloadKind = "ReplicaSet"
	KindRollout     WorkloadKind = "Rollout"
	KindJob         WorkloadKind = "Job"
	KindCronJob     WorkloadKind = "CronJob"
)

// PolicyMode says whether a policy acts.
// +kubebuilder:validation:Enum=Enforce;Audit
type PolicyMode string

// The modes of a policy.
const (
	// ModeEnforce: admission places new pods by the policy and the convergence loop
	// moves its workloads' pods onto its target.
	ModeEnforce PolicyMode = "Enforce"
	// ModeAudit: the policy is resolved, counted and reported (status, spread, metrics)
	// as if it were enforced, but it places no pod and moves none: the source after it
	// in precedence applies, or none.
	ModeAudit PolicyMode = "Audit"
)

// AnnotationMode on a Namespace set to "Audit" puts its default strategy (its
// CustomPodScheduleStrategy annotation) in audit mode, as spec.mode does a policy's.
const AnnotationMode = Group + "/mode"

// PlacementPolicySpec is what a policy applies, and to which workloads.
type PlacementPolicySpec struct {
	// Strategy is the strategy, in the CustomPodScheduleStrategy annotation's grammar,
	// e.g. "karpenter.sh/capacity-type=on-demand,base=2:karpenter.sh/capacity-type=spot".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Strategy string `json:"strategy"`
	// Selector selects workloads by their own labels (the Deployment's, StatefulSet's,
	// bare ReplicaSet's, Rollout's, Job's or, for its Jobs, CronJob's metadata.labels,
	// not the pod template's). Empty or
	// absent selects every workload.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Kinds limits the policy to these workload kinds; empty: all of them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=6
	Kinds []WorkloadKind `json:"kinds,omitempty"`
	// Priority orders policies of the same scope that match one workload: higher wins.
	// Between equal priorities the name wins in alphabetical order, and both report a
	// conflict.
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// Mode is Enforce (the default: the policy places and moves pods) or Audit (it is
	// resolved and reported as if enforced, status.wouldMove counting the pods enforcing
	// it would move, but it places and moves nothing).
	// +optional
	// +kubebuilder:default=Enforce
	Mode PolicyMode `json:"mode,omitempty"`
	// Suspend pauses the policy's moves: admission keeps placing new pods by it, but
	// the convergence loop moves none of the pods of the workloads it governs until it
	// is false again (then it finishes the moves).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
	// MoveWindow is when the convergence loop makes the non-urgent moves of the
	// workloads the policy governs: returns from fallback, drift after a strategy
	// change, tidying seats. Absent: the cluster's MOVE_WINDOW. A workload's
	// custom-kube-scheduler-webhook.io/move-window annotation overrides it. Pods without
	// a node or a seat, and on a node EC2 signalled, move at any time.
	// +optional
	MoveWindow *MoveWindow `json:"moveWindow,omitempty"`
	// MinFallbackStay is how long a pod stays on its fallback term before the loop may
	// move it back to its own term. Absent: the cluster's MIN_FALLBACK_STAY. A
	// workload's custom-kube-scheduler-webhook.io/min-fallback-stay annotation overrides it.
	// +optional
	MinFallbackStay *metav1.Duration `json:"minFallbackStay,omitempty"`
	// MoveJobPods lets the convergence loop evict the running pods of the Jobs the policy
	// governs to move them, within the loop's budget. Absent or false: a Job's pods stay
	// where they were placed (a killed batch pod loses its work). A Job's or CronJob's
	// custom-kube-scheduler-webhook.io/move-job-pods annotation overrides it.
	// +optional
	MoveJobPods bool `json:"moveJobPods,omitempty"`
}

// MoveWindow is a recurring window, in the form of a Karpenter NodePool's disruption
// budget: it opens at each hit of Schedule, in TimeZone, for Duration.
type MoveWindow struct {
	// Schedule is a cron schedule: five fields or a descriptor such as @daily.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule"`
	// Duration is how long each opening lasts (at least 1m).
	Duration metav1.Duration `json:"duration"`
	// TimeZone is an IANA time zone name (e.g. Europe/Berlin); absent: UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
	// MaxMoves caps each workload's moves per opening; absent or 0: no cap.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxMoves int32 `json:"maxMoves,omitempty"`
}

// Audit reports whether the policy is in audit mode.
func (s PlacementPolicySpec) Audit() bool { return s.Mode == ModeAudit }

// ClusterPlacementPolicySpec is a PlacementPolicySpec that also selects namespaces.
type ClusterPlacementPolicySpec struct {
	PlacementPolicySpec `json:",inline"`
	// NamespaceSelector selects the namespaces whose workloads the policy may govern, by
	// the namespaces' labels. Empty or absent selects every namespace (the webhook's
	// blocklist and scope still apply).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// Condition types a policy reports.
const (
	// ConditionAccepted is True when the strategy parses; False with reason Invalid and
	// the parser's message when it does not.
	ConditionAccepted = "Accepted"
	// ConditionConflicting is True when another policy of the same scope and priority
	// matches a workload this one matches; the message names it and who won.
	ConditionConflicting = "Conflicting"
	// ConditionInScope is False when the policy selects workloads in namespaces the
	// webhook's scope leaves out (not enabled, or excluded): nothing places their pods,
	// and they are not counted in workloads; the message names them and why.
	ConditionInScope = "InScope"
	// ConditionGoverning is True when the policy governs at least one workload; False
	// with reason SelectsNothing when its selector, kinds and namespaces match none (a
	// typo in a selector), or OutOfScope when every one it matches is out of scope.
	ConditionGoverning = "Governing"
	// ConditionServed is False with reason TermUnserved when a term of the strategy is
	// served by no NodePool, node group or node (most often a typo in a label): the
	// message names the label and the closest one that exists.
	ConditionServed = "Served"
	// ConditionReady sums the others up: True when the policy is accepted, governs
	// workloads, all in scope, and every term is served; else False with the first
	// problem's reason (kubectl get shows it).
	ConditionReady = "Ready"
)

// MaxNotExact bounds the workloads a status lists as not exact.
const MaxNotExact = 10

// PolicyStatus is what a policy governs and how it stands.
type PolicyStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted, Conflicting, InScope.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Workloads counts the workloads whose strategy comes from this policy.
	// +optional
	Workloads int32 `json:"workloads"`
	// Exact counts those whose pods stand exactly on their target.
	// +optional
	Exact int32 `json:"exact"`
	// NotExact lists the first workloads that are not exact, and why.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	NotExact []WorkloadState `json:"notExact,omitempty"`
	// WouldMove counts, for a policy in audit mode, the pods of the workloads it would
	// govern that enforcing it would move: pods on another term than its target places
	// their seat, and pods without a seat. Workloads, Exact and NotExact then describe
	// those workloads against its target.
	// +optional
	WouldMove *int32 `json:"wouldMove,omitempty"`
}

// WorkloadState names a workload and why it is not exact.
type WorkloadState struct {
	// Kind of the workload (Deployment, StatefulSet, ReplicaSet, Rollout, Job).
	Kind string `json:"kind"`
	// Namespace of the workload.
	Namespace string `json:"namespace"`
	// Name of the workload.
	Name string `json:"name"`
	// Reason says why it is not exact (pods pending, on the wrong term, unplaced).
	Reason string `json:"reason"`
}

// PlacementPolicy applies a strategy to the workloads of its namespace that its
// selector matches, unless they carry a strategy annotation of their own.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ppol,categories=custom-kube-scheduler-webhook
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`,priority=1
// +kubebuilder:printcolumn:name="Workloads",type=integer,JSONPath=`.status.workloads`
// +kubebuilder:printcolumn:name="Exact",type=integer,JSONPath=`.status.exact`
// +kubebuilder:printcolumn:name="WouldMove",type=integer,JSONPath=`.status.wouldMove`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PlacementPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PlacementPolicySpec `json:"spec"`
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// PlacementPolicyList is a list of PlacementPolicy.
// +kubebuilder:object:root=true
type PlacementPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PlacementPolicy `json:"items"`
}

// ClusterPlacementPolicy applies a strategy to the workloads, in the namespaces its
// namespaceSelector matches, that its selector matches. A PlacementPolicy that matches
// a workload wins over every ClusterPlacementPolicy.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cppol,categories=custom-kube-scheduler-webhook
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`,priority=1
// +kubebuilder:printcolumn:name="Workloads",type=integer,JSONPath=`.status.workloads`
// +kubebuilder:printcolumn:name="Exact",type=integer,JSONPath=`.status.exact`
// +kubebuilder:printcolumn:name="WouldMove",type=integer,JSONPath=`.status.wouldMove`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterPlacementPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterPlacementPolicySpec `json:"spec"`
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// ClusterPlacementPolicyList is a list of ClusterPlacementPolicy.
// +kubebuilder:object:root=true
type ClusterPlacementPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPlacementPolicy `json:"items"`
}
