//go:build !race

package report_test

// raceEnabled: the race detector inflates what a heap measurement sees.
const raceEnabled = false
