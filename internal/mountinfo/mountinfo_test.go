package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	table := `26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
40 26 0:37 /sub /mnt/a\040b rw shared:1 master:2 - overlay strata ro,lowerdir=/x
`
	ms, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("%d mounts, want 2", len(ms))
	}
	want := Mount{ID: 40, Parent: 26, Root: "/sub", Point: "/mnt/a b", FSType: "overlay", Source: "strata", Options: "ro,lowerdir=/x"}
	if ms[1] != want {
		t.Errorf("got %+v, want %+v", ms[1], want)
	}
	for _, bad := range []string{"26 1 254:0 / / rw", "x 1 254:0 / / rw - ext4 /dev/vda rw", "26 1 254:0 / / rw - ext4"} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: parsed, want an error", bad)
		}
	}
}

func TestReadSelf(t *testing.T) {
	ms, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Point == "/" {
			return
		}
	}
	t.Errorf("no mount on / in %+v", ms)
}
