package main

import "testing"

func TestParseStatCPUCountsStealAsBusyAndIdleAndIOWaitAsNot(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, ok := parseStatCPU([]byte("cpu  100 5 40 800 20 3 2 30 0 0\ncpu0 50 2 20 400 10 1 1 15 0 0\n"))
	if !ok {
		t.Fatal("the aggregate line was not read")
	}
	if want := (machineTicks{busy: 180, total: 1000, steal: 30}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 x 4 5 6 7 8\n", "cpu 1 2 3\n"} {
		if _, ok := parseStatCPU([]byte(bad)); ok {
			t.Errorf("%q read as the aggregate line", bad)
		}
	}
}
