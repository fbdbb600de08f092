package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are the kubeconfig flags of the commands that read a cluster.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func (k *kubeFlags) register(f *pflag.FlagSet) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&k.context, "context", "", "the kubeconfig context to use")
	f.StringVarP(&k.namespace, "namespace", "n", "", "namespace (default: the context's namespace)")
}

// kubeClients are the clients of one kubeconfig context, and its namespace.
type kubeClients struct {
	client    kubernetes.Interface
	dynamic   dynamic.Interface
	namespace string
}

// clients loads the kubeconfig and builds the clients; the namespace is --namespace,
// else the context's.
func (k *kubeFlags) clients() (kubeClients, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	restCfg, err := loader.ClientConfig()
	if err != nil {
		return kubeClients{}, fmt.Errorf("load kubeconfig: %w", err)
	}
	c := kubeClients{namespace: k.namespace}
	if c.namespace == "" {
		if c.namespace, _, err = loader.Namespace(); err != nil {
			return kubeClients{}, fmt.Errorf("read the context's namespace: %w", err)
		}
	}
	if c.client, err = kubernetes.NewForConfig(restCfg); err != nil {
		return kubeClients{}, fmt.Errorf("create Kubernetes client: %w", err)
	}
	if c.dynamic, err = dynamic.NewForConfig(restCfg); err != nil {
		return kubeClients{}, fmt.Errorf("create dynamic client: %w", err)
	}
	return c, nil
}
