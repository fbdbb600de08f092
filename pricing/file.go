package pricing

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Anywhere is the location of a price-file line that holds in every region and zone.
const Anywhere = "*"

// maxLine bounds one line of a price file.
const maxLine = 4096

// Table is a price file held in memory: prices by instance type, capacity type and
// location (a zone, a region, or Anywhere). It implements Source without any network.
//
// The file has one price per line, fields separated by blanks, '#' starting a comment:
//
//	# instance-type  capacity-type  zone|region|*  usd-per-hour
//	m5.large         on-demand      us-east-1      0.096
//	m5.large         spot           us-east-1a     0.0351
//	m5.large         spot           *              0.04
//
// A lookup tries the key's zone, then its region, then Anywhere.
type Table struct {
	prices map[tableKey]float64
}

type tableKey struct{ instanceType, capacityType, location string }

// Entry is one line of a price file.
type Entry struct {
	InstanceType, CapacityType, Location string
	USDPerHour                           float64
}

// Entries returns the prices held, sorted.
func (t *Table) Entries() []Entry {
	out := make([]Entry, 0, len(t.prices))
	for k, p := range t.prices {
		out = append(out, Entry{k.instanceType, k.capacityType, k.location, p})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.InstanceType+" "+a.CapacityType+" "+a.Location < b.InstanceType+" "+b.CapacityType+" "+b.Location
	})
	return out
}

// Len returns the number of prices held.
func (t *Table) Len() int { return len(t.prices) }

// LoadFile reads a price file.
func LoadFile(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("price file: %w", err)
	}
	defer f.Close()
	t, err := ParseTable(f)
	if err != nil {
		return nil, fmt.Errorf("price file %s: %w", path, err)
	}
	return t, nil
}

// ParseTable reads a price file from r; an error names the line at fault.
func ParseTable(r io.Reader) (*Table, error) {
	t := &Table{prices: map[tableKey]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1024), maxLine)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		k, price, err := parseLine(fields)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if _, dup := t.prices[k]; dup {
			return nil, fmt.Errorf("line %d: %s %s %s priced twice", n, k.instanceType, k.capacityType, k.location)
		}
		t.prices[k] = price
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	if len(t.prices) == 0 {
		return nil, fmt.Errorf("no prices (want lines of: instance-type capacity-type zone|region|* usd-per-hour)")
	}
	return t, nil
}

func parseLine(fields []string) (tableKey, float64, error) {
	if len(fields) != 4 {
		return tableKey{}, 0, fmt.Errorf("%d fields, want 4: instance-type capacity-type zone|region|* usd-per-hour", len(fields))
	}
	k := tableKey{instanceType: fields[0], capacityType: NormalizeCapacityType(fields[1]), location: fields[2]}
	if k.capacityType != OnDemand && k.capacityType != Spot {
		return tableKey{}, 0, fmt.Errorf("capacity type %q: want %s or %s", fields[1], OnDemand, Spot)
	}
	price, err := strconv.ParseFloat(fields[3], 64)
	if err != nil || math.IsNaN(price) || math.IsInf(price, 0) || price < 0 {
		return tableKey{}, 0, fmt.Errorf("price %q: want a non-negative number of USD per hour", fields[3])
	}
	return k, price, nil
}

// Price implements Source.
func (t *Table) Price(_ context.Context, k Key) (float64, error) {
	if err := k.Validate(); err != nil {
		return 0, err
	}
	for _, loc := range []string{k.Zone, k.Region, Anywhere} {
		if loc == "" {
			continue
		}
		if p, ok := t.prices[tableKey{k.InstanceType, k.CapacityType, loc}]; ok {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%s: %w in the price file", k, ErrNoPrice)
}
