package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/keyhook/keyhook/test/bench/serve"
)

// The machine's share of a load phase. Every process of the run (the
// nodes, the broker, Redis, this process's sink and producer) shares the
// machine's cores: a fan-out latency measured on a machine with no core
// left measures the queue for a core as much as keyhook. So the load
// table says how busy the machine was and who took it.

// machineTicks is the machine's CPU time so far, in USER_HZ ticks, from
// the first line of /proc/stat.
type machineTicks struct {
	busy, total, steal float64
}

// parseStatCPU reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal [guest guest_nice], where guest
// time is counted in user already. Idle and iowait are not busy; steal
// (the hypervisor running someone else) is, as the machine lost it.
func parseStatCPU(stat []byte) (machineTicks, bool) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return machineTicks{}, false
	}
	var v [8]float64
	for i := range v {
		n, err := strconv.ParseFloat(f[i+1], 64)
		if err != nil {
			return machineTicks{}, false
		}
		v[i] = n
	}
	var t machineTicks
	for _, n := range v {
		t.total += n
	}
	t.busy = t.total - v[3] - v[4]
	t.steal = v[7]
	return t, true
}

func readMachineTicks() (machineTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTicks{}, err
	}
	t, ok := parseStatCPU(b)
	if !ok {
		return machineTicks{}, fmt.Errorf("/proc/stat: no aggregate cpu line")
	}
	return t, nil
}

// machineShare measures, over a phase, the machine's busy time and that
// of each process of the run that it can find.
type machineShare struct {
	t0   machineTicks
	pids []sharePid
}

type sharePid struct {
	name string
	pid  int
	cpu0 float64
}

// startMachineShare starts the measure: the nodes, this process (the
// sink and the producer), the broker and Redis by the ports they listen
// on.
func startMachineShare(nodes []*serve.Node, brokerPort, redisURL string) (*machineShare, error) {
	t0, err := readMachineTicks()
	if err != nil {
		return nil, err
	}
	m := &machineShare{t0: t0}
	for _, n := range nodes {
		m.add("keyhook nodes", n.Pid())
	}
	m.add("this process: the sink and the producer", os.Getpid())
	if p, err := strconv.Atoi(brokerPort); err == nil {
		m.add("the Kafka broker", serve.ListenerPid(p))
	}
	if u, err := url.Parse(redisURL); err == nil {
		if p, err := strconv.Atoi(u.Port()); err == nil {
			m.add("Redis", serve.ListenerPid(p))
		}
	}
	return m, nil
}

func (m *machineShare) add(name string, pid int) {
	if pid == 0 {
		return
	}
	cpu, err := serve.CPUSeconds(pid)
	if err != nil {
		return
	}
	m.pids = append(m.pids, sharePid{name, pid, cpu})
}

// machineReading is what finish measured: the machine's cores, how many
// of them were busy on average, how many the hypervisor took (steal),
// and each process group's cores, in the order first added.
type machineReading struct {
	cores       int
	busy, steal float64
	rows        []cpuRow
}

// cpuRow is one line of the machine's table: CPU seconds a second, i.e.
// cores.
type cpuRow struct {
	name  string
	cores float64
}

// finish ends the measure; nil (and the reason on stderr) when m is nil
// or the machine's counters cannot be read.
func (m *machineShare) finish() *machineReading {
	if m == nil {
		return nil
	}
	t1, err := readMachineTicks()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fanout: the machine's share not measured: %v\n", err)
		return nil
	}
	r := &machineReading{cores: runtime.NumCPU()}
	dt := t1.total - m.t0.total
	if dt <= 0 {
		return nil
	}
	// Ticks of every core over ticks of every core, times the cores.
	r.busy = (t1.busy - m.t0.busy) / dt * float64(r.cores)
	r.steal = (t1.steal - m.t0.steal) / dt * float64(r.cores)
	wall := dt / float64(r.cores) / 100 // seconds, USER_HZ 100
	idx := map[string]int{}
	for _, p := range m.pids {
		cpu, err := serve.CPUSeconds(p.pid)
		if err != nil {
			continue
		}
		i, ok := idx[p.name]
		if !ok {
			i = len(r.rows)
			idx[p.name] = i
			r.rows = append(r.rows, cpuRow{name: p.name})
		}
		r.rows[i].cores += (cpu - p.cpu0) / wall
	}
	return r
}

// printMachineShare prints the table a phase ends with: while what was
// running, and the headline figure of how busy the machine was.
func (b *bench) printMachineShare(r *machineReading, while, figure string) {
	if r == nil {
		return
	}
	cores, busy, steal, rows := r.cores, r.busy, r.steal, r.rows
	fmt.Printf("\nThe machine while %s (%d cores; the latency above includes each delivery's wait for one):\n\n", while, cores)
	fmt.Println("| | cores busy | share of the machine |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| every process | %.2f | %.0f%% |\n", busy, 100*busy/float64(cores))
	rest := busy
	for _, r := range rows {
		fmt.Printf("| %s | %.2f | %.0f%% |\n", r.name, r.cores, 100*r.cores/float64(cores))
		rest -= r.cores
	}
	fmt.Printf("| the rest (kernel, other processes) | %.2f | %.0f%% |\n", max(rest, 0), 100*max(rest, 0)/float64(cores))
	if steal > 0.005 {
		fmt.Printf("| of which taken by the hypervisor (steal) | %.2f | %.0f%% |\n", steal, 100*steal/float64(cores))
	}
	b.record(figure, "% of its cores", 100*busy/float64(cores))
}
