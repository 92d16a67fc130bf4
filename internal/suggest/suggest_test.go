package suggest

import (
	"fmt"
	"testing"
)

func TestNearest(t *testing.T) {
	got := Nearest("demo-wbe.service", []string{"demo-web.service", "demo-worker.service", "cron.service", "demo-web.socket"}, 3, 2)
	if fmt.Sprint(got) != "[demo-web.service]" {
		t.Errorf("Nearest = %v", got)
	}
	if got := Nearest("othr", []string{"alpha", "other", "mother"}, 2, 2); fmt.Sprint(got) != "[other mother]" {
		t.Errorf("Nearest = %v", got)
	}
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "abc", 3}, {"kitten", "sitting", 3}, {"same", "same", 0}} {
		if d := Distance(c.a, c.b); d != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
}
