// Package nodegroups keeps a periodically refreshed view of the EKS managed node
// groups of one cluster, read through the EKS API (ListNodegroups +
// DescribeNodegroup). A group is described by what its nodes will carry
// (labels, taints), not by how many nodes it has now, so a group scaled to zero
// still describes capacity a pod can be sent to.
package nodegroups

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
)

// Labels that EKS puts on every node of a managed node group.
const (
	// LabelNodeGroup carries the node group name.
	LabelNodeGroup = "eks.amazonaws.com/nodegroup"
	// LabelCapacityType carries the EKS capacity type (ON_DEMAND, SPOT, CAPACITY_BLOCK).
	LabelCapacityType = "eks.amazonaws.com/capacityType"
)

// Group is one managed node group as its nodes will look to the scheduler.
type Group struct {
	// Name is the node group name.
	Name string
	// Status is the EKS status (ACTIVE, CREATING, UPDATING, DEGRADED, ...).
	Status string
	// CapacityType is ON_DEMAND, SPOT or CAPACITY_BLOCK.
	CapacityType string
	// Labels are the Kubernetes labels every node of the group carries: the
	// group's configured labels plus LabelNodeGroup, LabelCapacityType and, when
	// the AMI type tells them, kubernetes.io/arch and kubernetes.io/os.
	Labels map[string]string
	// InstanceTypes lists the group's instance types; empty when they come from
	// a launch template and EKS does not report them.
	InstanceTypes []string
	// AMIType is the EKS AMI type (e.g. AL2023_ARM_64_STANDARD, CUSTOM).
	AMIType string
	// Taints are the group's Kubernetes taints with EKS effect names mapped to
	// Kubernetes ones.
	Taints []corev1.Taint
	// Size is the group's scaling configuration; it changes with every scale and does
	// not change what a group serves (the Cache's generation ignores it).
	Size Size
}

// Size is a node group's scaling configuration, in nodes.
type Size struct {
	// Known is false when EKS reported no scaling configuration.
	Known             bool
	Min, Max, Desired int
}

// Headroom is how many more nodes the group may grow by: max size minus desired size
// (0 when unknown or already at max).
func (s Size) Headroom() int {
	if !s.Known || s.Max <= s.Desired {
		return 0
	}
	return s.Max - s.Desired
}

// Usable reports whether the group can still carry pods: groups being deleted
// or that failed to create or delete are left out.
func (g Group) Usable() bool {
	switch ekstypes.NodegroupStatus(g.Status) {
	case ekstypes.NodegroupStatusDeleting, ekstypes.NodegroupStatusCreateFailed, ekstypes.NodegroupStatusDeleteFailed:
		return false
	}
	return true
}

// fromEKS converts a DescribeNodegroup result. It returns false for a group
// without a name, which EKS never sends.
func fromEKS(ng *ekstypes.Nodegroup) (Group, bool) {
	if ng == nil || ng.NodegroupName == nil || *ng.NodegroupName == "" {
		return Group{}, false
	}
	g := Group{
		Name:          *ng.NodegroupName,
		Status:        string(ng.Status),
		CapacityType:  string(ng.CapacityType),
		AMIType:       string(ng.AmiType),
		InstanceTypes: append([]string(nil), ng.InstanceTypes...),
		Labels:        make(map[string]string, len(ng.Labels)+4),
	}
	if sc := ng.ScalingConfig; sc != nil {
		g.Size = Size{Known: true, Min: int(aws.ToInt32(sc.MinSize)), Max: int(aws.ToInt32(sc.MaxSize)), Desired: int(aws.ToInt32(sc.DesiredSize))}
	}
	if g.CapacityType == "" {
		// EKS documents ON_DEMAND as the default when a group is created without one.
		g.CapacityType = string(ekstypes.CapacityTypesOnDemand)
	}
	if arch := archOf(g.AMIType); arch != "" {
		g.Labels[corev1.LabelArchStable] = arch
	}
	if os := osOf(g.AMIType); os != "" {
		g.Labels[corev1.LabelOSStable] = os
	}
	for k, v := range ng.Labels {
		g.Labels[k] = v
	}
	// EKS sets these itself; a configured label cannot override them.
	g.Labels[LabelNodeGroup] = g.Name
	g.Labels[LabelCapacityType] = g.CapacityType
	for _, t := range ng.Taints {
		if t.Key == nil {
			continue
		}
		taint := corev1.Taint{Key: *t.Key, Effect: TaintEffect(t.Effect)}
		if t.Value != nil {
			taint.Value = *t.Value
		}
		g.Taints = append(g.Taints, taint)
	}
	return g, true
}

// TaintEffect maps an EKS taint effect to the Kubernetes one. An unknown
// effect maps to NoSchedule, the conservative reading: the pod then gets a
// toleration rather than staying Pending.
func TaintEffect(e ekstypes.TaintEffect) corev1.TaintEffect {
	switch e {
	case ekstypes.TaintEffectNoExecute:
		return corev1.TaintEffectNoExecute
	case ekstypes.TaintEffectPreferNoSchedule:
		return corev1.TaintEffectPreferNoSchedule
	default:
		return corev1.TaintEffectNoSchedule
	}
}

// archOf derives kubernetes.io/arch from an EKS AMI type name
// (AL2_ARM_64, AL2023_x86_64_STANDARD, BOTTLEROCKET_ARM_64_NVIDIA, ...).
// CUSTOM and unknown names give "".
func archOf(amiType string) string {
	switch {
	case strings.Contains(amiType, "ARM_64"):
		return "arm64"
	case strings.Contains(amiType, "x86_64"):
		return "amd64"
	}
	return ""
}

// osOf derives kubernetes.io/os from an EKS AMI type name. CUSTOM and empty
// give "".
func osOf(amiType string) string {
	switch {
	case amiType == "" || amiType == string(ekstypes.AMITypesCustom):
		return ""
	case strings.HasPrefix(amiType, "WINDOWS_"):
		return "windows"
	}
	return "linux"
}
