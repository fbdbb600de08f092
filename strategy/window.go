package strategy

// Move windows: when the convergence loop may make moves that do not protect
// availability (returns from fallback, drift, tidying seats), and how many.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Annotations a workload (or its pod template) carries to set its own move timing; a
// policy's spec.moveWindow and spec.minFallbackStay become the same annotations on its
// link, so the most specific link wins.
const (
	// AnnotationMoveWindow: "schedule=0 2 * * 1-5; duration=3h; timeZone=Europe/Berlin;
	// maxMoves=20", or "always" (no window, whatever a less specific link says).
	AnnotationMoveWindow = "custom-kube-scheduler-webhook.io/move-window"
	// AnnotationMinFallbackStay: how long a pod stays on its fallback term before it may
	// return ("30m"; "0" for no minimum).
	AnnotationMinFallbackStay = "custom-kube-scheduler-webhook.io/min-fallback-stay"
)

// Window is a recurring time window, in the form of a Karpenter NodePool's disruption
// budget (a cron schedule and a duration) plus a time zone: it opens at every hit of
// the schedule, in the time zone, and stays open for the duration.
type Window struct {
	Schedule string
	Duration time.Duration
	// TimeZone is an IANA name; "" is UTC (as Karpenter's budgets).
	TimeZone string
	// MaxMoves caps the moves of one workload per opening of the window (0: no cap).
	MaxMoves int
	sched    cron.Schedule
}

// ParseWindow parses a move-window value: "always" (nil, no window), or parts
// "key=value" separated by ";": schedule (five cron fields, required), duration
// (required, at least a minute), timeZone (IANA name, default UTC), maxMoves.
func ParseWindow(s string) (*Window, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "always") || s == "" {
		return nil, nil
	}
	var w Window
	var haveDuration bool
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("move window %q: part %q is not key=value", s, part)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "schedule":
			w.Schedule = v
		case "duration":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("move window %q: duration: %w", s, err)
			}
			w.Duration, haveDuration = d, true
		case "timeZone":
			w.TimeZone = v
		case "maxMoves":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("move window %q: maxMoves %q: want a non-negative integer", s, v)
			}
			w.MaxMoves = n
		default:
			return nil, fmt.Errorf("move window %q: unknown part %q (want schedule, duration, timeZone, maxMoves)", s, k)
		}
	}
	if w.Schedule == "" || !haveDuration {
		return nil, fmt.Errorf("move window %q: schedule and duration are required", s)
	}
	if err := w.compile(); err != nil {
		return nil, fmt.Errorf("move window %q: %w", s, err)
	}
	return &w, nil
}

// compile checks w and parses its schedule in its time zone.
func (w *Window) compile() error {
	if w.Duration < time.Minute {
		return fmt.Errorf("duration %s: must be at least 1m (cron has minutes)", w.Duration)
	}
	// The time zone is a field of its own, as a CronJob's spec.timeZone: a TZ= prefix
	// in the schedule would be a second way to say it.
	if strings.HasPrefix(w.Schedule, "TZ=") || strings.HasPrefix(w.Schedule, "CRON_TZ=") {
		return fmt.Errorf("schedule %q: set the time zone in timeZone, not in the schedule", w.Schedule)
	}
	tz := w.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return fmt.Errorf("timeZone %q: %w", w.TimeZone, err)
	}
	// ParseStandard: five fields and the @daily descriptors, as Karpenter's budgets.
	sched, err := cron.ParseStandard("CRON_TZ=" + tz + " " + w.Schedule)
	if err != nil {
		return fmt.Errorf("schedule %q: %w", w.Schedule, err)
	}
	w.sched = sched
	return nil
}

// Opening is when the window opened last before t (zero when it is closed at t), and
// when that opening ends.
func (w *Window) Opening(t time.Time) (start, end time.Time) {
	// The first hit within the duration before t, as Karpenter's Budget.IsActive
	// walks back. Openings that overlap (a duration longer than the gap between hits)
	// count as several: the cap per opening then applies to each.
	hit := w.sched.Next(t.Add(-w.Duration))
	if hit.After(t) {
		return time.Time{}, time.Time{}
	}
	return hit, hit.Add(w.Duration)
}

// Open reports whether the window is open at t.
func (w *Window) Open(t time.Time) bool {
	start, _ := w.Opening(t)
	return !start.IsZero()
}

// NextOpen is when the window opens next after t (t itself when it is open at t);
// zero when the schedule never hits again.
func (w *Window) NextOpen(t time.Time) time.Time {
	if w.Open(t) {
		return t
	}
	return w.sched.Next(t)
}

// String is the window in the annotation's form.
func (w *Window) String() string {
	s := "schedule=" + w.Schedule + "; duration=" + w.Duration.String()
	if w.TimeZone != "" {
		s += "; timeZone=" + w.TimeZone
	}
	if w.MaxMoves > 0 {
		s += "; maxMoves=" + strconv.Itoa(w.MaxMoves)
	}
	return s
}

// Timing is when a workload's non-urgent moves may happen: its window (nil: any time)
// and its minimum stay on fallback before a return. Source names the link each came
// from ("" for the cluster's default).
type Timing struct {
	Window        *Window
	MinStay       time.Duration
	WindowSource  string
	MinStaySource string
	Err           error
}

// Waits says why non-urgent moves wait at now ("" when they may go): an invalid window or
// minimum stay, or a window closed at now, with where it was set and when it opens.
func (t Timing) Waits(now time.Time) string {
	switch {
	case t.Err != nil:
		return "moves wait for a valid move window: " + t.Err.Error()
	case t.Window != nil && !t.Window.Open(now):
		return fmt.Sprintf("moves wait for window %q (%s; opens at %s)", t.Window.String(), SetBy(t.WindowSource, "MOVE_WINDOW"), t.Window.NextOpen(now).UTC().Format(time.RFC3339))
	}
	return ""
}

// SetBy names where a timing value came from: the link source, or (source "") the
// cluster's setting.
func SetBy(source, setting string) string {
	if source == "" {
		return "set by the cluster's " + setting
	}
	return "set on " + source
}

// TimingOf resolves a workload's move timing from its chain (the links up to and
// including source, the link its strategy came from, most specific first), over the
// cluster's defaults: the first link that sets a value wins. A link's invalid value is
// Err (the caller holds non-urgent moves and says why).
func TimingOf(chain []AnnotatedObject, source string, defaults Timing) Timing {
	t := defaults
	var haveWindow, haveStay bool
	for _, o := range chain {
		if v, ok := o.Annotations[AnnotationMoveWindow]; ok && !haveWindow {
			haveWindow = true
			w, err := ParseWindow(v)
			if err != nil && t.Err == nil {
				t.Err = fmt.Errorf("%s on %s: %w", AnnotationMoveWindow, o.Name, err)
			}
			t.Window, t.WindowSource = w, o.Name
		}
		if v, ok := o.Annotations[AnnotationMinFallbackStay]; ok && !haveStay {
			haveStay = true
			d, err := parseStay(v)
			if err != nil && t.Err == nil {
				t.Err = fmt.Errorf("%s on %s: %w", AnnotationMinFallbackStay, o.Name, err)
			}
			t.MinStay, t.MinStaySource = d, o.Name
		}
		if o.Name == source {
			break
		}
	}
	return t
}

// parseStay parses a minimum stay: a non-negative duration ("0" for none).
func parseStay(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a non-negative duration such as 30m", v)
	}
	return d, nil
}

// ParseMinFallbackStay parses a minimum stay on fallback as the annotation takes it.
func ParseMinFallbackStay(v string) (time.Duration, error) { return parseStay(v) }
