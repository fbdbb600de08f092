// Command custom-kube-scheduler-webhook splits a workload's replicas across capacity
// kinds (Karpenter NodePools, EKS managed node groups) by one annotation.
//
// Subcommands: serve (the admission webhook), plan (per-term targets for a replica
// count), spread (how a namespace's workloads are actually spread), version.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		os.Exit(code)
	}
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
