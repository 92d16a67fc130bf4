package overlay_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// BenchmarkCreateAtDepth measures publishing one small overlay at the
// head of a line that already has depth overlays (issue 8: the cost of
// publishing must not grow with the line). STRATA_BENCH_DEPTHS lists the
// depths (default 1,100,1000; make bench adds 10000). It reports the
// process's CPU time beside the wall time (cpu-ms/op).
func BenchmarkCreateAtDepth(b *testing.B) {
	depths := []int{1, 100, 1000}
	if s := os.Getenv("STRATA_BENCH_DEPTHS"); s != "" {
		depths = nil
		for _, f := range strings.Split(s, ",") {
			d, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || d < 1 {
				b.Fatalf("STRATA_BENCH_DEPTHS: %q is not a depth", f)
			}
			depths = append(depths, d)
		}
	}
	for _, depth := range depths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			f := fixture.New(b)
			for i := 1; i <= depth; i++ {
				f.Create("1.0."+strconv.Itoa(i), f.Change("/etc/app/conf.d/v.conf", "v "+strconv.Itoa(i)+"\n"))
			}
			next := depth
			var cpu testenv.CPUClock
			b.ResetTimer()
			cpu.Start()
			for i := 0; i < b.N; i++ {
				next++
				ch := f.Change("/etc/app/conf.d/v.conf", "v "+strconv.Itoa(next)+"\n")
				if _, err := Create(context.Background(), f.Repo, f.Key, ch, CreateOptions{Version: "1.0." + strconv.Itoa(next)}); err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report(b, b.N)
		})
	}
}
