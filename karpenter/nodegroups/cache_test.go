package nodegroups

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
)

const testCluster = "demo"

// fakeEKS speaks the EKS REST-JSON API for ListNodegroups and
// DescribeNodegroup, with switchable failures.
type fakeEKS struct {
	mu         sync.Mutex
	pageSize   int
	groups     map[string]map[string]any // name -> "nodegroup" JSON object
	order      []string
	throttle   int            // answer the next n requests with 429 ThrottlingException
	failStatus map[string]int // describe of a group answers this HTTP status
	lists      []string       // nextToken of each ListNodegroups request
	describes  int
	auth       []string // Authorization headers seen
}

func newFakeEKS(groups ...map[string]any) *fakeEKS {
	f := &fakeEKS{pageSize: 2, groups: map[string]map[string]any{}, failStatus: map[string]int{}}
	f.set(groups...)
	return f
}

func (f *fakeEKS) set(groups ...map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups, f.order = map[string]map[string]any{}, nil
	for _, g := range groups {
		name := g["nodegroupName"].(string)
		f.groups[name] = g
		f.order = append(f.order, name)
	}
}

func (f *fakeEKS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	if f.throttle > 0 {
		f.throttle--
		writeError(w, http.StatusTooManyRequests, "ThrottlingException", "Rate exceeded")
		return
	}
	prefix := "/clusters/" + testCluster + "/node-groups"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == prefix:
		token := r.URL.Query().Get("nextToken")
		f.lists = append(f.lists, token)
		start := 0
		if token != "" {
			start, _ = strconv.Atoi(token)
		}
		size := f.pageSize
		if mr := r.URL.Query().Get("maxResults"); mr != "" {
			size, _ = strconv.Atoi(mr)
		}
		end := min(start+size, len(f.order))
		out := map[string]any{"nodegroups": f.order[start:end]}
		if end < len(f.order) {
			out["nextToken"] = strconv.Itoa(end)
		}
		writeJSON(w, out)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix+"/"):
		f.describes++
		name := strings.TrimPrefix(r.URL.Path, prefix+"/")
		if st := f.failStatus[name]; st != 0 {
			writeError(w, st, "ServerException", "internal failure")
			return
		}
		g, ok := f.groups[name]
		if !ok {
			writeError(w, http.StatusNotFound, "ResourceNotFoundException", "No node group found for name: "+name)
			return
		}
		writeJSON(w, map[string]any{"nodegroup": g})
	default:
		writeError(w, http.StatusNotFound, "NotFoundException", "no route "+r.URL.Path)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func (f *fakeEKS) counts() (lists []string, describes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lists...), f.describes
}

// noBackoff keeps retries immediate so tests do not sleep.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// newTestClient builds the real SDK client through NewClient, with
// credentials and region taken from the environment by the default chain and
// the endpoint pointed at srv.
func newTestClient(t *testing.T, srv *httptest.Server) *eks.Client {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	client, err := NewClient(context.Background(), ClientOptions{Endpoint: srv.URL, RetryMaxAttempts: 2},
		func(o *eks.Options) {
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.Backoff = noBackoff{} })
		})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func newTestCache(t *testing.T, f *fakeEKS) *Cache {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := New(newTestClient(t, srv), Config{ClusterName: testCluster, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func spotZeroJSON() map[string]any {
	return map[string]any{
		"nodegroupName": "spot-4vcpu",
		"clusterName":   testCluster,
		"status":        "ACTIVE",
		"capacityType":  "SPOT",
		"amiType":       "AL2023_ARM_64_STANDARD",
		"instanceTypes": []string{"m7g.xlarge", "m6g.xlarge"},
		"labels":        map[string]string{"nodesize": "spot4vcpu16gb"},
		"taints": []map[string]string{
			{"key": "capacity", "value": "spot", "effect": "NO_SCHEDULE"},
			{"key": "dedicated", "effect": "NO_EXECUTE"},
			{"key": "soft", "value": "yes", "effect": "PREFER_NO_SCHEDULE"},
		},
		"scalingConfig": map[string]int{"minSize": 0, "maxSize": 10, "desiredSize": 0},
	}
}

func onDemandJSON() map[string]any {
	return map[string]any{
		"nodegroupName": "od",
		"clusterName":   testCluster,
		"status":        "ACTIVE",
		"capacityType":  "ON_DEMAND",
		"amiType":       "AL2_x86_64",
		"instanceTypes": []string{"m5.xlarge"},
		"labels":        map[string]string{"nodesize": "od4vcpu16gb", LabelCapacityType: "forged"},
		"scalingConfig": map[string]int{"minSize": 1, "maxSize": 3, "desiredSize": 2},
	}
}

func customJSON() map[string]any {
	return map[string]any{
		"nodegroupName": "custom",
		"clusterName":   testCluster,
		"status":        "DELETING",
		"amiType":       "CUSTOM",
	}
}

func wantGroups() []Group {
	return []Group{
		{
			Name: "custom", Status: "DELETING", CapacityType: "ON_DEMAND", AMIType: "CUSTOM",
			Labels: map[string]string{LabelNodeGroup: "custom", LabelCapacityType: "ON_DEMAND"},
		},
		{
			Name: "od", Status: "ACTIVE", CapacityType: "ON_DEMAND", AMIType: "AL2_x86_64",
			InstanceTypes: []string{"m5.xlarge"}, Size: Size{Known: true, Min: 1, Max: 3, Desired: 2},
			Labels: map[string]string{
				"nodesize": "od4vcpu16gb", LabelNodeGroup: "od", LabelCapacityType: "ON_DEMAND",
				corev1.LabelArchStable: "amd64", corev1.LabelOSStable: "linux",
			},
		},
		{
			Name: "spot-4vcpu", Status: "ACTIVE", CapacityType: "SPOT", AMIType: "AL2023_ARM_64_STANDARD",
			InstanceTypes: []string{"m7g.xlarge", "m6g.xlarge"}, Size: Size{Known: true, Max: 10},
			Labels: map[string]string{
				"nodesize": "spot4vcpu16gb", LabelNodeGroup: "spot-4vcpu", LabelCapacityType: "SPOT",
				corev1.LabelArchStable: "arm64", corev1.LabelOSStable: "linux",
			},
			Taints: []corev1.Taint{
				{Key: "capacity", Value: "spot", Effect: corev1.TaintEffectNoSchedule},
				{Key: "dedicated", Effect: corev1.TaintEffectNoExecute},
				{Key: "soft", Value: "yes", Effect: corev1.TaintEffectPreferNoSchedule},
			},
		},
	}
}

func TestRefreshListsPagesAndDescribes(t *testing.T) {
	f := newFakeEKS(spotZeroJSON(), onDemandJSON(), customJSON())
	c := newTestCache(t, f)
	if c.HasSynced() {
		t.Fatal("synced before any refresh")
	}
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := c.Groups(); !reflect.DeepEqual(got, wantGroups()) {
		t.Fatalf("groups =\n%+v\nwant\n%+v", got, wantGroups())
	}
	lists, describes := f.counts()
	if !reflect.DeepEqual(lists, []string{"", "2"}) || describes != 3 {
		t.Fatalf("list tokens %q, describes %d; want two pages and three describes", lists, describes)
	}
	st := c.Status()
	if !c.HasSynced() || st.LastError != nil || st.LastSuccess.IsZero() || st.Groups != 3 {
		t.Fatalf("status after success: %+v", st)
	}
	// Credentials and region came from the default chain (environment here).
	f.mu.Lock()
	auth := f.auth[0]
	f.mu.Unlock()
	if !strings.Contains(auth, "Credential=AKIDTEST/") || !strings.Contains(auth, "/eu-west-1/eks/aws4_request") {
		t.Fatalf("request not signed with the environment's credentials and region: %q", auth)
	}
	usable := map[string]bool{}
	for _, g := range c.Groups() {
		usable[g.Name] = g.Usable()
	}
	if !reflect.DeepEqual(usable, map[string]bool{"custom": false, "od": true, "spot-4vcpu": true}) {
		t.Fatalf("usable = %v", usable)
	}
}

func TestRefreshRetriesThrottling(t *testing.T) {
	f := newFakeEKS(onDemandJSON())
	f.throttle = 1
	c := newTestCache(t, f)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatalf("one throttled call should be retried by the SDK: %v", err)
	}
	if lists, _ := f.counts(); len(lists) != 1 || len(c.Groups()) != 1 {
		t.Fatalf("lists %q groups %v", lists, c.Groups())
	}
	f.mu.Lock()
	calls := len(f.auth)
	f.mu.Unlock()
	if calls != 3 { // throttled list, list, describe
		t.Fatalf("%d HTTP calls, want 3", calls)
	}
}

func TestRefreshThrottledKeepsLastGoodView(t *testing.T) {
	f := newFakeEKS(spotZeroJSON(), onDemandJSON(), customJSON())
	c := newTestCache(t, f)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	good := c.Status()

	f.set(onDemandJSON()) // a refresh would shrink the view...
	f.mu.Lock()
	f.throttle = 100 // ...but every call is throttled
	f.mu.Unlock()
	err := c.Refresh(context.Background())
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ThrottlingException" {
		t.Fatalf("error = %v, want a ThrottlingException", err)
	}
	if !retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err).Bool() {
		t.Fatalf("SDK does not classify %v as throttling", err)
	}
	if got := c.Groups(); !reflect.DeepEqual(got, wantGroups()) {
		t.Fatalf("view changed after a failed refresh: %+v", got)
	}
	st := c.Status()
	if st.LastError == nil || !st.LastSuccess.Equal(good.LastSuccess) || st.LastAttempt.Before(good.LastAttempt) || st.Groups != 3 {
		t.Fatalf("status after failure: %+v (before %+v)", st, good)
	}
	f.mu.Lock()
	left := f.throttle
	f.mu.Unlock()
	if left != 98 {
		t.Fatalf("%d throttled attempts, want RetryMaxAttempts=2", 100-left)
	}
}

func TestRefreshServerErrorKeepsLastGoodView(t *testing.T) {
	f := newFakeEKS(spotZeroJSON(), onDemandJSON(), customJSON())
	c := newTestCache(t, f)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.failStatus["od"] = http.StatusInternalServerError
	f.mu.Unlock()
	err := c.Refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"od"`) {
		t.Fatalf("error = %v, want one naming node group od", err)
	}
	var re interface{ HTTPStatusCode() int }
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusInternalServerError {
		t.Fatalf("error = %v, want HTTP 500", err)
	}
	if got := c.Groups(); !reflect.DeepEqual(got, wantGroups()) {
		t.Fatalf("view changed after a failed refresh: %+v", got)
	}
	if c.Status().LastError == nil {
		t.Fatal("LastError not recorded")
	}

	// Recovery replaces the view and clears the error.
	f.mu.Lock()
	delete(f.failStatus, "od")
	f.mu.Unlock()
	f.set(onDemandJSON())
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := c.Groups(); len(got) != 1 || got[0].Name != "od" || c.Status().LastError != nil {
		t.Fatalf("after recovery: %+v, status %+v", got, c.Status())
	}
}

func TestRefreshSkipsGroupDeletedMeanwhile(t *testing.T) {
	f := newFakeEKS(onDemandJSON(), spotZeroJSON())
	// Listed but gone by the time it is described.
	f.mu.Lock()
	f.order = append(f.order, "gone")
	f.mu.Unlock()
	c := newTestCache(t, f)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := c.Groups(); len(got) != 2 || got[0].Name != "od" || got[1].Name != "spot-4vcpu" {
		t.Fatalf("groups = %+v", got)
	}
}

func TestRunRefreshesUntilCancelled(t *testing.T) {
	f := newFakeEKS(onDemandJSON())
	c := newTestCache(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for !c.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatal("Run never refreshed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if len(c.Groups()) != 1 {
		t.Fatalf("groups = %+v", c.Groups())
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(nil, Config{ClusterName: "x"}); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := New(&eks.Client{}, Config{}); err == nil {
		t.Error("empty cluster name accepted")
	}
}

func TestNewClientNeedsRegion(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	if _, err := NewClient(context.Background(), ClientOptions{}); err == nil {
		t.Fatal("client built without a region")
	}
	c, err := NewClient(context.Background(), ClientOptions{Region: "us-east-2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Options().Region; got != "us-east-2" {
		t.Fatalf("region %q", got)
	}
	if c.Options().BaseEndpoint != nil {
		t.Fatalf("endpoint overridden without being asked: %q", aws.ToString(c.Options().BaseEndpoint))
	}
}

// The generation moves when a refresh changes the view, and only then: the catalog
// keeps its answers while it stays.
func TestGenerationFollowsTheView(t *testing.T) {
	f := newFakeEKS(onDemandJSON())
	c := newTestCache(t, f)
	refresh := func() uint64 {
		t.Helper()
		if err := c.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c.Generation()
	}
	first := refresh()
	if first == 0 {
		t.Fatal("the first view left the generation at 0")
	}
	if again := refresh(); again != first {
		t.Fatalf("generation %d → %d for the same groups", first, again)
	}
	f.set(onDemandJSON(), spotZeroJSON())
	changed := refresh()
	if changed == first {
		t.Fatal("generation unchanged for a new group")
	}
	// Scaling changes the group's size, not what it serves.
	scaled := spotZeroJSON()
	scaled["scalingConfig"] = map[string]int{"minSize": 0, "maxSize": 10, "desiredSize": 7}
	f.set(onDemandJSON(), scaled)
	if again := refresh(); again != changed {
		t.Fatalf("generation %d → %d for a scale only", changed, again)
	}
	for _, g := range c.Groups() {
		if g.Name == "spot-4vcpu" && (g.Size.Desired != 7 || g.Size.Headroom() != 3) {
			t.Fatalf("size after the scale = %+v, headroom %d; want desired 7, headroom 3", g.Size, g.Size.Headroom())
		}
	}
}
