package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name holds a space and a parenthesis, as a process may
	// name itself.
	line := "4242 (kube api) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 567 0 0 20 0 12 0 100 1000000 2000 18446744073709551615"
	got, ok := parseStat(line)
	if !ok || got != 18.01 {
		t.Fatalf("parseStat = %v, %v; want 18.01 s (1234+567 ticks)", got, ok)
	}
	if _, ok := parseStat("4242 (short) S 1 2"); ok {
		t.Error("a truncated stat line parsed")
	}
	if s, ok := ProcessCPU(os.Getpid()); !ok || s < 0 {
		t.Errorf("own process CPU = %v, %v", s, ok)
	}
}

func TestParseMachineStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	busy, total, ok := parseMachineStat("cpu  100 5 50 800 20 3 2 0 40 0")
	if !ok || busy != 1.6 || total != 9.8 {
		t.Fatalf("parseMachineStat = %v, %v, %v; want 1.6 s busy (guest is inside user) of 9.8 s", busy, total, ok)
	}
	for _, bad := range []string{"cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 x 4 5 6 7 8", "cpu 1 2 3"} {
		if _, _, ok := parseMachineStat(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if busy, total, ok := machineCPU(); !ok || busy <= 0 || total < busy {
		t.Errorf("this machine's CPU = %v busy of %v, %v", busy, total, ok)
	}
}

// The burst is widened to the samples around it, and a process that was
// not sampled at both ends has no share.
func TestWindowOfSamples(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sample := func(s int, busy float64, procs map[string]float64) CPUSample {
		return CPUSample{At: t0.Add(time.Duration(s) * time.Second), Procs: procs, Busy: busy, Total: 2 * float64(s)}
	}
	samples := []CPUSample{
		sample(0, 0, map[string]float64{"api": 0}),
		sample(1, 1, map[string]float64{"api": 0.5}),
		sample(2, 2.5, map[string]float64{"api": 1.5, "suite": 0.1}),
		sample(3, 4.5, map[string]float64{"api": 2.5, "suite": 0.3}),
		sample(4, 5, map[string]float64{"api": 2.6, "suite": 0.4}),
	}
	b, ok := WindowOf(samples, t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond))
	if !ok || b.Seconds != 2 || b.MachineSeconds != 4 || b.Idle != 0.125 || b.CPUSeconds["api"] != 2 {
		t.Fatalf("burst = %+v, %v; want samples 1 to 3: 2 s, 4 machine-s, 12.5%% idle, api 2 s", b, ok)
	}
	if _, ok := b.CPUSeconds["suite"]; ok {
		t.Errorf("a process first sampled inside the window has a share: %v", b.CPUSeconds)
	}
	if _, ok := WindowOf(samples, t0.Add(time.Second), t0.Add(5*time.Second)); ok {
		t.Error("a window that outlasts the samples has a burst")
	}
}
