package pricing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Capacity types, with Karpenter's spelling (karpenter.sh/capacity-type).
const (
	OnDemand = "on-demand"
	Spot     = "spot"
	// Reserved is capacity bought ahead: an On-Demand Capacity Reservation or a
	// Capacity Block (Karpenter's reserved, EKS's CAPACITY_BLOCK). It is paid whether
	// pods use it or not, so no Source prices it: reports charge it nothing.
	Reserved = "reserved"
)

// ErrNoPrice is wrapped by every answer that found no price for a Key (an instance type
// unknown to the source, or a capacity type it does not sell there).
var ErrNoPrice = errors.New("no price")

// Key names one price: an instance type, bought on-demand or spot, in a region; spot
// prices differ per zone, so a spot key may name one (empty: the lowest of the region).
type Key struct {
	InstanceType string `json:"instanceType"`
	CapacityType string `json:"capacityType"`
	Region       string `json:"region,omitempty"`
	Zone         string `json:"zone,omitempty"`
}

// String is the key as people read it, e.g. "m5.large spot us-east-1a".
func (k Key) String() string {
	where := k.Zone
	if where == "" {
		where = k.Region
	}
	return strings.TrimSpace(k.InstanceType + " " + k.CapacityType + " " + where)
}

// Validate says what is wrong with a key before a source is asked.
func (k Key) Validate() error {
	if k.InstanceType == "" {
		return errors.New("no instance type")
	}
	if k.CapacityType != OnDemand && k.CapacityType != Spot {
		return fmt.Errorf("capacity type %q: want %s or %s", k.CapacityType, OnDemand, Spot)
	}
	return nil
}

// NormalizeCapacityType maps Karpenter's and EKS's spellings (on-demand, ON_DEMAND,
// spot, SPOT) to OnDemand or Spot; anything else is returned unchanged.
func NormalizeCapacityType(s string) string {
	switch strings.ToLower(strings.ReplaceAll(s, "_", "-")) {
	case OnDemand:
		return OnDemand
	case Spot:
		return Spot
	case Reserved, "capacity-block":
		return Reserved
	}
	return s
}

// Source answers the hourly price in USD of one Key.
type Source interface {
	Price(ctx context.Context, k Key) (float64, error)
}

// Memo remembers a Source's answers, errors included, for the life of one report, so
// that a hundred nodes of one type cost one lookup and one failure is reported once.
// Not safe for concurrent use.
type Memo struct {
	next    Source
	answers map[Key]memoAnswer
}

type memoAnswer struct {
	price float64
	err   error
}

// NewMemo wraps next.
func NewMemo(next Source) *Memo { return &Memo{next: next, answers: map[Key]memoAnswer{}} }

// Price implements Source.
func (m *Memo) Price(ctx context.Context, k Key) (float64, error) {
	if a, ok := m.answers[k]; ok {
		return a.price, a.err
	}
	p, err := m.next.Price(ctx, k)
	m.answers[k] = memoAnswer{p, err}
	return p, err
}

// Summary is the cheapest and the median of a set of prices.
type Summary struct {
	Cheapest float64 `json:"cheapest"`
	Median   float64 `json:"median"`
	// CheapestType is the instance type of the cheapest price.
	CheapestType string `json:"cheapestType"`
	// Priced counts the instance types that had a price.
	Priced int `json:"priced"`
}

// Summarize returns the cheapest and median of prices (instance type -> price);
// false when there is none.
func Summarize(prices map[string]float64) (Summary, bool) {
	if len(prices) == 0 {
		return Summary{}, false
	}
	types := make([]string, 0, len(prices))
	for t := range prices {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool {
		if prices[types[i]] != prices[types[j]] {
			return prices[types[i]] < prices[types[j]]
		}
		return types[i] < types[j]
	})
	n := len(types)
	median := prices[types[n/2]]
	if n%2 == 0 {
		median = (prices[types[n/2-1]] + prices[types[n/2]]) / 2
	}
	return Summary{Cheapest: prices[types[0]], CheapestType: types[0], Median: median, Priced: n}, true
}
