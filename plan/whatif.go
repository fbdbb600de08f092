package plan

// The what-if of a policy change (`plan --cluster -f policy.yaml`): the live workloads
// an edited policy or namespace default would govern or release, each one's source and
// target before and after, and the pods the convergence loop would then move.

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Edit is a PlacementPolicy, ClusterPlacementPolicy or Namespace a what-if applies.
type Edit struct {
	// Object names it as a strategy source is named ("PlacementPolicy shop/web-split",
	// "Namespace shop").
	Object string
	// Namespace is where the workloads it may govern are ("": every namespace).
	Namespace string
	// Audit: it is in audit mode, so applying it places and moves nothing.
	Audit bool
	// Apply is the live policies and namespace defaults with it applied.
	Apply func(live *policy.Index) *policy.Index
}

// ReadEdit finds the one policy or Namespace in a manifest (false: there is none, the
// manifest is a workload's). A namespaced policy without a namespace is in
// defaultNamespace, as kubectl apply would put it. Invalid strategies and selectors are
// errors, as the API server refuses them at apply.
func ReadEdit(data []byte, defaultNamespace string) (Edit, bool, error) {
	if len(data) > maxManifest {
		return Edit{}, false, fmt.Errorf("manifest larger than %d bytes", maxManifest)
	}
	var found []Edit
	for i, doc := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return Edit{}, false, fmt.Errorf("document %d: %w", i+1, err)
		}
		e, ok, err := editOf(head, []byte(doc), defaultNamespace)
		if err != nil {
			return Edit{}, false, fmt.Errorf("document %d (%s): %w", i+1, head.Kind, err)
		}
		if ok {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return Edit{}, false, nil
	case 1:
		return found[0], true, nil
	}
	return Edit{}, false, errors.New("several policies or Namespaces: give a manifest with one")
}

// editOf reads one document; false for kinds a what-if does not apply.
func editOf(head metav1.TypeMeta, doc []byte, defaultNamespace string) (Edit, bool, error) {
	if head.Kind == "Namespace" && head.APIVersion == "v1" {
		var ns corev1.Namespace
		if err := yaml.Unmarshal(doc, &ns); err != nil {
			return Edit{}, false, err
		}
		n := policy.NamespaceOf(&ns)
		if n.Link.Name != "" {
			if err := strategy.Resolve(n.Link).Err; err != nil {
				return Edit{}, false, err
			}
		}
		return Edit{Object: "Namespace " + ns.Name, Namespace: ns.Name, Audit: n.Audit,
			Apply: func(live *policy.Index) *policy.Index { return live.WithNamespace(&ns) }}, true, nil
	}
	c, ok, err := policy.CompileDocument(head, doc, defaultNamespace)
	if err != nil || !ok {
		return Edit{}, false, err
	}
	if c.SelectorErr != nil {
		return Edit{}, false, c.SelectorErr
	}
	if err := strategy.Resolve(c.Link).Err; err != nil {
		return Edit{}, false, fmt.Errorf("spec.strategy: %w", err)
	}
	return Edit{Object: c.Link.Name, Namespace: c.Namespace, Audit: c.Audit,
		Apply: func(live *policy.Index) *policy.Index { return live.WithPolicy(c) }}, true, nil
}

// Side is a workload's strategy source before or after the edit.
type Side struct {
	// Source names it ("": no strategy applies; its pods stay where they are).
	Source   string `json:"source"`
	Strategy string `json:"strategy,omitempty"`
	// Target is the pods per term of Strategy.
	Target []int `json:"target,omitempty"`
}

// WhatIfRow is one live workload the edit governs or changes.
type WhatIfRow struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Replicas  int    `json:"replicas"`
	Before    Side   `json:"before"`
	After     Side   `json:"after"`
	// Moves counts the pods the convergence loop would move (strategy.Moves, the count
	// of an audited policy's status): those whose seat After places on another term,
	// and those no seat holds.
	Moves int `json:"moves"`
	// Pods names the pods that would move (report.AuditReport.Pods).
	Pods []string `json:"pods,omitempty"`
	// Held says why the loop would not move them yet (suspended, moves stopped).
	Held string `json:"held,omitempty"`
}

// WhatIfRows are the rows of a report built with State.WhatIf: every workload whose
// source or strategy the edit changes, and every one the edited object governs now
// and still would (no move), sorted as the report is; and the moves added up.
func WhatIfRows(r report.Report, object string) ([]WhatIfRow, int) {
	var rows []WhatIfRow
	total := 0
	for _, w := range r.Workloads {
		if w.WhatIf == nil && w.Source != object {
			continue
		}
		row := WhatIfRow{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, Replicas: w.Replicas}
		if w.Source != "" { // "": nothing places its pods now (or only an audited source would)
			row.Before = Side{Source: w.Source, Strategy: w.Strategy}
			for _, t := range w.Terms {
				row.Before.Target = append(row.Before.Target, t.Target)
			}
		}
		row.After = row.Before
		if a := w.WhatIf; a != nil {
			row.After = Side{Source: a.Source, Strategy: a.Strategy, Target: a.Target}
			row.Moves, row.Pods, row.Held = a.WouldMove, a.Pods, a.Held
		}
		total += row.Moves
		rows = append(rows, row)
	}
	return rows, total
}
