package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// clockTick is the kernel's USER_HZ, the unit of /proc CPU times; Linux
// fixes it at 100 on every architecture Go supports.
const clockTick = 100

// cpuSnapshot is the machine's and the bench process tree's CPU time at
// one moment, to tell how much of the machine other processes used
// during a run (the machine may be shared).
type cpuSnapshot struct {
	machineBusy, machineTotal int64 // ns over all CPUs, /proc/stat
	ours                      int64 // ns: this process, its reaped children, redis-server
}

func takeCPUSnapshot(redisPID int) cpuSnapshot {
	var s cpuSnapshot
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		// cpu user nice system idle iowait irq softirq steal ...
		for i := 1; i < len(f) && i <= 8; i++ {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ns := v * 1e9 / clockTick
			s.machineTotal += ns
			if i != 4 && i != 5 {
				s.machineBusy += ns
			}
		}
	}
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	s.ours = self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano()
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(redisPID) + "/stat"); err == nil {
		// Fields after the command name, which is in parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+1:])
			if len(f) > 12 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				s.ours += (u + st) * 1e9 / clockTick
			}
		}
	}
	return s
}

// othersShare is the share of the machine's CPU capacity that processes
// outside the bench used between a and b.
func othersShare(a, b cpuSnapshot) float64 {
	total := b.machineTotal - a.machineTotal
	if total <= 0 {
		return notMeasured
	}
	others := (b.machineBusy - a.machineBusy) - (b.ours - a.ours)
	return max(0, float64(others)/float64(total))
}
