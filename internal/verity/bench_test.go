package verity_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/verity"
)

// BenchmarkAgainstVeritysetup (make bench; issue 23): the hash tree of an
// image (STRATA_BENCH_IMAGE; make bench passes the Debian node image,
// else 181 MB of random bytes) computed by Compute and written to a file,
// beside `veritysetup format --no-superblock` of the same blocks with the
// same salt into a hash file, rounds alternating. It reports the medians
// of 5 rounds each, wall and CPU time, and the ratio of the walls
// (STRATA_BENCH_REPORT, when set, receives the line).
func BenchmarkAgainstVeritysetup(b *testing.B) {
	if _, err := exec.LookPath("veritysetup"); err != nil {
		b.Fatal("veritysetup required (run make deps)")
	}
	dir := b.TempDir()
	img := os.Getenv("STRATA_BENCH_IMAGE")
	if img == "" {
		img = filepath.Join(dir, "data")
		data := pattern(181 << 20 / verity.BlockSize)
		if err := os.WriteFile(img, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	f, err := os.Open(img)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	blocks := fi.Size() / verity.BlockSize
	salt := []byte("0123456789abcdef0123456789abcdef")
	p := params(blocks, salt)
	var root string
	ours := func() (time.Duration, time.Duration) {
		cpu0, start := cpuSelf(), time.Now()
		t, err := verity.Compute(context.Background(), f, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ours"), t.Hash, 0o644); err != nil {
			b.Fatal(err)
		}
		root = t.RootHex()
		return time.Since(start), cpuSelf() - cpu0
	}
	theirs := func() (time.Duration, time.Duration) {
		cmd := exec.Command("veritysetup", "format", img, filepath.Join(dir, "theirs"), "--no-superblock",
			"--salt=30313233343536373839616263646566"+"30313233343536373839616263646566",
			"--data-blocks="+strconv.FormatInt(blocks, 10))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("veritysetup format: %v\n%s", err, out)
		}
		wall := time.Since(start)
		if got := rootOf(b, out); got != root {
			b.Fatalf("veritysetup's root %s, ours %s", got, root)
		}
		u := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return wall, time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	var ow, oc, tw, tc []time.Duration
	ours() // the page cache holds the image for both sides
	b.ResetTimer()
	for range 5 {
		w, c := ours()
		ow, oc = append(ow, w), append(oc, c)
		w, c = theirs()
		tw, tc = append(tw, w), append(tc, c)
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	line := fmt.Sprintf("dm-verity tree of %d MB (%s): strata %s (CPU %s), veritysetup format %s (CPU %s); ratio %.2fx (aim: at most 1.0x)",
		fi.Size()>>20, filepath.Base(img), median(ow).Round(time.Millisecond), median(oc).Round(time.Millisecond),
		median(tw).Round(time.Millisecond), median(tc).Round(time.Millisecond), float64(median(ow))/float64(median(tw)))
	b.ReportMetric(float64(median(ow))/float64(median(tw)), "ratio")
	b.Log(line)
	if out := os.Getenv("STRATA_BENCH_REPORT"); out != "" {
		_ = os.WriteFile(filepath.Clean(out), []byte(line+"\n"), 0o644)
	}
}

func cpuSelf() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
