package nodegroups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/sirupsen/logrus"
)

// DefaultInterval is the refresh interval used when Config.Interval is zero.
const DefaultInterval = 5 * time.Minute

// maxRefreshTime bounds one refresh (all pages and describes, retries
// included) so that a hanging endpoint cannot hold readiness or the loop.
const maxRefreshTime = time.Minute

// API is the part of the EKS client the cache uses; *eks.Client implements it.
type API interface {
	eks.ListNodegroupsAPIClient
	DescribeNodegroup(ctx context.Context, in *eks.DescribeNodegroupInput, optFns ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error)
}

// Config configures a Cache.
type Config struct {
	// ClusterName is the EKS cluster whose node groups are listed. Required.
	ClusterName string
	// Interval between refreshes; DefaultInterval when zero.
	Interval time.Duration
	// Log receives refresh failures; a discarding logger when nil.
	Log logrus.FieldLogger
}

// Status describes the outcome of the refreshes so far, for metrics and
// readiness.
type Status struct {
	// LastAttempt is when the last refresh finished, successful or not.
	LastAttempt time.Time
	// LastSuccess is when the view was last replaced by a complete refresh.
	LastSuccess time.Time
	// LastError is the error of the last refresh, nil when it succeeded.
	LastError error
	// Groups is the number of groups in the current view.
	Groups int
}

// Cache holds the last complete view of a cluster's managed node groups. A
// failed refresh (throttling, network, permissions) keeps the previous view,
// so callers keep matching on what was last known. Safe for concurrent use.
type Cache struct {
	api      API
	cluster  string
	interval time.Duration
	log      logrus.FieldLogger

	mu         sync.RWMutex
	groups     []Group
	generation uint64 // changes with groups
	status     Status
}

// New returns a Cache reading the node groups of cfg.ClusterName through api.
// Nothing is fetched until Refresh or Run is called.
func New(api API, cfg Config) (*Cache, error) {
	if api == nil {
		return nil, errors.New("nodegroups: nil EKS client")
	}
	if cfg.ClusterName == "" {
		return nil, errors.New("nodegroups: cluster name is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	log := cfg.Log
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	return &Cache{
		api:      api,
		cluster:  cfg.ClusterName,
		interval: cfg.Interval,
		log:      log.WithField("eksCluster", cfg.ClusterName),
	}, nil
}

// Run refreshes at once and then every interval until ctx is done, each
// refresh bounded by the interval or a minute, whichever is shorter. Failures
// are logged and kept in Status; they never stop the loop.
func (c *Cache) Run(ctx context.Context) {
	ticker := time.NewTicker(c.interval)
	defer ticker.Stop()
	timeout := min(c.interval, maxRefreshTime)
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.Refresh(rctx)
		cancel()
		switch {
		case err == nil:
			c.log.WithField("groups", c.Status().Groups).Debug("refreshed EKS node groups")
		case ctx.Err() == nil:
			c.log.WithError(err).Warn("refreshing EKS node groups failed; keeping the last good view")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Refresh lists and describes every node group of the cluster and, only if
// all calls succeed, replaces the view. A group deleted between the list and
// its describe is skipped.
func (c *Cache) Refresh(ctx context.Context) error {
	groups, err := c.fetch(ctx)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status.LastAttempt = now
	c.status.LastError = err
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(withoutSize(c.groups), withoutSize(groups)) {
		c.generation++
	}
	c.groups = groups
	c.status.LastSuccess = now
	c.status.Groups = len(groups)
	return nil
}

func (c *Cache) fetch(ctx context.Context) ([]Group, error) {
	var names []string
	pages := eks.NewListNodegroupsPaginator(c.api, &eks.ListNodegroupsInput{ClusterName: &c.cluster})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing node groups of EKS cluster %q: %w", c.cluster, err)
		}
		names = append(names, page.Nodegroups...)
	}
	groups := make([]Group, 0, len(names))
	for _, name := range names {
		out, err := c.api.DescribeNodegroup(ctx, &eks.DescribeNodegroupInput{ClusterName: &c.cluster, NodegroupName: &name})
		var notFound *ekstypes.ResourceNotFoundException
		if errors.As(err, &notFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("describing node group %q of EKS cluster %q: %w", name, c.cluster, err)
		}
		if g, ok := fromEKS(out.Nodegroup); ok {
			groups = append(groups, g)
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
	return groups, nil
}

// Groups returns the current view, sorted by name. The slice is the caller's;
// the Group values share their maps and slices with the cache and must not be
// modified.
func (c *Cache) Groups() []Group {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]Group(nil), c.groups...)
}

// Generation changes whenever a refresh changes the view (not when it finds the same
// groups again).
func (c *Cache) Generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.generation
}

// HasSynced reports whether a first refresh has finished, successful or not.
// A failing EKS API must not hold the webhook's readiness forever; Status
// tells whether the view is actually populated.
func (c *Cache) HasSynced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return !c.status.LastAttempt.IsZero()
}

// Status returns the outcome of the refreshes so far.
func (c *Cache) Status() Status {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.status
}

// withoutSize drops the scaling configuration, which changes with every scale but not
// what a group serves, so the generation (and the answers remembered for it) holds.
func withoutSize(groups []Group) []Group {
	out := make([]Group, len(groups))
	for i, g := range groups {
		g.Size = Size{}
		out[i] = g
	}
	return out
}
