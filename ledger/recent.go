package ledger

import "time"

// recentIDs remembers ids for a while. Every id is kept equally long, so the ids wait
// in a queue in the order they were added and expire from its front. Unlike
// cache.Expiring, which drops expired entries only when another is set, it drops them
// on every add and on each expire call: a revision whose burst is over (no more adds)
// holds none of them once their time is up.
type recentIDs struct {
	until map[uint64]time.Time
	queue []expiry
	head  int
}

func newRecentIDs() *recentIDs { return &recentIDs{until: map[uint64]time.Time{}} }

// add remembers id until the given time, which is never before that of an earlier add
// (now plus a fixed duration).
func (r *recentIDs) add(id uint64, now, until time.Time) {
	r.expire(now)
	r.until[id] = until
	r.queue = append(r.queue, expiry{at: until, hash: id})
}

// has reports whether id is remembered at now.
func (r *recentIDs) has(id uint64, now time.Time) bool {
	t, ok := r.until[id]
	return ok && now.Before(t)
}

// expire forgets the ids whose time is up at now.
func (r *recentIDs) expire(now time.Time) {
	for r.head < len(r.queue) && !now.Before(r.queue[r.head].at) {
		x := r.queue[r.head]
		// An id added again since stays, under its later time.
		if r.until[x.hash].Equal(x.at) {
			delete(r.until, x.hash)
		}
		r.head++
	}
	// Reuse the queue's space once half of it is behind the head.
	if r.head > 0 && r.head >= len(r.queue)/2 {
		n := copy(r.queue, r.queue[r.head:])
		clear(r.queue[n:])
		r.queue, r.head = r.queue[:n], 0
		if cap(r.queue) > 64 && n < cap(r.queue)/4 {
			r.queue = append([]expiry(nil), r.queue...) // give a burst's space back
		}
	}
}

// len is how many ids are remembered (expired ones not dropped yet included).
func (r *recentIDs) len() int { return len(r.until) }
