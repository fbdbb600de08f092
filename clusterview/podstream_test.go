package clusterview

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// protobufList is list as the API server encodes it in protobuf.
func protobufList(t *testing.T, list *corev1.PodList) []byte {
	t.Helper()
	var body bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(list, &body); err != nil {
		t.Fatal(err)
	}
	return body.Bytes()
}

// podListServer answers every pod list with list, in protobuf unless asJSON, and
// records each request's query.
func podListServer(t *testing.T, list *corev1.PodList, asJSON bool) (kubernetes.Interface, *[]string) {
	t.Helper()
	var queries []string
	contentType, body := "application/json", []byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[]}`)
	if !asJSON {
		contentType, body = "application/vnd.kubernetes.protobuf", protobufList(t, list)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"}})
	if err != nil {
		t.Fatal(err)
	}
	return client, &queries
}

// The streamed list trims every pod of a protobuf list as it is read, with the list's
// resource version, asked at the resource version the reflector gives and unpaged.
func TestStreamedPodList(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "4242"}}
	for i := range 1200 {
		pod := decodedPod(t, fmt.Sprintf("web-%d", i), i+1)
		pod.ResourceVersion = strconv.Itoa(100 + i)
		list.Items = append(list.Items, *pod)
	}
	client, queries := podListServer(t, list, false)
	got, err := streamedPodList(context.Background(), restClientOf(client), strategy.LabelManaged+"=true", metav1.ListOptions{ResourceVersion: "0", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != "4242" || len(got.Items) != len(list.Items) {
		t.Fatalf("list at %q with %d pods, want 4242 and %d", got.ResourceVersion, len(got.Items), len(list.Items))
	}
	for i := range list.Items {
		if want := podOf(trimmed(t, &list.Items[i])); !reflect.DeepEqual(podOf(got.Items[i]), want) {
			t.Errorf("pod %d: %+v, want %+v", i, podOf(got.Items[i]), want)
		}
	}
	if want := "/api/v1/pods?" + (url.Values{"labelSelector": {strategy.LabelManaged + "=true"}, "resourceVersion": {"0"}}).Encode(); len(*queries) != 1 || (*queries)[0] != want {
		t.Errorf("requests %q, want one: %q", *queries, want)
	}
}

// An answer in another encoding than protobuf is errNotProtobuf (the caller pages).
func TestStreamedPodListNotProtobuf(t *testing.T) {
	client, _ := podListServer(t, nil, true)
	if _, err := streamedPodList(context.Background(), restClientOf(client), "", metav1.ListOptions{}); !errors.Is(err, errNotProtobuf) {
		t.Errorf("err = %v, want errNotProtobuf", err)
	}
}

// A list cut short is an error, not a shorter list.
func TestStreamedPodListCutShort(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []corev1.Pod{*decodedPod(t, "web-a", 1), *decodedPod(t, "web-b", 2)}}
	full := protobufList(t, list)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		_, _ = w.Write(full[:len(full)-40])
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := streamedPodList(context.Background(), restClientOf(client), "", metav1.ListOptions{}); err == nil {
		t.Errorf("a list cut short read as %d pods, want an error", len(got.Items))
	}
}

// The fake client has no REST client: the pod informer pages its list.
func TestRestClientOfFake(t *testing.T) {
	if rc := restClientOf(fake.NewClientset()); rc != nil {
		t.Errorf("restClientOf(fake) = %v, want nil", rc)
	}
}

// The pod informer of a client that reads protobuf lists in one streamed request (an
// API server without streaming watch lists refuses that first), then watches.
func TestPodInformerStreamsItsList(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "77"}, Items: []corev1.Pod{*decodedPod(t, "web-a", 1), *decodedPod(t, "web-b", 2)}}
	body := protobufList(t, list)
	var (
		mu    sync.Mutex
		lists []url.Values
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422}`))
		case q.Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			mu.Lock()
			lists = append(lists, q)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
			_, _ = w.Write(body)
		}
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"}})
	if err != nil {
		t.Fatal(err)
	}
	inf := newPodInformer(client, strategy.LabelManaged+"=true", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the pod informer did not sync")
	}
	if keys := inf.GetStore().ListKeys(); len(keys) != 2 {
		t.Errorf("cached %q, want the two pods", keys)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lists) != 1 || lists[0].Get("limit") != "" || lists[0].Get("continue") != "" {
		t.Errorf("lists %v, want one, unpaged", lists)
	}
}

// The stream decoder reads what an API server, a proxy or a broken connection may send:
// anything it decodes or refuses cleanly, never a panic, and never more than the input
// claims (a field's length is checked against what is left).
func FuzzDecodePodStream(f *testing.F) {
	pods := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
	for i := range 2 {
		pods.Items = append(pods.Items, corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprint("p", i), Namespace: "shop", UID: "u",
			Annotations: map[string]string{strategy.AnnotationSeat: strconv.Itoa(i + 1)},
		}})
	}
	var body bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(pods, &body); err != nil {
		f.Fatal(err)
	}
	f.Add(body.Bytes())
	f.Add(body.Bytes()[:body.Len()/2])
	f.Add([]byte("k8s\x00"))
	f.Add([]byte(`{"kind":"PodList"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := decodePodStream(bufio.NewReader(bytes.NewReader(data)))
		if err == nil && list == nil {
			t.Fatal("no list and no error")
		}
	})
}
