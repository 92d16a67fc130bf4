package nudge

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/sign"
)

func key(t *testing.T) (*sign.Key, *sign.KeySet) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "k")
	if err := sign.Generate(p); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(p + ".key")
	if err != nil {
		t.Fatal(err)
	}
	ks, err := k.PublicKeySet()
	if err != nil {
		t.Fatal(err)
	}
	return k, ks
}

// A nudge holds within its window and no further ahead than MaxAhead:
// one dated minutes ahead would block genuine nudges until its time.
func TestVerifyTime(t *testing.T) {
	k, ks := key(t)
	now := time.Now()
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{now, ""},
		{now.Add(-4 * time.Minute), ""},
		{now.Add(MaxAhead - time.Second), ""},
		{now.Add(-Window - time.Minute), "ago by this clock"},
		{now.Add(MaxAhead + 2*time.Second), "ahead of this clock"},
		{now.Add(4 * time.Minute), "ahead of this clock"},
	} {
		n, err := Sign(k, "demo", c.at)
		if err != nil {
			t.Fatal(err)
		}
		err = n.Verify(ks, "demo", now)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("nudge at %s: %v", c.at.Sub(now), err)
		case c.want != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("nudge at %s: %v, want refused %q", c.at.Sub(now), err, c.want)
		}
	}
}

// Nudges decode strictly, as every other document.
func TestParseStrict(t *testing.T) {
	k, _ := key(t)
	n, _ := Sign(k, "demo", time.Now())
	good, _ := json.Marshal(n)
	if _, err := Parse(good); err != nil {
		t.Fatalf("a good nudge: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(string(good), `{"line"`, `{"extra":1,"line"`, 1),
		strings.Replace(string(good), `{"line":"demo"`, `{"line":"demo","line":"other"`, 1),
		strings.Replace(string(good), `"line"`, `"LINE"`, 1),
		string(good) + "x",
	} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrRefused) {
			t.Errorf("Parse(%s) = %v, want refused", bad, err)
		}
	}
	if _, err := Parse(make([]byte, MaxSize+1)); !errors.Is(err, ErrRefused) {
		t.Errorf("an oversized nudge: %v", err)
	}
}
