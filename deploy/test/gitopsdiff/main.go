// Command gitopsdiff tells whether Argo CD or Flux would find the chart's objects out of
// sync with the live cluster: it reads the objects `helm template` rendered and compares
// each with its live object as the two tools do, and exits 1 when any differs.
//
//   - Flux: fluxcd/pkg/ssa's jsondiff.UnstructuredList, the function helm-controller's
//     drift detection calls (a server-side apply dry run of each object with the
//     controller's field owner, compared with the live object), with helm-controller's
//     options. This is Flux's own code, run against the real API server.
//   - Argo CD: its default (client-side) diff, gitops-engine's pkg/diff.Diff, is
//     re-implemented here (argoDiff), because that library cannot be built beside this
//     tool: it imports k8s.io/kubernetes. It is the same three-way merge: the patch from
//     the live object to the rendered one (strategic merge for built-in kinds, JSON merge
//     for others) taking the last-applied configuration (or, without one, the rendered
//     object) as the original, applied to the live object; the object is out of sync when
//     that changes it. Argo CD's server-side diff compares only the fields its own field
//     manager would apply, as Flux's dry run does.
//
// It lives in a module of its own so that the product's go.mod does not grow.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/fluxcd/pkg/ssa/jsondiff"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/jsonmergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	manifests := flag.String("f", "-", "the rendered objects (helm template's output; - is stdin)")
	namespace := flag.String("n", "default", "namespace of namespaced objects that name none")
	flag.Parse()
	drifted, err := run(context.Background(), *kubeconfig, *manifests, *namespace, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gitopsdiff:", err)
		os.Exit(2)
	}
	if drifted {
		os.Exit(1)
	}
}

// run compares every rendered object with its live object under both tools' diffs,
// prints one line per object and tool, and reports whether any differs.
func run(ctx context.Context, kubeconfig, manifests, namespace string, out io.Writer) (bool, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false, fmt.Errorf("HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return false, fmt.Errorf("discovery: %w", err)
	}
	c, err := client.New(cfg, client.Options{HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return false, fmt.Errorf("client: %w", err)
	}
	objs, err := readObjects(manifests)
	if err != nil {
		return false, err
	}
	for _, o := range objs {
		m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			return false, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace && o.GetNamespace() == "" {
			o.SetNamespace(namespace)
		}
	}
	drifted := false

	// Flux: helm-controller's drift detection (internal/action/diff.go) with its options.
	set, err := jsondiff.UnstructuredList(ctx, c, objs,
		jsondiff.FieldOwner("helm-controller"), jsondiff.MaskSecrets(true), jsondiff.Rationalize(true))
	if err != nil {
		return false, fmt.Errorf("flux ssa diff: %w", err)
	}
	for _, d := range set {
		what := fmt.Sprintf("%s %s", d.GroupVersionKind().Kind, name(d.GetNamespace(), d.GetName()))
		switch d.Type {
		case jsondiff.DiffTypeNone, jsondiff.DiffTypeExclude:
			fmt.Fprintf(out, "flux  in sync  %s\n", what)
		default:
			drifted = true
			fmt.Fprintf(out, "flux  DRIFT    %s (%s): %s\n", what, d.Type, d.Patch.String())
		}
	}

	// Argo CD: the default diff, per object.
	for _, o := range objs {
		what := fmt.Sprintf("%s %s", o.GetKind(), name(o.GetNamespace(), o.GetName()))
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKeyFromObject(o), live)
		if apierrors.IsNotFound(err) {
			drifted = true
			fmt.Fprintf(out, "argo  DRIFT    %s (missing)\n", what)
			continue
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", what, err)
		}
		changed, patch, err := argoDiff(o, live)
		if err != nil {
			return false, fmt.Errorf("argo diff of %s: %w", what, err)
		}
		if changed {
			drifted = true
			fmt.Fprintf(out, "argo  DRIFT    %s: %s\n", what, patch)
		} else {
			fmt.Fprintf(out, "argo  in sync  %s\n", what)
		}
	}
	return drifted, nil
}

// argoDiff is gitops-engine's pkg/diff.Diff (v0.7.3: Diff, TwoWayDiff, ThreeWayDiff,
// threeWayMergePatch), without the scheme defaulting it applies to both sides, which
// needs k8s.io/kubernetes: the original is the live object's last-applied configuration
// or, without one, the rendered object itself; the three-way patch (strategic merge for
// kinds client-go knows, JSON merge with the live object's extra fields removed
// otherwise) is applied to the live object; the object is out of sync when that changes
// it. It returns the patch.
func argoDiff(config, live *unstructured.Unstructured) (bool, string, error) {
	config, live = normalize(remarshal(config)), normalize(remarshal(live))
	orig := config.DeepCopy()
	if la := live.GetAnnotations()["kubectl.kubernetes.io/last-applied-configuration"]; la != "" {
		orig = &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(la), &orig.Object); err != nil {
			return false, "", fmt.Errorf("last-applied-configuration: %w", err)
		}
		orig = normalize(orig)
	}
	origJSON, err := json.Marshal(orig.Object)
	if err != nil {
		return false, "", err
	}
	configJSON, err := json.Marshal(config.Object)
	if err != nil {
		return false, "", err
	}
	var patch, liveJSON, predicted []byte
	if typed, err := scheme.Scheme.New(config.GroupVersionKind()); err == nil {
		if liveJSON, err = json.Marshal(live.Object); err != nil {
			return false, "", err
		}
		metaOf, err := strategicpatch.NewPatchMetaFromStruct(typed)
		if err != nil {
			return false, "", err
		}
		if patch, err = strategicpatch.CreateThreeWayMergePatch(origJSON, configJSON, liveJSON, metaOf, true); err != nil {
			return false, "", err
		}
		if predicted, err = strategicpatch.StrategicMergePatch(liveJSON, patch, typed); err != nil {
			return false, "", err
		}
	} else {
		// Fields only the live object has (the API server's defaults) are not compared.
		live.Object = removeMapFields(orig.Object, live.Object)
		if liveJSON, err = json.Marshal(live.Object); err != nil {
			return false, "", err
		}
		if patch, err = jsonmergepatch.CreateThreeWayJSONMergePatch(origJSON, configJSON, liveJSON); err != nil {
			return false, "", err
		}
		if predicted, err = jsonpatch.MergePatch(liveJSON, patch); err != nil {
			return false, "", err
		}
	}
	var a, b any
	if err := json.Unmarshal(liveJSON, &a); err != nil {
		return false, "", err
	}
	if err := json.Unmarshal(predicted, &b); err != nil {
		return false, "", err
	}
	return !reflect.DeepEqual(a, b), string(patch), nil
}

// remarshal is gitops-engine's remarshal: an object of a kind client-go knows is decoded
// into its type and encoded again (quantities in canonical form, empty optional fields
// gone), keeping only the map fields it had; another kind, or one with fields the type
// lacks, is kept as it is.
func remarshal(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	typed, err := scheme.Scheme.New(u.GroupVersionKind())
	if err != nil {
		return u
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return u
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(typed); err != nil {
		return u
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return u
	}
	return &unstructured.Unstructured{Object: removeMapFields(u.Object, out)}
}

// normalize drops what gitops-engine's Normalize and its remarshal drop before
// comparing: status, and metadata the server keeps (creationTimestamp and the rest are
// absent from the rendered object, so the three-way patch leaves them anyway).
func normalize(u *unstructured.Unstructured) *unstructured.Unstructured {
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	return u
}

// removeMapFields keeps of live only the map fields config has (gitops-engine's
// jsonutil.RemoveMapFields), recursively; lists and values are kept whole.
func removeMapFields(config, live map[string]any) map[string]any {
	out := map[string]any{}
	for k, cv := range config {
		lv, ok := live[k]
		if !ok {
			continue
		}
		cm, cok := cv.(map[string]any)
		lm, lok := lv.(map[string]any)
		if cok && lok {
			out[k] = removeMapFields(cm, lm)
			continue
		}
		out[k] = lv
	}
	return out
}

// readObjects decodes the YAML documents of path (- for stdin), skipping empty ones.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		defer f.Close()
		r = f
	}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []*unstructured.Unstructured
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &o.Object); err != nil {
			return nil, fmt.Errorf("decoding a document of %s: %w", path, err)
		}
		if len(o.Object) == 0 || strings.TrimSpace(o.GetKind()) == "" {
			continue
		}
		objs = append(objs, o)
	}
}

func name(ns, n string) string {
	if ns == "" {
		return n
	}
	return ns + "/" + n
}
