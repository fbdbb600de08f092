package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/plan"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// whatIfDoc is `plan --cluster -f policy.yaml`'s document.
type whatIfDoc struct {
	// Object is the policy or Namespace planned; Audit: it is in audit mode.
	Object    string           `json:"object"`
	Audit     bool             `json:"audit,omitempty"`
	Workloads []plan.WhatIfRow `json:"workloads"`
	// Moves adds the workloads' moves up.
	Moves   int      `json:"moves"`
	Stopped string   `json:"stopped,omitempty"`
	Unseen  []string `json:"unseen,omitempty"`
}

// whatIfFlags are the flags the what-if reads; it refuses the others (--replicas,
// --cost, ...): it plans each workload's live replicas, and no cost.
var whatIfFlags = map[string]bool{"filename": true, "cluster": true, "output": true, "webhook-namespace": true,
	"kubeconfig": true, "context": true, "namespace": true}

// whatIfEdit reads -f as a policy or Namespace manifest; false: it is a workload's.
func (o *planOptions) whatIfEdit(cmd *cobra.Command) (plan.Edit, bool, error) {
	if o.file == "" {
		return plan.Edit{}, false, nil
	}
	data, err := os.ReadFile(o.file)
	if err != nil {
		return plan.Edit{}, false, usageError("read manifest: %w", err)
	}
	ns := o.kube.namespace
	if ns == "" && o.cluster {
		kc, err := o.kube.clients()
		if err != nil {
			return plan.Edit{}, false, err
		}
		ns = kc.namespace
	}
	e, ok, err := plan.ReadEdit(data, ns)
	if err != nil {
		return e, false, &exitError{code: 2, err: fmt.Errorf("%s: %w", o.file, err)}
	}
	if ok && !o.cluster {
		return e, false, usageError("%s is a policy or Namespace: its what-if needs --cluster", o.file)
	}
	var ignored []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if ok && !whatIfFlags[f.Name] {
			ignored = append(ignored, "--"+f.Name)
		}
	})
	if len(ignored) > 0 {
		return e, false, usageError("%s is a policy or Namespace: its what-if reads each workload's live replicas and plans no cost, so it does not take %s", o.file, strings.Join(ignored, ", "))
	}
	return e, ok, nil
}

// runWhatIf lists the live workloads the edit would govern or release, and the pods the
// loop would then move: exit 3 when it would move any (spread's "off target" for what
// applying it would leave), 0 when none.
func (o *planOptions) runWhatIf(cmd *cobra.Command, e plan.Edit) error {
	format, err := outputFormat(o.output)
	if err != nil {
		return err
	}
	kc, err := o.kube.clients()
	if err != nil {
		return err
	}
	ns := e.Namespace
	if ns == "" {
		ns = metav1.NamespaceAll
	}
	r, err := report.Collect(cmd.Context(), kc.client, kc.dynamic, report.Options{Namespace: ns, WebhookNamespace: o.webhookNamespace, SkipServing: true, WhatIf: e.Apply})
	if err != nil {
		return err
	}
	doc := whatIfDoc{Object: e.Object, Audit: e.Audit, Stopped: r.Stopped, Unseen: r.Unseen}
	doc.Workloads, doc.Moves = plan.WhatIfRows(r, e.Object)
	if doc.Workloads == nil {
		doc.Workloads = []plan.WhatIfRow{}
	}
	if format == "json" || format == "yaml" {
		err = writeStructured(cmd.OutOrStdout(), doc, format)
	} else {
		err = writeWhatIf(cmd.OutOrStdout(), doc)
	}
	if err != nil || doc.Moves == 0 {
		return err
	}
	return &exitError{code: exitNotExact, err: fmt.Errorf("applying %s would move %d pods", e.Object, doc.Moves)}
}

// writeWhatIf writes the what-if as a table, one workload a row.
func writeWhatIf(w io.Writer, doc whatIfDoc) error {
	if doc.Audit {
		fmt.Fprintf(w, "%s is in audit mode: applying it places and moves nothing; plan it with spec.mode: Enforce to see what enforcing it moves\n\n", doc.Object)
	}
	if doc.Stopped != "" {
		fmt.Fprintf(w, "%s\n\n", doc.Stopped)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tREPLICAS\tSOURCE NOW\tTARGET NOW\tSOURCE AFTER\tTARGET AFTER\tMOVES")
	var notes []string
	for _, row := range doc.Workloads {
		name := fmt.Sprintf("%s %s/%s", row.Kind, row.Namespace, row.Name)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\n", name, row.Replicas, orDash(row.Before.Source), targetString(row.Before.Target),
			orDash(row.After.Source), targetString(row.After.Target), row.Moves)
		if len(row.Pods) > 0 {
			notes = append(notes, fmt.Sprintf("%s moves: %s", name, podList(row.Pods)))
		}
		if row.Held != "" {
			notes = append(notes, fmt.Sprintf("%s: held, moves once lifted: %s", name, row.Held))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write what-if: %w", err)
	}
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
	fmt.Fprintf(w, "%s: %d workloads, %d pods would move\n", doc.Object, len(doc.Workloads), doc.Moves)
	return writeUnseen(w, doc.Unseen)
}

// podList names at most ten pods, and says how many more (-o json names them all).
func podList(pods []string) string {
	const shown = 10
	if len(pods) <= shown {
		return strings.Join(pods, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(pods[:shown], ", "), len(pods)-shown)
}

// targetString is a target per term, "2 1 3", or "-" without one.
func targetString(t []int) string {
	if len(t) == 0 {
		return "-"
	}
	return strings.Trim(fmt.Sprint(t), "[]")
}
