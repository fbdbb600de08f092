// Command argodiff tells whether Argo CD would find the chart's objects out of sync with
// the live cluster, with Argo CD's own diff code: gitops-engine's pkg/diff.Diff, the
// function Argo CD's application controller calls for its default (client-side) diff.
// It reads the objects `helm template` rendered, reads each live object from the API
// server, prints one line per object and exits 1 when any differs.
//
// Diff applies gitops-engine's own normalization (remarshalling into the typed object,
// the scheme's defaults, status and server-kept metadata removed) and then the
// three-way merge kubectl would apply. Argo CD adds its ignoreDifferences normalizer,
// which without user-written rules changes nothing: the no-op normalizer stands for it.
//
// gitops-engine v0.7.3 (the newest release under this module path; later code moved
// into Argo CD's own module, which does not build here) imports k8s.io/kubernetes
// v1.23, whose staging modules must be pinned by replace lines. That is why this tool
// is a module of its own, beside deploy/test/gitopsdiff (Flux's code, Kubernetes 0.37).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/argoproj/gitops-engine/pkg/diff"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	manifests := flag.String("f", "-", "the rendered objects (helm template's output; - is stdin)")
	namespace := flag.String("n", "default", "namespace of namespaced objects that name none")
	flag.Parse()
	drifted, err := run(context.Background(), *kubeconfig, *manifests, *namespace, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "argodiff:", err)
		os.Exit(2)
	}
	if drifted {
		os.Exit(1)
	}
}

// run compares every rendered object with its live object under Argo CD's diff, prints
// one line per object, and reports whether any differs.
func run(ctx context.Context, kubeconfig, manifests, namespace string, out io.Writer) (bool, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("discovery client: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		return false, fmt.Errorf("discovery: %w", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("dynamic client: %w", err)
	}
	objs, err := readObjects(manifests)
	if err != nil {
		return false, err
	}
	drifted := false
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return false, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		res := dynamic.ResourceInterface(dyn.Resource(m.Resource))
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if o.GetNamespace() == "" {
				o.SetNamespace(namespace)
			}
			res = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		what := fmt.Sprintf("%s %s", o.GetKind(), name(o.GetNamespace(), o.GetName()))
		live, err := res.Get(ctx, o.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			drifted = true
			fmt.Fprintf(out, "argo  DRIFT    %s (missing)\n", what)
			continue
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", what, err)
		}
		r, err := diff.Diff(o, live, diff.WithNormalizer(diff.GetNoopNormalizer()))
		if err != nil {
			return false, fmt.Errorf("argo diff of %s: %w", what, err)
		}
		if r.Modified {
			drifted = true
			fmt.Fprintf(out, "argo  DRIFT    %s: live %s, predicted %s\n", what, r.NormalizedLive, r.PredictedLive)
		} else {
			fmt.Fprintf(out, "argo  in sync  %s\n", what)
		}
	}
	return drifted, nil
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
