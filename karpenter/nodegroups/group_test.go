package nodegroups

import (
	"testing"

	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"
)

func TestTaintEffect(t *testing.T) {
	for in, want := range map[ekstypes.TaintEffect]corev1.TaintEffect{
		ekstypes.TaintEffectNoSchedule:       corev1.TaintEffectNoSchedule,
		ekstypes.TaintEffectNoExecute:        corev1.TaintEffectNoExecute,
		ekstypes.TaintEffectPreferNoSchedule: corev1.TaintEffectPreferNoSchedule,
		"SOMETHING_NEW":                      corev1.TaintEffectNoSchedule,
	} {
		if got := TaintEffect(in); got != want {
			t.Errorf("TaintEffect(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestArchAndOSFromAMIType(t *testing.T) {
	cases := []struct{ ami, arch, os string }{
		{"AL2_x86_64", "amd64", "linux"},
		{"AL2_x86_64_GPU", "amd64", "linux"},
		{"AL2_ARM_64", "arm64", "linux"},
		{"AL2023_ARM_64_STANDARD", "arm64", "linux"},
		{"AL2023_x86_64_NVIDIA", "amd64", "linux"},
		{"BOTTLEROCKET_ARM_64_NVIDIA", "arm64", "linux"},
		{"WINDOWS_CORE_2022_x86_64", "amd64", "windows"},
		{"CUSTOM", "", ""},
		{"", "", ""},
	}
	for _, tc := range cases {
		if got := archOf(tc.ami); got != tc.arch {
			t.Errorf("archOf(%q) = %q, want %q", tc.ami, got, tc.arch)
		}
		if got := osOf(tc.ami); got != tc.os {
			t.Errorf("osOf(%q) = %q, want %q", tc.ami, got, tc.os)
		}
	}
}

func TestFromEKSSkipsNameless(t *testing.T) {
	if _, ok := fromEKS(nil); ok {
		t.Error("nil group converted")
	}
	if _, ok := fromEKS(&ekstypes.Nodegroup{}); ok {
		t.Error("nameless group converted")
	}
}
