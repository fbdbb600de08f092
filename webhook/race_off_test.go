//go:build !race

package webhook

// raceEnabled: the race detector's shadow memory inflates RSS several times over.
const raceEnabled = false
