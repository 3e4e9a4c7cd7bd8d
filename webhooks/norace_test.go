//go:build !race

package webhooks_test

const raceEnabled = false
