//go:build bench

package bench

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// deployment is a Deployment of small pods (kwok runs them; Karpenter sizes nodes
// by their requests) with the strategy on the pod template.
func deployment(ns, name, strat string, replicas int) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"app": name},
					Annotations: map[string]string{"CustomPodScheduleStrategy": strat},
				},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("10m"),
							corev1.ResourceMemory: resource.MustParse("16Mi"),
						}},
					}},
					TerminationGracePeriodSeconds: ptr(int64(0)),
				},
			},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// burstTimes are the seconds from the Deployment's create call until all its pods
// exist, and until all are Running.
type burstTimes struct{ exist, running time.Duration }

// createAndWatch creates d and watches its pods until all n are Running (or only
// until they exist, when running is false), within timeout; atExist (if not nil) is
// called once all exist.
func (b *bench) createAndWatch(ctx context.Context, d *appsv1.Deployment, running bool, timeout time.Duration, atExist func()) (burstTimes, error) {
	var bt burstTimes
	pods := b.c.Client.CoreV1().Pods(d.Namespace)
	sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return bt, fmt.Errorf("listing pods: %w", err)
	}
	if len(list.Items) > 0 {
		return bt, fmt.Errorf("%d pods of %s/%s left from an earlier run", len(list.Items), d.Namespace, d.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n := int(*d.Spec.Replicas)
	exist, run := map[string]bool{}, map[string]bool{}
	rv := list.ResourceVersion
	start := time.Now()
	if _, err := b.c.Client.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return bt, fmt.Errorf("creating deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	for {
		w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			return bt, fmt.Errorf("watching pods of %s/%s (%d exist, %d Running): %w", d.Namespace, d.Name, len(exist), len(run), err)
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			switch ev.Type {
			case watch.Added, watch.Modified:
				exist[p.Name] = true
				if p.Status.Phase == corev1.PodRunning {
					run[p.Name] = true
				}
			case watch.Deleted:
				delete(exist, p.Name)
				delete(run, p.Name)
			}
			if bt.exist == 0 && len(exist) >= n {
				bt.exist = time.Since(start)
				if atExist != nil {
					atExist()
				}
				if !running {
					w.Stop()
					return bt, nil
				}
			}
			if len(run) >= n {
				bt.running = time.Since(start)
				w.Stop()
				return bt, nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return bt, fmt.Errorf("%s/%s: %d of %d pods exist, %d Running after %s", d.Namespace, d.Name, len(exist), n, len(run), timeout)
		}
	}
}

// remove deletes a Deployment and its pods at once and waits until no pod is left.
func (b *bench) remove(ctx context.Context, ns, name string) error {
	bg := metav1.DeletePropagationBackground
	if err := b.c.Client.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		return fmt.Errorf("deleting deployment %s/%s: %w", ns, name, err)
	}
	sel := metav1.ListOptions{LabelSelector: "app=" + name}
	return wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		// Also the pods the ReplicaSet is still creating while it is being deleted.
		if err := b.c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, sel); err != nil {
			return false, nil
		}
		list, err := b.c.Client.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return false, nil
		}
		return len(list.Items) == 0, nil
	})
}
