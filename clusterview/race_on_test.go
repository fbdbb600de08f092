//go:build race

package clusterview

// raceEnabled: the race detector's shadow memory inflates RSS several times over.
const raceEnabled = true
