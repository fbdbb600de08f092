package main

import (
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
)

// The interruption signals are off by default, with the documented rule; a queue turns
// them on with the rule given; bad values stop serve with a message naming the setting.
func TestInterruptionConfig(t *testing.T) {
	for _, s := range serveSettings {
		t.Setenv(s.env, "")
	}
	cfg, err := loadServeConfig(serveFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Interruption.Queue != "" || cfg.Loop.MoveSignalledNodes || cfg.Interruption.Rule != interruption.DefaultRule() {
		t.Fatalf("defaults: queue %q, per-node %v, rule %+v; want off with %+v", cfg.Interruption.Queue, cfg.Loop.MoveSignalledNodes, cfg.Interruption.Rule, interruption.DefaultRule())
	}
	cfg, err = loadServeConfig(serveFlags(t, "--interruption-queue", "cksw-signals", "--interruption-window", "90s",
		"--interruption-risk-share", "30%", "--interruption-risk-min-nodes", "3", "--interruption-move-signalled-nodes"))
	if err != nil {
		t.Fatal(err)
	}
	want := interruption.Rule{Window: 90 * time.Second, SharePercent: 30, MinNodes: 3}
	if cfg.Interruption.Queue != "cksw-signals" || !cfg.Loop.MoveSignalledNodes || cfg.Interruption.Rule != want {
		t.Fatalf("set: %+v", cfg)
	}
	for _, bad := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--interruption-queue", "q", "--converge=off"}, "INTERRUPTION_QUEUE \"q\" needs CONVERGE=on"},
		{[]string{"--interruption-risk-share", "0.5"}, "INTERRUPTION_RISK_SHARE"},
		{[]string{"--interruption-risk-share", "0%"}, "INTERRUPTION_RISK_SHARE"},
		{[]string{"--interruption-risk-share", "101%"}, "INTERRUPTION_RISK_SHARE"},
		{[]string{"--interruption-risk-min-nodes", "0"}, "INTERRUPTION_RISK_MIN_NODES"},
		{[]string{"--interruption-window", "0s"}, "INTERRUPTION_WINDOW"},
	} {
		if _, err := loadServeConfig(serveFlags(t, bad.args...)); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%v: %v, want an error naming %s", bad.args, err, bad.msg)
		}
	}
}
