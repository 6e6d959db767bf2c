//go:build race

package autoscaler

const raceEnabled = true
