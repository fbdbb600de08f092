package ledger

// Claims forwarded between replicas: a replica that does not own a revision asks its
// owner, over HTTPS on the webhook's own port.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
)

// PeerClaimPath is where a replica answers the claims other replicas forward to it.
const PeerClaimPath = "/ledger/v1/claim"

// maxPeerBody bounds a peer call's body: a forwarded claim is about 200 bytes, an
// answer handing a record over up to the API server's 256 KiB.
const maxPeerBody = 512 << 10

// peerRequest is a forwarded claim of one admission's seat; with no revision, the
// peer-address self-check.
type peerRequest struct {
	Namespace string    `json:"namespace"`
	Revision  types.UID `json:"revision"`
	// ID is the hash of the admission UID (idHash), the reservation's key.
	ID uint64 `json:"id"`
	// Owner is the replica the caller expects at this address (410 from another).
	Owner string `json:"owner,omitempty"`
	// Release comes from replicas of 0.2 and earlier: answered, not acted on (the
	// reservation expires), so a rolling upgrade never takes it for a claim.
	Release bool `json:"release,omitempty"`
	// Caller and CallerPeer name the calling replica and its peer address: a stopping
	// owner hands it the revision (transfer). Empty from older releases and from a
	// stopping caller.
	Caller     string `json:"caller,omitempty"`
	CallerPeer string `json:"callerPeer,omitempty"`
}

// peerResponse is the owner's answer.
type peerResponse struct {
	Seat  int    `json:"seat,omitempty"`
	Error string `json:"error,omitempty"`
	// Identity names the answering replica on 410 Gone.
	Identity string `json:"identity,omitempty"`
	// Handover is a stopping owner's answer (409) to a caller naming itself: the
	// revision's record listing every reservation answered, and the milliseconds the
	// caller may answer as owner from its forward's start (transfer).
	Handover  *coordinationv1.Lease `json:"handover,omitempty"`
	Remaining int64                 `json:"remaining,omitempty"`
}

// errOwnerGone: the owner's address refuses connections, or another process answers.
var errOwnerGone = errors.New("the seat owner is gone")

// errAnotherProcess: another process than the one asked for answered at its address.
var errAnotherProcess = errors.New("another process answers there")

// errPeerRefused is the owner's definitive refusal: the claim is not retried.
var errPeerRefused = errors.New("the seat owner refused the claim")

// PeerHandler answers claims forwarded by other replicas, as the revision's owner only
// (409 otherwise: the caller reads the record again).
func (l *Ledger) PeerHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req peerRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxPeerBody)).Decode(&req); err != nil || (req.Revision == "") != (req.ID == 0) {
			writePeer(w, http.StatusBadRequest, peerResponse{Error: "want a JSON claim with namespace, revision and id"})
			return
		}
		if req.Owner != "" && req.Owner != l.identity {
			writePeer(w, http.StatusGone, peerResponse{Error: fmt.Sprintf("this is %s, not %s", l.identity, req.Owner), Identity: l.identity})
			return
		}
		if req.Revision == "" || req.Release { // the self-check, or an old release
			writePeer(w, http.StatusOK, peerResponse{})
			return
		}
		rev := clusterview.Revision{Namespace: req.Namespace, UID: req.Revision}
		if handed, remaining := l.transfer(rev, req.Caller, req.CallerPeer); handed != nil {
			writePeer(w, http.StatusConflict, peerResponse{Error: errHandedOver.Error(), Handover: handed, Remaining: remaining.Milliseconds()})
			return
		}
		seat, _, err := l.claim(r.Context(), rev, req.ID, false)
		switch {
		case err == nil:
			writePeer(w, http.StatusOK, peerResponse{Seat: seat})
		case errors.Is(err, errHandedOver) || errors.Is(err, errNotOwner):
			writePeer(w, http.StatusConflict, peerResponse{Error: err.Error()})
		default:
			writePeer(w, http.StatusServiceUnavailable, peerResponse{Error: err.Error()})
		}
	})
}

func writePeer(w http.ResponseWriter, status int, resp peerResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

// forward asks the owner, at peer, for a seat (errNotOwner, errPeerRefused, errOwnerGone
// or a transient error). A stopping owner's errNotOwner may hand the revision over
// (transfer); a caller that is stopping too asks for no hand-over.
func (l *Ledger) forward(ctx context.Context, to, peer string, rev clusterview.Revision, hash uint64, stopping bool) (peerResponse, error) {
	req := peerRequest{Namespace: rev.Namespace, Revision: rev.UID, ID: hash, Owner: to}
	if !stopping {
		req.Caller, req.CallerPeer = l.identity, l.cfg.PeerAddress
	}
	resp, err := l.callPeer(ctx, peer, req)
	if r := resp.Handover; r != nil && (r.Name != recordName(rev.UID) || holderOf(r) != to) {
		return peerResponse{}, fmt.Errorf("%w: a record not of revision %s held by %s from %s", errPeerRefused, rev.UID, to, peer)
	}
	return resp, err
}

func (l *Ledger) callPeer(ctx context.Context, peer string, req peerRequest) (peerResponse, error) {
	if l.peers == nil || peer == "" {
		return peerResponse{}, errors.New("the seat owner takes no forwarded claims (no peer address or client)")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return peerResponse{}, fmt.Errorf("encode a forwarded claim: %w", err)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(peer, "/")+PeerClaimPath, bytes.NewReader(body))
	if err != nil {
		return peerResponse{}, fmt.Errorf("forward a claim to %s: %w", peer, err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpResp, err := l.peers.Do(httpReq)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return peerResponse{}, fmt.Errorf("%w: %s refuses connections", errOwnerGone, peer)
	}
	if err != nil {
		return peerResponse{}, fmt.Errorf("forward a claim to %s: %w", peer, err)
	}
	defer httpResp.Body.Close()
	var resp peerResponse
	if err := json.NewDecoder(io.LimitReader(httpResp.Body, maxPeerBody)).Decode(&resp); err != nil {
		return peerResponse{}, fmt.Errorf("forward a claim to %s: answer %s: %w", peer, httpResp.Status, err)
	}
	switch {
	case httpResp.StatusCode == http.StatusOK:
		if req.Revision != "" && resp.Seat < 1 {
			return peerResponse{}, fmt.Errorf("%w: seat %d from %s", errPeerRefused, resp.Seat, peer)
		}
		return resp, nil
	case httpResp.StatusCode == http.StatusConflict:
		return resp, errNotOwner
	case httpResp.StatusCode == http.StatusGone:
		// Another process at the owner's (unique: checkPeerAddress) address.
		return peerResponse{}, fmt.Errorf("%w (%w): %s", errOwnerGone, errAnotherProcess, resp.Error)
	case httpResp.StatusCode >= 400 && httpResp.StatusCode < 500 && httpResp.StatusCode != http.StatusForbidden:
		// 403 is retried: certificates differ for a moment while a new one spreads.
		return peerResponse{}, fmt.Errorf("%w: %s: %s", errPeerRefused, httpResp.Status, resp.Error)
	default:
		return peerResponse{}, fmt.Errorf("forward a claim to %s: %s: %s", peer, httpResp.Status, resp.Error)
	}
}

// errPeerAddressShared says another process answered at this replica's peer address
// (PEER_ADDRESS): a Service's or a node's address, not the pod's. It stays so for the
// life of the process.
var errPeerAddressShared = errors.New("another process answers at this replica's peer address")

// checkPeerAddress checks that a call to this replica's peer address reaches this
// process. Other replicas take a refusal there, or another process answering, as proof
// that this replica is gone: gate readiness on it. A Service's address reaches another
// Ready replica (or none) and fails; once another process has answered (shared), every
// later check fails too.
func (l *Ledger) checkPeerAddress(ctx context.Context, shared bool) error {
	if l.cfg.PeerAddress == "" || l.peers == nil {
		return nil
	}
	l.peers.CloseIdleConnections()
	_, err := l.callPeer(ctx, l.cfg.PeerAddress, peerRequest{Owner: l.identity})
	if err != nil && !errors.Is(err, errAnotherProcess) {
		return fmt.Errorf("this replica does not answer at its peer address %s (PEER_ADDRESS) yet: %w", l.cfg.PeerAddress, err)
	}
	if err != nil || shared {
		return fmt.Errorf("%w: PEER_ADDRESS %s (default: the pod IP, POD_IP, and the webhook's port)", errPeerAddressShared, l.cfg.PeerAddress)
	}
	return nil
}

// AwaitPeerAddress checks the peer address (checkPeerAddress) until this replica
// answers there, or ctx ends; PeerReached then reports it. The server takes a moment
// to start: it complains only after that.
func (l *Ledger) AwaitPeerAddress(ctx context.Context) {
	shared := false
	for attempt := 0; ; attempt++ {
		check, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := l.checkPeerAddress(check, shared)
		cancel()
		if err == nil {
			l.peerReached.Store(true)
			return
		}
		shared = shared || errors.Is(err, errPeerAddressShared)
		if attempt%30 == 15 || (shared && attempt%30 == 0) {
			l.log.WithError(err).Error("not ready: other replicas cannot forward seat claims to this one; set PEER_ADDRESS or POD_IP")
		}
		wait := time.Second
		if attempt < 10 {
			wait = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// PeerReached reports whether AwaitPeerAddress saw this replica answer at its peer
// address: gate readiness on it.
func (l *Ledger) PeerReached() bool { return l.peerReached.Load() }
