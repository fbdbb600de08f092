//go:build bench

package bench

// TestScalePlaced is `make scale SCALE_MODE=placed` (scripts/scale.sh): the replicas'
// memory, restart and idle cost with many placed pods (100,000 by default), put into
// the API server directly instead of through Deployments, Karpenter and the webhook,
// which on two cores would take hours. The pods are what the webhook leaves behind: each
// owned by a ReplicaSet, labelled as placed, annotated with its seat, term and
// reservation, its node selector the seat's term, bound to a node of that term's
// capacity type. scripts/scale.sh stops the cluster's kube-controller-manager (its
// ReplicaSet and garbage collectors would act on pods they did not create), Karpenter,
// the scheduler and kwok (nothing here is for them to do: kwok would take a status write
// per pod, an hour at this size) before the test runs, so the pods stay Pending.
//
// Settings (environment): SCALE_PLACED_PODS (the pods, default 100,000 from
// scripts/scale.sh), SCALE_REPLICAS (pods per ReplicaSet, default 100),
// SCALE_PODS_PER_NODE (default 250), SCALE_CREATORS (concurrent creates, default 32),
// and TestScale's SCALE_WEBHOOK_BIN, SCALE_SERVE_ENV, SCALE_OUT, SCALE_RUNNING_TIMEOUT.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// placedNS holds the placed pods. It is not opted in: the pods are created placed, and
// the webhook, which would leave them as they are, is not called for each.
const placedNS = "scale-placed"

func TestScalePlaced(t *testing.T) {
	n := envInt("SCALE_PLACED_PODS", 0)
	if n <= 0 {
		t.Skip("SCALE_PLACED_PODS not set: run `make scale SCALE_MODE=placed`")
	}
	ctx := context.Background()
	s, err := setupScale(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.runPlaced(ctx, n); err != nil {
		t.Error(err)
	}
	fmt.Println(s.out.String())
	if path := os.Getenv("SCALE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(s.out.String()), 0o644); err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
}

func (s *scale) runPlaced(ctx context.Context, n int) error {
	host, _ := os.Hostname()
	figs := make([]replicaFigures, len(s.replicas))
	if err := s.emptyMemory(ctx); err != nil {
		return err
	}
	start := time.Now()
	nodes, sets, err := s.createPlaced(ctx, n)
	if err != nil {
		return err
	}
	s.logf("%d placed pods of %d ReplicaSets on %d nodes created after %s", n, sets, nodes, time.Since(start).Round(time.Second))
	waited, rate := waitQuiet(ctx, 3*time.Minute)
	s.logf("quiet (%.2f cores) after %s", rate, waited.Round(time.Second))
	if err := s.fullMemory(ctx, figs, n); err != nil {
		return err
	}
	machine, err := s.steadyState(ctx, figs)
	if err != nil {
		return err
	}
	if err := s.restartEach(ctx, figs); err != nil {
		return err
	}

	s.printf("## Scale, placed pods (`make scale SCALE_MODE=placed`), %s, %d CPUs (%s)\n\n", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), host)
	s.printf("serve settings: %s (plus its own token of the chart's ServiceAccount); 2 replicas. "+
		"%d pods created placed (seat, term and reservation annotations, node selector of the seat's term of `%s`, bound to nodes of that capacity type; Pending: no kubelet runs them), "+
		"%d per ReplicaSet, %d ReplicaSets, %d nodes; kube-controller-manager, the scheduler, kwok and Karpenter stopped.\n\n",
		strings.Join(s.env, " "), n, burstStrategy, s.perWL, sets, nodes)
	s.printReplicas(figs, false)
	s.printf("\nMeasured as in `make scale`'s table; the whole machine used %.2f cores in the steady window (API server %.2f, etcd %.2f, kwok %.2f).\n\n",
		sumValues(machine)/steadyWindow.Seconds(), machine["API server"]/steadyWindow.Seconds(), machine["etcd"]/steadyWindow.Seconds(), machine["kwok"]/steadyWindow.Seconds())
	s.printf("API requests at steady state by verb and resource (60 s):\n\n| replica | requests |\n|---|---|\n")
	for i, r := range s.replicas {
		s.printf("| %s | %s |\n", r.Name, formatCounts(figs[i].reqsBy))
	}
	s.printf("\n")
	s.printNotes()
	return nil
}

// createPlaced creates the nodes, the ReplicaSets and n placed pods. The pods stay
// Pending, bound to their nodes: no kubelet or kwok runs them, which would take each
// another write. It returns the nodes and ReplicaSets created.
func (s *scale) createPlaced(ctx context.Context, n int) (nodes, sets int, err error) {
	strat, err := strategy.Parse(burstStrategy)
	if err != nil {
		return 0, 0, fmt.Errorf("parse %q: %w", burstStrategy, err)
	}
	if _, err := s.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: placedNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, 0, fmt.Errorf("creating namespace %s: %w", placedNS, err)
	}
	perSet := s.perWL
	sets = (n + perSet - 1) / perSet
	perNode := envInt("SCALE_PODS_PER_NODE", 250)

	// How many pods each term gets, so that each term has nodes enough.
	perTerm := make([]int, len(strat.Terms))
	seats := strat.Seats(perSet)
	for set := range sets {
		for seat := range setSize(set, sets, perSet, n) {
			perTerm[seats[seat]]++
		}
	}
	termNodes := make([][]string, len(strat.Terms))
	for term, pods := range perTerm {
		for i := range (pods + perNode - 1) / perNode {
			name := fmt.Sprintf("placed-t%d-%04d", term+1, i)
			if err := s.createNode(ctx, name, strat.Terms[term], perNode); err != nil {
				return 0, 0, err
			}
			termNodes[term] = append(termNodes[term], name)
		}
		nodes += len(termNodes[term])
	}

	list, err := s.pods.CoreV1().Pods(placedNS).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, 0, fmt.Errorf("listing pods of %s: %w", placedNS, err)
	}
	if len(list.Items) > 0 {
		return 0, 0, fmt.Errorf("pods in %s before the run", placedNS)
	}
	var created atomic.Int64
	var g errgroup.Group
	g.SetLimit(envInt("SCALE_CREATORS", 32))
	// Submitting waits for room in the group: it runs beside the progress log.
	submit := func() error {
		next := make([]int, len(strat.Terms)) // pods bound per term so far, for the node
		for set := range sets {
			name := fmt.Sprintf("placed-%04d", set+1)
			size := setSize(set, sets, perSet, n)
			rs, err := s.c.Client.AppsV1().ReplicaSets(placedNS).Create(ctx, placedReplicaSet(name, size), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating ReplicaSet %s: %w", name, err)
			}
			for seat := 1; seat <= size; seat++ {
				term := seats[seat-1]
				node := termNodes[term][next[term]/perNode]
				next[term]++
				pod := placedPod(rs, seat, term, strat.Terms[term], node)
				g.Go(func() error {
					if _, err := s.pods.CoreV1().Pods(placedNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
						return fmt.Errorf("creating pod %s: %w", pod.Name, err)
					}
					created.Add(1)
					return nil
				})
			}
		}
		return nil
	}
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	createErr := make(chan error, 1)
	go func() {
		err := submit()
		if werr := g.Wait(); err == nil {
			err = werr
		}
		createErr <- err
	}()
	for {
		select {
		case err := <-createErr:
			if err != nil {
				return 0, 0, err
			}
			return nodes, sets, nil
		case <-progress.C:
			s.logf("%s: %d of %d pods created", placedNS, created.Load(), n)
		}
	}
}

// setSize is the size of the set-th of sets ReplicaSets of perSet pods holding n in all.
func setSize(set, sets, perSet, n int) int {
	if set == sets-1 && n%perSet != 0 {
		return n % perSet
	}
	return perSet
}

// createNode creates a node carrying term's labels and room for perNode pods.
func (s *scale) createNode(ctx context.Context, name string, term strategy.Term, perNode int) error {
	labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
	for _, l := range term.Labels {
		labels[l.Key] = l.Value
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("4Ti"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(perNode), resource.DecimalSI),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := s.c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	return nil
}

// placedReplicaSet is a ReplicaSet of size pods of the bench's Deployment template.
func placedReplicaSet(name string, size int) *appsv1.ReplicaSet {
	d := deployment(placedNS, name, burstStrategy, size)
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: placedNS},
		Spec:       appsv1.ReplicaSetSpec{Replicas: d.Spec.Replicas, Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
}

// placedPod is the pod of rs on seat (1-based) of term (0-based), as the webhook and
// the scheduler leave it: labelled placed, with the seat, term and reservation
// annotations, the term's node selector, bound to node.
func placedPod(rs *appsv1.ReplicaSet, seat, term int, t strategy.Term, node string) *corev1.Pod {
	tpl := rs.Spec.Template.DeepCopy()
	labels := tpl.Labels
	labels[strategy.LabelManaged] = "true"
	annotations := tpl.Annotations
	annotations[strategy.AnnotationSeat] = strconv.Itoa(seat)
	annotations[strategy.AnnotationTerm] = strconv.Itoa(term + 1)
	annotations[strategy.AnnotationReservation] = string(uuid.NewUUID())
	spec := tpl.Spec
	spec.NodeName = node
	spec.NodeSelector = map[string]string{}
	for _, l := range t.Labels {
		spec.NodeSelector[l.Key] = l.Value
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%d", rs.Name, seat), Namespace: rs.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))},
		},
		Spec: spec,
	}
}
