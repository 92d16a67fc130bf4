package builder

import (
	"bufio"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestProgressWriter(t *testing.T) {
	var got []string
	var fractions int
	var last int64
	p := &progressWriter{w: io.Discard, total: 100 << 20, report: func(s string) { got = append(got, s) },
		fraction: func(what string, done, total int64) {
			if what != "writing image" || done < last || done > total {
				t.Errorf("fraction(%q, %d, %d) after %d", what, done, total, last)
			}
			fractions++
			last = done
		}}
	for i := 0; i < 110; i++ { // a little more than total, as tar headers add
		if _, err := p.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 10 || got[0] != "writing image: 10% of 100 MiB" || got[9] != "writing image: 100% of 100 MiB" {
		t.Errorf("reports = %q", got)
	}
	if fractions != 100 || last != 100<<20 {
		t.Errorf("%d fraction reports ending at %d, want 100 ending at the total", fractions, last)
	}
}

func TestScanLines(t *testing.T) {
	sc := bufio.NewScanner(strings.NewReader("a\n(Reading 5%\r(Reading 100%\r\ndone"))
	sc.Split(scanLines)
	var got []string
	for sc.Scan() {
		if sc.Text() != "" {
			got = append(got, sc.Text())
		}
	}
	if want := []string{"a", "(Reading 5%", "(Reading 100%", "done"}; !reflect.DeepEqual(got, want) {
		t.Errorf("lines = %q, want %q", got, want)
	}
}
