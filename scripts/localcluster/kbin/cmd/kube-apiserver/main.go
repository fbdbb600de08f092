// Command kube-apiserver is the upstream kube-apiserver built from the k8s.io/kubernetes module, for the
// local test cluster only (scripts/localcluster). It is never shipped.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as in the upstream binary
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in the upstream binary
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as in the upstream binary
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
