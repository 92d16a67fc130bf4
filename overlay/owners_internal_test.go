package overlay

import (
	"fmt"
	"testing"
)

// Names map to the third field; comments and NIS entries are skipped; a
// name listed twice with different ids, or with an id that is no number,
// cannot be resolved, and says why.
func TestParseAccounts(t *testing.T) {
	f := parseAccounts([]byte("root:x:0:0:root:/root:/bin/sh\n# comment:x:5:\n+nis:x:7:\nbad\nneg:x:-1:\nbig:x:99999999999:\nwww-data:x:33:33::/:\nwww-data:x:33:33::/:\nalice:x:1000:\nalice:x:0:\n:x:9:\nlast:x:1000:"))
	if got := fmt.Sprint(f.ids); got != "map[last:1000 root:0 www-data:33]" {
		t.Errorf("ids %s", got)
	}
	want := map[string]string{
		"bad":   `has an entry for "bad" without an id`,
		"neg":   `gives "neg" the id "-1", which is not a whole number below 2^31`,
		"big":   `gives "big" the id "99999999999", which is not a whole number below 2^31`,
		"alice": `lists "alice" twice (ids 1000 and 0)`,
	}
	if fmt.Sprint(f.bad) != fmt.Sprint(want) {
		t.Errorf("bad %v, want %v", f.bad, want)
	}
}
