package overlay

import (
	"fmt"
	"testing"
)

// Names map to the third field; comments, NIS entries, junk and later
// duplicates are skipped, as the files backend of getpwnam skips them.
func TestParseAccounts(t *testing.T) {
	m := parseAccounts([]byte("root:x:0:0:root:/root:/bin/sh\n# comment:x:5:\n+nis:x:7:\nbad\nneg:x:-1:\nbig:x:99999999999:\nwww-data:x:33:33::/:\nwww-data:x:44:44::/:\n:x:9:\nlast:x:1000:"))
	if got := fmt.Sprint(m); got != "map[last:1000 root:0 www-data:33]" {
		t.Errorf("parsed %s", got)
	}
}
