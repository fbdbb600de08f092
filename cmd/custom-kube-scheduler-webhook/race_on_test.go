//go:build race

package main

// raceEnabled: the race detector inflates what a heap measurement sees.
const raceEnabled = true
