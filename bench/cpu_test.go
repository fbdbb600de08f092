//go:build bench

package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux).
const userHZ = 100

// cpuComponents name the processes of the local cluster, by the command name the
// kernel keeps (15 characters), in the order the CPU table prints them; every other
// process (kernel threads included) counts as "other".
var cpuComponents = []struct{ comm, name string }{
	{"custom-kube-sch", "webhook (2 replicas)"},
	{"floorhook", "floor (2 processes)"},
	{"kube-apiserver", "API server"},
	{"etcd", "etcd"},
	{"kube-controller", "controller-manager"},
	{"kube-scheduler", "scheduler"},
	{"kwok", "kwok"},
	{"karpenter-kwok", "Karpenter"},
	{"bench.test", "bench (proxy, watch)"},
}

const otherCPU = "other"

// procCPU is one process's CPU seconds (user + system) so far, and its component.
type procCPU struct {
	name string
	secs float64
}

// cpuSeconds returns the CPU seconds the processes on the machine have used so far,
// by process (PID and start time, so that a reused PID is another process).
func cpuSeconds() map[string]procCPU {
	byComm := map[string]string{}
	for _, c := range cpuComponents {
		byComm[c.comm] = c.name
	}
	out := map[string]procCPU{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		s := string(raw)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		// After the command: state(0) ... utime(11) stime(12) ... starttime(19).
		fields := strings.Fields(s[closing+1:])
		if len(fields) < 20 {
			continue
		}
		u, err1 := strconv.ParseFloat(fields[11], 64)
		k, err2 := strconv.ParseFloat(fields[12], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		name, ok := byComm[s[open+1:closing]]
		if !ok {
			name = otherCPU
		}
		out[filepath.Base(filepath.Dir(p))+"/"+fields[19]] = procCPU{name: name, secs: (u + k) / userHZ}
	}
	return out
}

// cpuSince returns the CPU seconds used since before, by component: all of a process
// started since, none of one that ended since (a process that ended would otherwise
// make the difference negative).
func cpuSince(before map[string]procCPU) map[string]float64 {
	out := map[string]float64{}
	for id, p := range cpuSeconds() {
		out[p.name] += p.secs - before[id].secs
	}
	return out
}

// quietCPU is the CPU use (in cores) below which the machine counts as quiet.
const quietCPU = 0.15

// waitQuiet waits until the machine's processes use less than quietCPU cores over two
// seconds, at most limit: a burst leaves work behind (Karpenter consolidating its
// nodes, kwok and the garbage collector deleting them), which would otherwise be
// measured as part of the next phase. It returns how long it waited and the last rate.
func waitQuiet(ctx context.Context, limit time.Duration) (time.Duration, float64) {
	start := time.Now()
	var rate float64
	for time.Since(start) < limit && ctx.Err() == nil {
		before := cpuSeconds()
		time.Sleep(2 * time.Second)
		rate = sumValues(cpuSince(before)) / 2
		if rate < quietCPU {
			break
		}
	}
	return time.Since(start), rate
}
