// Command custom-kube-scheduler-webhook splits a workload's replicas across capacity
// kinds (Karpenter NodePools, EKS managed node groups) by one annotation.
//
// Subcommands: serve (the admission webhook), plan (per-term targets for a replica
// count), spread (how a namespace's workloads are actually spread), version. Named
// kubectl-spread (a symlink or copy on PATH), it is the kubectl plugin `kubectl spread`.
package main

//go:generate env UPDATE_DOCS=1 go test -count=1 -run TestCLIReference .

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := commandFor(os.Args[0]).ExecuteContext(ctx)
	stop()
	if err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if ee == nil || !ee.logged {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(code)
	}
}

// pluginSpread is the name under which kubectl runs the binary as `kubectl spread`: a
// copy or symlink of it named so, anywhere on PATH.
const pluginSpread = "kubectl-spread"

// commandFor is the command the binary runs when invoked as argv0: the spread report
// alone as the kubectl plugin kubectl-spread, the whole CLI otherwise.
func commandFor(argv0 string) *cobra.Command {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") != pluginSpread {
		return newRootCommand()
	}
	cmd := newSpreadCommand()
	cmd.Use = "kubectl spread [deployment/NAME | statefulset/NAME | replicaset/NAME | rollout/NAME | NAME]"
	cmd.Example = strings.ReplaceAll(cmd.Example, "custom-kube-scheduler-webhook spread", "kubectl spread")
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	return cmd
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "custom-kube-scheduler-webhook",
		Short:         "Split a workload's replicas across Karpenter NodePools and EKS node groups by one annotation",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what the version subcommand prints.
		Version: currentBuild().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	root.AddCommand(newServeCommand(), newPlanCommand(), newSpreadCommand(), newVersionCommand())
	return root
}
