package ledger

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// tcpBalancer is an L4 balancer on 127.0.0.1: each connection goes to a backend picked
// at random, as a Service's does. It reports which backend each connection went to.
type tcpBalancer struct {
	ln       net.Listener
	backends []string // host:port
	mu       sync.Mutex
	rng      *rand.Rand
	picks    []int
	conns    []net.Conn // closed at cleanup: idle keep-alive connections stay open
}

func startTCPBalancer(t *testing.T, seed uint64, backends ...string) *tcpBalancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &tcpBalancer{ln: ln, backends: backends, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			_ = c.Close()
		}
		b.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			i := b.rng.IntN(len(b.backends))
			b.picks = append(b.picks, i)
			b.conns = append(b.conns, in)
			b.mu.Unlock()
			wg.Go(func() {
				defer in.Close()
				out, err := net.Dial("tcp", b.backends[i])
				if err != nil {
					return
				}
				b.mu.Lock()
				b.conns = append(b.conns, out)
				b.mu.Unlock()
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			})
		}
	})
	return b
}

// takePicks returns the backends picked since the last call.
func (b *tcpBalancer) takePicks() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.picks
	b.picks = nil
	return p
}

// A peer address balanced at random over two replicas never passes the self-check, not
// even in the trials where every call happens to reach this process (1 in 8 with three
// calls): the check sees that its connection reached itself through something else.
// 200 seeded trials, each from a fresh check.
func TestCheckPeerAddressBehindARandomBalancerNeverPasses(t *testing.T) {
	ls := ledgers(t, fake.NewClientset(), ledgerNS, 2, Options{})
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("balancer seed %d", seed)
	hostOf := func(u string) string { return strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://") }
	lb := startTCPBalancer(t, seed, hostOf(ls[0].peerURL), hostOf(ls[1].peerURL))
	ls[0].peerURL = "http://" + lb.ln.Addr().String()
	passes, allSelf := 0, 0
	for trial := range 200 {
		ls[0].peerShared.Store(false) // a fresh process's first check
		err := ls[0].CheckPeerAddress(ctx)
		picks := lb.takePicks()
		if !slices.Contains(picks, 1) {
			allSelf++ // only this process answered
		}
		if err == nil {
			passes++
			t.Errorf("trial %d (seed %d): the check passed behind a random balancer (backends %v)", trial, seed, picks)
			continue
		}
		if !errors.Is(err, ErrPeerAddressShared) || !strings.Contains(err.Error(), "PEER_ADDRESS") {
			t.Fatalf("trial %d: %v, want ErrPeerAddressShared naming PEER_ADDRESS", trial, err)
		}
	}
	t.Logf("%d of 200 trials reached only this process; %d passed", allSelf, passes)
	if allSelf == 0 {
		t.Fatal("no trial reached only this process: the test proves nothing about luck")
	}
}
