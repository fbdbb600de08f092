package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// Set at link time (-ldflags -X main.version=...) by the Makefile and the Dockerfile,
// both from the repository's VERSION file, so the binary, the image tag and the chart
// name one version.
var (
	version   = "dev"
	revision  = ""
	buildDate = ""
)

// buildInfo is what this binary knows of how it was built.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
}

// currentBuild fills what -ldflags did not set from the module's own build info
// (a plain `go build` in a git checkout stamps vcs.revision and vcs.time).
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Revision: revision, BuildDate: buildDate, GoVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Revision == "":
				b.Revision = s.Value
			case s.Key == "vcs.time" && b.BuildDate == "":
				b.BuildDate = s.Value
			}
		}
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	if b.BuildDate == "" {
		b.BuildDate = "unknown"
	}
	return b
}

func (b buildInfo) String() string {
	return fmt.Sprintf("custom-kube-scheduler-webhook %s (revision %s, built %s, %s)", b.Version, b.Revision, b.BuildDate, b.GoVersion)
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version [--output text|json]",
		Short: "Print the version, commit, build date and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := currentBuild()
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), b)
			case "text":
				_, err := fmt.Fprintln(cmd.OutOrStdout(), b)
				return err
			default:
				return usageError("--output must be text or json, got %q", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// newBuildInfoGauge is custom_kube_scheduler_webhook_build_info{version,revision,goversion} 1,
// the conventional way to see in Prometheus which build each replica runs.
func newBuildInfoGauge(namespace string, b buildInfo) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace:   namespace,
		Name:        "build_info",
		Help:        "Always 1; its labels name the build this replica runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
