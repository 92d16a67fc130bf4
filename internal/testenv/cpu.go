package testenv

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime is the processor time, user and system, that this process
// has used so far (every goroutine, in-process servers included).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUClock adds up the CPU time of a benchmark's timed parts, for
// reporting beside its wall time: a loaded machine stretches wall time,
// not the CPU a program spends, so the two tell a busy host from a slow
// program. The zero value is ready; Start and Stop bracket each part.
type CPUClock struct {
	start, total time.Duration
	running      bool
}

// Start starts a timed part.
func (c *CPUClock) Start() {
	c.start, c.running = CPUTime(), true
}

// Stop ends the timed part Start began.
func (c *CPUClock) Stop() {
	if c.running {
		c.total += CPUTime() - c.start
		c.running = false
	}
}

// Total is the CPU time of the parts so far.
func (c *CPUClock) Total() time.Duration { return c.total }

// Report adds the CPU time per operation to b's results, as cpu-ms/op
// (n is the number of operations the parts timed).
func (c *CPUClock) Report(b *testing.B, n int) {
	c.Stop()
	if n > 0 {
		b.ReportMetric(float64(c.total)/1e6/float64(n), "cpu-ms/op")
	}
}
