package clusterview

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
)

// maxInterned bounds each table of an interner: past it the table starts afresh.
const maxInterned = 4096

// interner hands out one shared copy of equal values, so that the thousands of cached
// pods of a revision share their namespace, node name, controller reference, node
// selector and repeated annotation and condition values instead of each holding the
// copy its decoding allocated. The values handed out are shared: never modify them.
//
// Each Caches owns one rather than the package: the shared values live as long as the
// cache holding them, independent caches (tests, fakes) share no state, and nothing
// global needs resetting. A table that reaches maxInterned entries is dropped, so
// the values of namespaces and revisions long gone are not kept forever: pods cached
// earlier keep their copies, later ones share new ones.
type interner struct {
	mu        sync.Mutex
	strings   map[string]string
	selectors map[string]map[string]string
	owners    map[ownerKey][]metav1.OwnerReference
}

// ownerKey is what identifies a controller reference.
type ownerKey struct {
	apiVersion, kind, name string
	uid                    types.UID
}

func newInterner() *interner {
	return &interner{
		strings:   map[string]string{},
		selectors: map[string]map[string]string{},
		owners:    map[ownerKey][]metav1.OwnerReference{},
	}
}

// string returns the shared copy of s.
func (in *interner) string(s string) string {
	if s == "" {
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.strings[s]; ok {
		return v
	}
	if len(in.strings) >= maxInterned {
		in.strings = map[string]string{}
	}
	in.strings[s] = s
	return s
}

// selector returns the shared copy of a node selector (nil when empty); m itself
// becomes the shared copy when none is known yet, so the caller gives it up.
func (in *interner) selector(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	key := karpenter.SelectorKey(m)
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.selectors[key]; ok {
		return v
	}
	if len(in.selectors) >= maxInterned {
		in.selectors = map[string]map[string]string{}
	}
	in.selectors[key] = m
	return m
}

// controllerRef returns the shared owner references of a pod controlled by ref: just
// that reference (every reader looks only for the controller), without
// BlockOwnerDeletion.
func (in *interner) controllerRef(ref *metav1.OwnerReference) []metav1.OwnerReference {
	key := ownerKey{apiVersion: ref.APIVersion, kind: ref.Kind, name: ref.Name, uid: ref.UID}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.owners[key]; ok {
		return v
	}
	if len(in.owners) >= maxInterned {
		in.owners = map[ownerKey][]metav1.OwnerReference{}
	}
	controller := true
	v := []metav1.OwnerReference{{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: &controller}}
	in.owners[key] = v
	return v
}
