// Command kubelet is the upstream kubelet built from the k8s.io/kubernetes module, for the
// local test cluster's real node only (scripts/localcluster/realnode.sh). It is never shipped.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as in the upstream binary
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in the upstream binary
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as in the upstream binary
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand()))
}
