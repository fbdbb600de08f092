// Command gitopsdiff tells whether Flux would find the chart's objects out of sync with
// the live cluster: it reads the objects `helm template` rendered and compares each with
// its live object with fluxcd/pkg/ssa's jsondiff.UnstructuredList, the function
// helm-controller's drift detection calls (a server-side apply dry run of each object
// with the controller's field owner, compared with the live object), with
// helm-controller's options. It prints one line per object and exits 1 when any differs.
// Argo CD's diff is deploy/test/argodiff, with gitops-engine's own code.
//
// It lives in a module of its own so that the product's go.mod does not grow.
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

	"github.com/fluxcd/pkg/ssa/jsondiff"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

// run compares every rendered object with its live object under Flux's diff, prints
// one line per object, and reports whether any differs.
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
