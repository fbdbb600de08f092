package main

import (
	"strings"
	"testing"
)

// A flag of the wrong type stops serve at once with exit status 2 and a message naming
// the flag, the value and what it wants.
func TestServeFlagsAreTyped(t *testing.T) {
	cases := map[string]struct{ arg, want string }{
		"duration":  {"--reservation-ttl=soon", `invalid argument "soon" for "--reservation-ttl" flag: want a duration such as 30s or 5m`},
		"integer":   {"--max-inflight-admissions=many", `invalid argument "many" for "--max-inflight-admissions" flag: want an integer`},
		"quantity":  {"--max-inflight-body-bytes=lots", `invalid argument "lots" for "--max-inflight-body-bytes" flag: want a byte quantity`},
		"switch":    {"--converge=maybe", `invalid argument "maybe" for "--converge" flag: want on or off`},
		"enum":      {"--validation-mode=shout", `invalid argument "shout" for "--validation-mode" flag: want reject or warn`},
		"log level": {"--log-level=loud", `invalid argument "loud" for "--log-level" flag: want trace, debug, info, warn or error`},
		"cert mode": {"--cert-mode=magic", `want file or self`},
		"deadline":  {"--admission-deadline=4", `invalid argument "4" for "--admission-deadline" flag`},
		"cool-down": {"--fallback-cooldown=5", `for "--fallback-cooldown" flag: want a duration`},
		"drain":     {"--shutdown-drain=x", `for "--shutdown-drain" flag`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := run("serve", c.arg)
			if exitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("serve %s: %v (exit %d), want exit 2 and %q", c.arg, err, exitCode(err), c.want)
			}
		})
	}
}

// Typed flags still reach the configuration as given; a switch alone means on.
func TestServeTypedFlagsReachTheConfiguration(t *testing.T) {
	for _, s := range serveSettings {
		t.Setenv(s.env, "")
	}
	t.Setenv("CONVERGE", "off")
	cfg, err := loadServeConfig(serveFlags(t, "--reservation-ttl", "45s", "--max-inflight-admissions=8", "--converge", "--profiling=off", "--log-level=DEBUG"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Ledger.ReservationTTL.String() != "45s" || cfg.Serving.Limits.MaxInFlight != 8 || !cfg.Converge || cfg.Serving.Profiling || cfg.LogLevel.String() != "debug" {
		t.Fatalf("flags not read: ttl %v, inflight %d, converge %v, profiling %v, level %v", cfg.Ledger.ReservationTTL, cfg.Serving.Limits.MaxInFlight, cfg.Converge, cfg.Serving.Profiling, cfg.LogLevel)
	}
	if cfg, err = loadServeConfig(serveFlags(t, "--converge=off")); err != nil || cfg.Converge {
		t.Fatalf("--converge=off: %v, converge %v", err, cfg != nil && cfg.Converge)
	}
}

// serve --help lists every setting once, under the group of its purpose, groups in order.
func TestServeHelpGroupedByPurpose(t *testing.T) {
	out, err := run("serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for _, g := range settingGroups {
		at := strings.Index(out, "\n"+g.title+":\n")
		if at < 0 || at < last {
			t.Fatalf("group %q missing or out of order:\n%s", g.title, out)
		}
		last = at
		section := out[at:]
		if end := strings.Index(section[1:], "\n\n"); end >= 0 {
			section = section[:end+1]
		}
		for _, key := range g.keys {
			if !strings.Contains(section, "--"+key+" ") {
				t.Errorf("--%s not under %q", key, g.title)
			}
		}
	}
	for _, s := range serveSettings {
		if n := strings.Count(out, "  --"+s.key+" "); n != 1 {
			t.Errorf("--%s listed %d times", s.key, n)
		}
	}
	if !strings.Contains(out, "--reservation-ttl duration") || !strings.Contains(out, "--converge on|off[=on]") {
		t.Errorf("types not shown:\n%s", out)
	}
}
