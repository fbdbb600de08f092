package main

import (
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

func TestServeConfigDrainAndLimits(t *testing.T) {
	for _, s := range serveSettings {
		t.Setenv(s.env, "")
	}
	cfg, err := loadServeConfig(serveFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	want := webhook.AdmissionLimits{MaxInFlight: 256, MaxInFlightBytes: 24 << 20}
	if cfg.Serving.ShutdownDrain != 5*time.Second || cfg.Serving.Limits != want {
		t.Fatalf("defaults: drain %v, limits %+v", cfg.Serving.ShutdownDrain, cfg.Serving.Limits)
	}
	t.Setenv("SHUTDOWN_DRAIN", "0")
	t.Setenv("MAX_INFLIGHT_BODY_BYTES", "64Mi")
	if cfg, err = loadServeConfig(serveFlags(t, "--max-inflight-admissions", "8")); err != nil {
		t.Fatal(err)
	}
	if cfg.Serving.ShutdownDrain != 0 || cfg.Serving.Limits.MaxInFlight != 8 || cfg.Serving.Limits.MaxInFlightBytes != 64<<20 {
		t.Fatalf("not read: drain %v, limits %+v", cfg.Serving.ShutdownDrain, cfg.Serving.Limits)
	}
}

func TestServeConfigDrainAndLimitErrors(t *testing.T) {
	cases := map[string]string{
		"SHUTDOWN_DRAIN":          "-1s",
		"MAX_INFLIGHT_ADMISSIONS": "0",
		"MAX_INFLIGHT_BODY_BYTES": "1Mi", // below one maximum body
	}
	for env, value := range cases {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, value)
			_, err := loadServeConfig(serveFlags(t))
			if err == nil || !strings.Contains(err.Error(), env) {
				t.Fatalf("%s=%s: error %v does not name the setting", env, value, err)
			}
		})
	}
}
