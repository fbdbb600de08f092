package unavailability

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ownership"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The unavailability record: one Lease per workload revision in the webhook's
// namespace, selected by its own label (the seat ledger's Leases carry others). A
// Lease, not a ConfigMap, because the webhook may already write Leases there; its
// spec is unused, the state is one JSON annotation.
const (
	// The keys (strategy.LabelUnavailability, strategy.LabelRevision, AnnotationUnavailableTerms,
	// strategy.AnnotationWorkload) belong to the pod-seat protocol in strategy.
	recordPrefix = "cksw-unavailable-"
)

// TermState is what the record says about one term of a revision.
type TermState struct {
	// Until is when the term is tried again.
	Until time.Time `json:"until"`
	// Since is when it was last found unavailable.
	Since time.Time `json:"since"`
	// Reason says why, e.g. "4 pods unschedulable for 90s".
	Reason string `json:"reason"`
	// Strikes counts how often in a row it was found unavailable; the cool-down doubles
	// with each.
	Strikes int `json:"strikes"`
	// Risk is set when the term was marked at risk on EC2's interruption signals rather
	// than found without capacity: what the mark rests on.
	Risk *Risk `json:"risk,omitempty"`
}

// Risk is the evidence of a term marked at risk: EC2's interruption and rebalance
// signals for its nodes within the window.
type Risk struct {
	// SignalledNodes of the term's Nodes had a signal within Window.
	SignalledNodes int `json:"signalledNodes"`
	Nodes          int `json:"nodes"`
	// ByKind counts the signalled nodes per kind (interruption-warning,
	// rebalance-recommendation, state-change).
	ByKind map[string]int `json:"byKind,omitempty"`
	Window string         `json:"window"`
	// LastSignal is the latest signal: the term returns a cool-down after it.
	LastSignal time.Time `json:"lastSignal"`
	// Instances names some of the signalled instances.
	Instances []string `json:"instances,omitempty"`
}

// Active reports whether the term is unavailable at now.
func (t TermState) Active(now time.Time) bool { return now.Before(t.Until) }

// Record is the state of one revision: per 0-based term.
type Record struct {
	Revision types.UID
	Workload string
	Terms    map[int]TermState
}

// Active returns the terms unavailable at now.
func (r *Record) Active(now time.Time) map[int]TermState {
	if r == nil {
		return nil
	}
	var out map[int]TermState
	for t, st := range r.Terms {
		if st.Active(now) {
			if out == nil {
				out = map[int]TermState{}
			}
			out[t] = st
		}
	}
	return out
}

// RecordName is the Lease name of revision's record.
func RecordName(revision types.UID) string { return recordPrefix + string(revision) }

// Records reads and writes the unavailability records. Reads come from an informer
// over the records in one namespace, so every replica sees them within a watch event.
type Records struct {
	client    kubernetes.Interface
	namespace string
	factory   informers.SharedInformerFactory
	lister    coordinationlisters.LeaseNamespaceLister
	informer  cache.SharedIndexInformer
	now       func() time.Time
	owner     ownership.Owner
}

// NewRecords builds the records' informer in namespace; call Start.
func NewRecords(client kubernetes.Interface, namespace string) *Records {
	f := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{strategy.LabelUnavailability: "true"}.String()
		}))
	leases := f.Coordination().V1().Leases()
	return &Records{
		client: client, namespace: namespace, factory: f,
		informer: leases.Informer(), lister: leases.Lister().Leases(namespace), now: time.Now,
	}
}

// SetOwner makes owner own the records written from now on (the webhook's Deployment),
// so they are deleted with it. Call it before Start.
func (r *Records) SetOwner(owner ownership.Owner) { r.owner = owner }

// OnChange calls changed with the revision of each record that is written or deleted
// (no resyncs, period 0: those change nothing). It runs on the informer's
// goroutine: it must be quick. The returned function reports whether changed has been
// called for every record of the informer's initial list.
func (r *Records) OnChange(changed func(revision types.UID)) (cache.InformerSynced, error) {
	revisionOf := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if lease, ok := obj.(*coordinationv1.Lease); ok && strings.HasPrefix(lease.Name, recordPrefix) {
			changed(types.UID(strings.TrimPrefix(lease.Name, recordPrefix)))
		}
	}
	reg, err := r.informer.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    revisionOf,
		UpdateFunc: func(_, obj any) { revisionOf(obj) },
		DeleteFunc: revisionOf,
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("watch unavailability records: %w", err)
	}
	return reg.HasSynced, nil
}

// Start runs the informer until ctx ends.
func (r *Records) Start(ctx context.Context) { r.factory.Start(ctx.Done()) }

// HasSynced reports whether the informer has listed the records once.
func (r *Records) HasSynced() bool { return r.informer.HasSynced() }

// Get returns the record of revision from the informer, nil when there is none.
func (r *Records) Get(revision types.UID) *Record {
	lease, err := r.lister.Get(RecordName(revision))
	if err != nil {
		return nil
	}
	rec, err := decodeRecord(lease)
	if err != nil {
		return nil
	}
	return rec
}

// All returns every record the informer holds.
func (r *Records) All() []*Record {
	leases, err := r.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]*Record, 0, len(leases))
	for _, l := range leases {
		if rec, err := decodeRecord(l); err == nil {
			out = append(out, rec)
		}
	}
	return out
}

// Unavailable implements the admission webhook's Availability: the terms of revision unavailable now,
// each with "until <time>: <reason>".
func (r *Records) Unavailable(revision types.UID) map[int]string {
	active := r.Get(revision).Active(r.now())
	if len(active) == 0 {
		return nil
	}
	out := make(map[int]string, len(active))
	for t, st := range active {
		out[t] = fmt.Sprintf("until %s: %s", st.Until.UTC().Format(time.RFC3339), st.Reason)
	}
	return out
}

// Strike records term (0-based) of revision unavailable from now for the cool-down,
// doubled for every strike in a row (capped at 16 times), and returns the new state.
// A strike more than the longest cool-down after the last one starts the count anew.
func (r *Records) Strike(ctx context.Context, revision types.UID, workload string, term int, reason string, cooldown time.Duration) (TermState, error) {
	var st TermState
	err := r.update(ctx, revision, workload, func(rec *Record) {
		now := r.now()
		prev, ok := rec.Terms[term]
		strikes := 1
		if ok && now.Sub(prev.Until) < maxCooldown(cooldown) {
			strikes = prev.Strikes + 1
		}
		st = TermState{Since: now, Reason: reason, Strikes: strikes, Until: now.Add(cooldownFor(cooldown, strikes))}
		rec.Terms[term] = st
	})
	return st, err
}

// MarkAtRisk records term (0-based) of revision at risk until until (a cool-down after
// its last signal), with risk as the evidence; cooldown is FALLBACK_COOLDOWN, which
// tells a strike in a row. A term already marked at risk and still
// active keeps its strikes and its Since and gets the later until; otherwise the mark
// counts as a strike in a row as Strike counts them (the cool-down is not doubled: the
// signals' quiet time sets it).
func (r *Records) MarkAtRisk(ctx context.Context, revision types.UID, workload string, term int, reason string, risk Risk, until time.Time, cooldown time.Duration) (TermState, error) {
	var st TermState
	err := r.update(ctx, revision, workload, func(rec *Record) {
		now := r.now()
		prev, ok := rec.Terms[term]
		st = TermState{Since: now, Reason: reason, Strikes: 1, Until: until, Risk: &risk}
		switch {
		case ok && prev.Active(now) && prev.Risk != nil:
			st.Since, st.Strikes = prev.Since, prev.Strikes
			if prev.Until.After(until) {
				st.Until = prev.Until
			}
		case ok && prev.Active(now):
			// Unavailable already for want of capacity: that mark's reason stays, and
			// it ends no sooner.
			st.Since, st.Strikes, st.Reason = prev.Since, prev.Strikes, prev.Reason+"; "+reason
			if prev.Until.After(until) {
				st.Until = prev.Until
			}
		case ok && now.Sub(prev.Until) < maxCooldown(cooldown):
			st.Strikes = prev.Strikes + 1
		}
		rec.Terms[term] = st
	})
	return st, err
}

// cooldownFor is the cool-down after strikes strikes in a row: doubling, capped.
func cooldownFor(base time.Duration, strikes int) time.Duration {
	d := base
	for i := 1; i < strikes && d < maxCooldown(base); i++ {
		d *= 2
	}
	return min(d, maxCooldown(base))
}

func maxCooldown(base time.Duration) time.Duration { return 16 * base }

// Forget drops terms of a revision whose cool-down ended more than the longest
// cool-down ago, and the whole record when nothing is left (or the revision is gone).
func (r *Records) Forget(ctx context.Context, rec *Record, cooldown time.Duration, revisionGone bool) error {
	now := r.now()
	stale := revisionGone
	if !stale {
		stale = true
		for _, st := range rec.Terms {
			if now.Sub(st.Until) < maxCooldown(cooldown) {
				stale = false
			}
		}
	}
	if !stale {
		return nil
	}
	err := r.client.CoordinationV1().Leases(r.namespace).Delete(ctx, RecordName(rec.Revision), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete unavailability record of %s: %w", rec.Workload, err)
	}
	return nil
}

// update reads the record live (the informer may lag behind the last write), changes
// it and writes it back, retrying on conflicts.
func (r *Records) update(ctx context.Context, revision types.UID, workload string, change func(*Record)) error {
	leases := r.client.CoordinationV1().Leases(r.namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, RecordName(revision), metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		switch {
		case create:
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
				Name: RecordName(revision), Namespace: r.namespace,
				Labels: map[string]string{strategy.LabelUnavailability: "true", strategy.LabelRevision: string(revision)},
			}}
		case err != nil:
			return fmt.Errorf("read unavailability record of %s: %w", workload, err)
		}
		rec, err := decodeRecord(lease)
		if err != nil {
			rec = &Record{Revision: revision, Terms: map[int]TermState{}}
		}
		rec.Workload = workload
		change(rec)
		r.owner.Apply(&lease.ObjectMeta)
		if err := encodeRecord(rec, lease); err != nil {
			return err
		}
		if create {
			_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(coordinationv1.Resource("leases"), lease.Name, err)
			}
		} else {
			_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("write unavailability record of %s: %w", workload, err)
		}
		return err
	})
}

// DecodeRecord reads a record from its Lease (for reports that list them).
func DecodeRecord(lease *coordinationv1.Lease) (*Record, error) { return decodeRecord(lease) }

func decodeRecord(lease *coordinationv1.Lease) (*Record, error) {
	rec := &Record{Revision: types.UID(lease.Labels[strategy.LabelRevision]), Workload: lease.Annotations[strategy.AnnotationWorkload], Terms: map[int]TermState{}}
	raw, ok := lease.Annotations[strategy.AnnotationUnavailableTerms]
	if !ok {
		return rec, nil
	}
	var byTerm map[string]TermState // 1-based term number -> state, as people read it
	if err := json.Unmarshal([]byte(raw), &byTerm); err != nil {
		return nil, fmt.Errorf("record %s: %w", lease.Name, err)
	}
	for k, st := range byTerm {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			continue
		}
		rec.Terms[n-1] = st
	}
	return rec, nil
}

func encodeRecord(rec *Record, lease *coordinationv1.Lease) error {
	byTerm := make(map[string]TermState, len(rec.Terms))
	for t, st := range rec.Terms {
		byTerm[strconv.Itoa(t+1)] = st
	}
	raw, err := json.Marshal(byTerm)
	if err != nil {
		return fmt.Errorf("encode unavailability record: %w", err)
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[strategy.AnnotationUnavailableTerms] = string(raw)
	lease.Annotations[strategy.AnnotationWorkload] = rec.Workload
	return nil
}
