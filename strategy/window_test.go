package strategy

import (
	"strings"
	"testing"
	"time"
)

func mustWindow(t *testing.T, s string) *Window {
	t.Helper()
	w, err := ParseWindow(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func at(t *testing.T, tz, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWindowOpenInItsTimeZone(t *testing.T) {
	w := mustWindow(t, "schedule=0 2 * * *; duration=3h; timeZone=Europe/Berlin")
	for _, c := range []struct {
		when string
		open bool
	}{
		{"2026-01-14 01:59", false},
		{"2026-01-14 02:00", true},
		{"2026-01-14 04:59", true},
		{"2026-01-14 05:00", false},
		{"2026-01-14 12:00", false},
	} {
		// The same instant seen from UTC: Berlin's 02:00 in January is 01:00 UTC.
		now := at(t, "Europe/Berlin", c.when).UTC()
		if got := w.Open(now); got != c.open {
			t.Errorf("%s Berlin: open %v, want %v", c.when, got, c.open)
		}
	}
	// Closed at noon: it opens next at 02:00 Berlin the next day.
	if got, want := w.NextOpen(at(t, "Europe/Berlin", "2026-01-14 12:00")), at(t, "Europe/Berlin", "2026-01-15 02:00"); !got.Equal(want) {
		t.Errorf("next open %s, want %s", got, want)
	}
	utc := mustWindow(t, "schedule=0 2 * * *; duration=3h")
	if utc.Open(at(t, "UTC", "2026-01-14 01:30")) || !utc.Open(at(t, "UTC", "2026-01-14 02:30")) {
		t.Error("without a time zone the window is in UTC")
	}
}

func TestWindowCrossingMidnight(t *testing.T) {
	// Weekdays from 22:00 for 4 hours: Friday's opening runs into Saturday.
	w := mustWindow(t, "schedule=0 22 * * 1-5; duration=4h; timeZone=America/New_York")
	for _, c := range []struct {
		when string
		open bool
	}{
		{"2026-03-20 21:59", false}, // Friday
		{"2026-03-20 22:00", true},
		{"2026-03-20 23:59", true},
		{"2026-03-21 00:30", true}, // Saturday, still Friday's opening
		{"2026-03-21 01:59", true},
		{"2026-03-21 02:00", false},
		{"2026-03-21 22:30", false}, // no opening on Saturday
	} {
		if got := w.Open(at(t, "America/New_York", c.when)); got != c.open {
			t.Errorf("%s New York: open %v, want %v", c.when, got, c.open)
		}
	}
	start, end := w.Opening(at(t, "America/New_York", "2026-03-21 01:00"))
	if !start.Equal(at(t, "America/New_York", "2026-03-20 22:00")) || !end.Equal(at(t, "America/New_York", "2026-03-21 02:00")) {
		t.Errorf("opening %s..%s, want Friday 22:00..Saturday 02:00", start, end)
	}
	if got, want := w.NextOpen(at(t, "America/New_York", "2026-03-21 03:00")), at(t, "America/New_York", "2026-03-23 22:00"); !got.Equal(want) {
		t.Errorf("after Friday's opening the next is Monday's: got %s, want %s", got, want)
	}
}

func TestWindowAcrossDaylightSavingTime(t *testing.T) {
	w := mustWindow(t, "schedule=0 1 * * *; duration=2h; timeZone=Europe/Berlin")
	// 29 March 2026: clocks go from 02:00 to 03:00 in Berlin. The window opens at 01:00
	// (00:00 UTC) and lasts two hours of real time: to 04:00 local, 02:00 UTC.
	open := at(t, "Europe/Berlin", "2026-03-29 01:00")
	if !w.Open(open) || open.UTC().Hour() != 0 {
		t.Fatalf("opens at 01:00 Berlin (00:00 UTC) on the day clocks go forward: %s", open.UTC())
	}
	if !w.Open(at(t, "Europe/Berlin", "2026-03-29 03:30")) || w.Open(at(t, "Europe/Berlin", "2026-03-29 04:00")) {
		t.Error("a 2h window from 01:00 lasts to 04:00 local when the clocks skip an hour")
	}
	// The next day it opens at 01:00 local again, now 23:00 UTC the day before.
	next := w.NextOpen(at(t, "Europe/Berlin", "2026-03-29 12:00"))
	if want := at(t, "Europe/Berlin", "2026-03-30 01:00"); !next.Equal(want) || next.UTC().Hour() != 23 {
		t.Errorf("next open %s (UTC %s), want 01:00 Berlin, 23:00 UTC", next, next.UTC())
	}
	// In the hours the clocks change, robfig/cron (Karpenter's cron library) does what
	// cron does: a time the clocks repeat hits twice, a time they skip hits not at all
	// that day. docs/strategies.md says to keep windows out of those hours or in UTC.
	fall := mustWindow(t, "schedule=30 2 * * *; duration=30m; timeZone=Europe/Berlin")
	first := fall.NextOpen(at(t, "Europe/Berlin", "2026-10-25 00:00"))
	second := fall.NextOpen(first.Add(fall.Duration))
	if second.Sub(first) != time.Hour {
		t.Errorf("02:30 on the day the clocks go back: opened at %s then %s, want twice an hour apart", first, second)
	}
	got := fall.NextOpen(at(t, "Europe/Berlin", "2026-03-29 00:00"))
	if want := at(t, "Europe/Berlin", "2026-03-30 02:30"); !got.Equal(want) {
		t.Errorf("02:30 on the day the clocks skip it: opened %s, want the next day's %s", got, want)
	}
}

func TestParseWindow(t *testing.T) {
	if w, err := ParseWindow("always"); w != nil || err != nil {
		t.Errorf("always: %v %v", w, err)
	}
	w := mustWindow(t, " schedule=@daily ; duration=90m ; maxMoves=5 ")
	if w.MaxMoves != 5 || w.Duration != 90*time.Minute || w.String() != "schedule=@daily; duration=1h30m0s; maxMoves=5" {
		t.Errorf("parsed %+v as %q", w, w.String())
	}
	for in, want := range map[string]string{
		"schedule=0 2 * * *":                                     "required",
		"duration=1h":                                            "required",
		"schedule=0 2 * *; duration=1h":                          "schedule",
		"schedule=0 2 * * *; duration=30s":                       "at least 1m",
		"schedule=0 2 * * *; duration=1h; timeZone=Mars/Olympus": "timeZone",
		"schedule=CRON_TZ=UTC 0 2 * * *; duration=1h":            "in timeZone",
		"schedule=0 2 * * *; duration=1h; maxMoves=-1":           "maxMoves",
		"schedule=0 2 * * *; duration=1h; start=now":             "unknown part",
		"0 2 * * *": "key=value",
	} {
		if _, err := ParseWindow(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", in, err, want)
		}
	}
}

func TestTimingMostSpecificWins(t *testing.T) {
	cluster := Timing{Window: mustWindow(t, "schedule=0 3 * * *; duration=1h"), MinStay: time.Hour}
	policy := AnnotatedObject{Name: "PlacementPolicy shop/web", Origin: OriginPlacementPolicy, Annotations: map[string]string{
		AnnotationStrategy: "a=1:b=1", AnnotationMoveWindow: "schedule=0 1 * * *; duration=2h"}}
	workload := AnnotatedObject{Name: "Deployment shop/web", Annotations: map[string]string{AnnotationMinFallbackStay: "10m"}}
	got := TimingOf([]AnnotatedObject{workload, policy}, policy.Name, cluster)
	if got.Window.Schedule != "0 1 * * *" || got.WindowSource != policy.Name || got.MinStay != 10*time.Minute || got.MinStaySource != workload.Name || got.Err != nil {
		t.Errorf("policy's window and the workload's stay win over the cluster's: %+v", got)
	}
	workload.Annotations[AnnotationMoveWindow] = "always"
	if got := TimingOf([]AnnotatedObject{workload, policy}, policy.Name, cluster); got.Window != nil {
		t.Errorf("the workload's \"always\" wins over its policy's window: %+v", got.Window)
	}
	// A policy that is not the strategy's source sets nothing.
	if got := TimingOf([]AnnotatedObject{{Name: "Deployment shop/own", Annotations: map[string]string{AnnotationStrategy: "a=1"}}, policy}, "Deployment shop/own", cluster); got.Window != cluster.Window {
		t.Errorf("a link after the source set the window: %+v", got.Window)
	}
	workload.Annotations[AnnotationMoveWindow] = "schedule=nope; duration=1h"
	if got := TimingOf([]AnnotatedObject{workload, policy}, policy.Name, cluster); got.Err == nil || !strings.Contains(got.Err.Error(), "Deployment shop/web") {
		t.Errorf("an invalid window names its link: %v", got.Err)
	}
}
