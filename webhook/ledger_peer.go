package webhook

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

	"k8s.io/apimachinery/pkg/types"
)

// PeerClaimPath is where a replica answers the claims other replicas forward to it.
const PeerClaimPath = "/ledger/v1/claim"

// maxPeerBody bounds a forwarded claim's body.
const maxPeerBody = 4 << 10

// peerRequest is a forwarded claim, or release, of one admission's seat.
type peerRequest struct {
	Namespace string    `json:"namespace"`
	Revision  types.UID `json:"revision"`
	// ID is the hash of the admission UID (idHash), the reservation's key.
	ID      uint64 `json:"id"`
	Release bool   `json:"release,omitempty"`
	// Owner is the replica the caller believes answers at this address: another
	// process there (the owner's container restarted, its IP reused) says so.
	Owner string `json:"owner,omitempty"`
}

// peerResponse is the owner's answer.
type peerResponse struct {
	Seat  int    `json:"seat,omitempty"`
	Error string `json:"error,omitempty"`
	// Identity names the answering replica on 410 Gone.
	Identity string `json:"identity,omitempty"`
}

// errOwnerGone is evidence that the owner process is gone: its address refuses
// connections, or another process answers there.
var errOwnerGone = errors.New("the seat owner is gone")

// errPeerRefused is a definitive answer of the owner (a bad request, a full record):
// the claim is not retried.
var errPeerRefused = errors.New("the seat owner refused the claim")

// PeerHandler answers claims and releases forwarded by other replicas: only as the
// revision's owner (409 Conflict otherwise, and the caller reads the record again).
func (l *SeatLedger) PeerHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req peerRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxPeerBody)).Decode(&req); err != nil || req.Revision == "" || req.ID == 0 {
			writePeer(w, http.StatusBadRequest, peerResponse{Error: "want a JSON claim with namespace, revision and id"})
			return
		}
		if req.Owner != "" && req.Owner != l.identity {
			writePeer(w, http.StatusGone, peerResponse{Error: fmt.Sprintf("this is %s, not %s", l.identity, req.Owner), Identity: l.identity})
			return
		}
		rev := Revision{Namespace: req.Namespace, UID: req.Revision}
		if req.Release {
			l.mu.Lock()
			if s := l.revs[rev]; s != nil {
				l.unreserve(s, req.ID)
			}
			l.mu.Unlock()
			writePeer(w, http.StatusOK, peerResponse{})
			return
		}
		seat, _, err := l.claim(r.Context(), rev, req.ID, false)
		switch {
		case err == nil:
			writePeer(w, http.StatusOK, peerResponse{Seat: seat})
		case errors.Is(err, errNotOwner), errors.Is(err, errHandedOver):
			writePeer(w, http.StatusConflict, peerResponse{Error: err.Error()})
		case errors.Is(err, ErrRecordFull):
			writePeer(w, http.StatusUnprocessableEntity, peerResponse{Error: err.Error()})
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

// forward asks the owner at peer for a seat. errNotOwner: the owner does not own the
// revision (any more); errPeerRefused: a definitive refusal; any other error: the
// owner could not answer now.
func (l *SeatLedger) forward(ctx context.Context, owner, peer string, rev Revision, hash uint64) (int, error) {
	resp, err := l.callPeer(ctx, peer, peerRequest{Namespace: rev.Namespace, Revision: rev.UID, ID: hash, Owner: owner})
	if err != nil {
		return 0, err
	}
	return resp.Seat, nil
}

// forwardRelease asks the owner at peer to free an admission's seat.
func (l *SeatLedger) forwardRelease(ctx context.Context, owner, peer string, rev Revision, hash uint64) error {
	_, err := l.callPeer(ctx, peer, peerRequest{Namespace: rev.Namespace, Revision: rev.UID, ID: hash, Release: true, Owner: owner})
	return err
}

func (l *SeatLedger) callPeer(ctx context.Context, peer string, req peerRequest) (peerResponse, error) {
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
		if !req.Release && resp.Seat < 1 {
			return peerResponse{}, fmt.Errorf("%w: seat %d from %s", errPeerRefused, resp.Seat, peer)
		}
		return resp, nil
	case httpResp.StatusCode == http.StatusConflict:
		return peerResponse{}, errNotOwner
	case httpResp.StatusCode == http.StatusGone:
		// Another process answers at the owner's address, maybe this one (its
		// container restarted): the owner is gone. (Peer addresses are unique per
		// live replica: the pod IP, checked by each replica before it is ready.)
		return peerResponse{}, fmt.Errorf("%w: %s", errOwnerGone, resp.Error)
	case httpResp.StatusCode == http.StatusForbidden:
		// Not a refusal of the claim: the replicas' certificates differ for a moment
		// while a new one spreads. Retried.
		return peerResponse{}, fmt.Errorf("forward a claim to %s: %s: %s", peer, httpResp.Status, resp.Error)
	case httpResp.StatusCode >= 400 && httpResp.StatusCode < 500:
		return peerResponse{}, fmt.Errorf("%w: %s: %s", errPeerRefused, httpResp.Status, resp.Error)
	default:
		return peerResponse{}, fmt.Errorf("forward a claim to %s: %s: %s", peer, httpResp.Status, resp.Error)
	}
}

// CheckPeerAddress calls this replica's own peer address as another replica would and
// reports whether this replica answers there, three times on fresh connections (an
// address shared by several replicas, such as a Service's, fails). Other replicas take
// a refusal at that address, or another process answering there, as proof that this
// replica is gone, so it must be right before this replica takes any revision: gate
// readiness on it.
func (l *SeatLedger) CheckPeerAddress(ctx context.Context) error {
	if l.peerURL == "" || l.peers == nil {
		return nil
	}
	for range 3 {
		l.peers.CloseIdleConnections()
		_, err := l.callPeer(ctx, l.peerURL, peerRequest{Namespace: "-", Revision: "self-check", ID: 1, Release: true, Owner: l.identity})
		if err != nil {
			return fmt.Errorf("this replica does not answer at its peer address %s (PEER_ADDRESS): %w", l.peerURL, err)
		}
	}
	return nil
}
